package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heatscope/heatscope/bucketstore"
)

// The query service's reads of a bucket.
var (
	descBucketLists    = desc("bucket_read_lists_total", "LIST requests the query service sent to its bucket.")
	descBucketGets     = desc("bucket_read_gets_total", "GET requests (whole objects and ranges) the query service sent to its bucket.")
	descBucketGetBytes = desc("bucket_read_bytes_total", "Bytes the query service's GETs read from its bucket.")
	descBucketTailHits = desc("bucket_read_tail_hits_total", "Reads of a block's tail (its indexes) answered from the query service's cache.")
	descBucketErrors   = desc("bucket_read_errors_total", "Requests to the bucket that failed (not found, unreachable, refused).")
	descBucketTailMem  = desc("bucket_read_tail_cache_bytes", "Memory of the fetched blocks and block tails the query service keeps (whole blocks up to 1 MiB, else their tails).")
	descBucketIndex    = desc("bucket_read_index_reads_total", "Bucket index GETs by the query service (one a refresh while the compactor keeps the index fresh).")
	descBucketListings = desc("bucket_read_listings_total", "Refreshes that listed every node's prefix instead of reading the bucket index (none, stale or unreadable).")
	descBucketDiskHits = desc("bucket_read_disk_cache_hits_total", "Reads of block data and metas answered by the query service's disk cache (--objstore-cache-dir) instead of a GET.")
	descBucketDiskSize = desc("bucket_read_disk_cache_bytes", "Bytes in the query service's disk cache (--objstore-cache-dir; 0 without one).")
	descBucketSilent   = desc("bucket_read_unanswered_seconds", "How long the query service's bucket has not answered (0 while it answers): its answers meanwhile come from what it read before, each with a Warning.")
	descBucketListed   = desc("bucket_read_last_listing_timestamp_seconds", "When the query service last listed its bucket's blocks whole (Unix seconds; 0: never): blocks uploaded since are not known.")
	bucketDescriptions = []*prometheus.Desc{descBucketLists, descBucketGets, descBucketGetBytes, descBucketTailHits, descBucketErrors, descBucketTailMem,
		descBucketIndex, descBucketListings, descBucketDiskHits, descBucketDiskSize, descBucketSilent, descBucketListed}
)

// unixSeconds is t in Unix seconds, 0 for the zero time.
func unixSeconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixMilli()) / 1000
}

// RegisterBucketReads adds the counters of a query service's reads of its
// bucket, read from stats at scrape time. They name no bucket and no
// object: nothing of the config (let alone a credential) is in /metrics.
func (m *Metrics) RegisterBucketReads(stats func() bucketstore.Stats) error {
	return m.Register(tableCollector{descs: bucketDescriptions, read: func() []constMetric {
		st := stats()
		return []constMetric{
			{descBucketLists, prometheus.CounterValue, float64(st.Lists)},
			{descBucketGets, prometheus.CounterValue, float64(st.Gets)},
			{descBucketGetBytes, prometheus.CounterValue, float64(st.GetBytes)},
			{descBucketTailHits, prometheus.CounterValue, float64(st.TailHits)},
			{descBucketErrors, prometheus.CounterValue, float64(st.Errors)},
			{descBucketTailMem, prometheus.GaugeValue, float64(st.TailCacheBytes)},
			{descBucketIndex, prometheus.CounterValue, float64(st.IndexReads)},
			{descBucketListings, prometheus.CounterValue, float64(st.Listings)},
			{descBucketDiskHits, prometheus.CounterValue, float64(st.DiskHits)},
			{descBucketDiskSize, prometheus.GaugeValue, float64(st.DiskCacheBytes)},
			{descBucketSilent, prometheus.GaugeValue, st.Unanswered.Seconds()},
			{descBucketListed, prometheus.GaugeValue, unixSeconds(st.Listed)},
		}
	}})
}
