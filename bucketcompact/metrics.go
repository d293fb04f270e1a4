package bucketcompact

import "github.com/prometheus/client_golang/prometheus"

func desc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc("heatscope_compactor_"+name, help, nil, nil)
}

var (
	descPasses         = desc("passes_total", "Compaction passes run.")
	descFailedPasses   = desc("failed_passes_total", "Compaction passes that ended with an error.")
	descLastSuccess    = desc("last_success_timestamp_seconds", "When the last pass succeeded (Unix seconds; 0: never).")
	descMerges         = desc("merges_total", "Merged blocks uploaded.")
	descMergedParents  = desc("merged_parents_total", "Blocks merged into larger ones.")
	descMarked         = desc("deletion_marks_total", "Blocks marked for deletion: merged away (the merged block's meta is their mark) or expired by retention (a deletion-mark.json each).")
	descDeleted        = desc("deleted_blocks_total", "Marked blocks deleted after the delete delay.")
	descPartialDeleted = desc("partial_uploads_deleted_total", "Partial uploads (data without meta.json) deleted.")
	descCorrupt        = desc("corrupt_blocks_total", "Blocks skipped as unreadable (each named in the log).")
	descRequests       = prometheus.NewDesc("heatscope_compactor_bucket_requests_total", "Requests to the bucket, by operation.", []string{"operation"}, nil)
	descUploadBytes    = desc("uploaded_bytes_total", "Bytes of merged blocks uploaded.")
	descDownloadBytes  = desc("downloaded_bytes_total", "Bytes of blocks downloaded to merge.")
	descBlocks         = desc("bucket_blocks", "Complete blocks in the bucket after the last pass.")
	descBucketBytes    = desc("bucket_block_bytes", "Bytes of the bucket's complete blocks after the last pass.")
	descIndexBytes     = desc("bucket_index_bytes", "Size of the bucket index last written.")
	descIndexUpdates   = desc("index_updates_total", "Bucket index rewrites between passes (heatscope compact --index-interval).")
	descLockHeld       = desc("lock_held", "1 while this compactor holds the bucket's lock, 0 while another does (or it has not taken it yet).")
)

// Collector returns the compactor's metrics.
func (c *Compactor) Collector() prometheus.Collector { return collector{c} }

type collector struct{ c *Compactor }

func (collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPasses, descFailedPasses, descLastSuccess, descMerges, descMergedParents, descMarked,
		descDeleted, descPartialDeleted, descCorrupt, descRequests, descUploadBytes, descDownloadBytes, descBlocks, descBucketBytes, descIndexBytes, descIndexUpdates, descLockHeld} {
		ch <- d
	}
}

func (m collector) Collect(ch chan<- prometheus.Metric) {
	s := &m.c.stats
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	counter(descPasses, s.passes.Load())
	counter(descFailedPasses, s.failedPasses.Load())
	gauge(descLastSuccess, s.lastSuccess.Load())
	counter(descMerges, s.merges.Load())
	counter(descMergedParents, s.mergedParents.Load())
	counter(descMarked, s.marked.Load())
	counter(descDeleted, s.deleted.Load())
	counter(descPartialDeleted, s.partialDeleted.Load())
	counter(descCorrupt, s.corrupt.Load())
	counter(descRequests, s.lists.Load(), "list")
	counter(descRequests, s.gets.Load(), "get")
	counter(descRequests, s.heads.Load(), "head")
	counter(descRequests, s.puts.Load(), "put")
	counter(descRequests, s.deletes.Load(), "delete")
	counter(descUploadBytes, s.uploadBytes.Load())
	counter(descDownloadBytes, s.dlBytes.Load())
	gauge(descBlocks, s.blocks.Load())
	gauge(descBucketBytes, s.bucketBytes.Load())
	gauge(descIndexBytes, s.indexBytes.Load())
	counter(descIndexUpdates, s.indexUpdates.Load())
	gauge(descLockHeld, s.lockHeld.Load())
}
