package bucketstore

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/heatscope/heatscope/internal/miniotest"
	"github.com/heatscope/heatscope/internal/storetest"
	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/store"
)

// TestDiskCache: a query service with a disk cache, restarted, answers the
// same query without a GET; a cache file damaged on disk is read again
// from the bucket, not taken for a damaged block; the cache stays within
// its bound.
func TestDiskCache(t *testing.T) {
	m := miniotest.Start(t)
	bkt := m.Open("")
	dir, n := record(t, "node-a", nil, synth.Config{CPUs: 4, Hz: 99, Start: start, Seconds: 120, Seed: 1})
	ids := upload(t, bkt, "node-a", dir)
	cacheDir := t.TempDir()
	query := func(limit int64) (*Source, int) {
		t.Helper()
		disk, err := OpenDiskCache(cacheDir, limit, quiet())
		if err != nil {
			t.Fatal(err)
		}
		src := New(bkt, bkt.Name(), Options{DiskCache: disk, IndexMaxAge: -1})
		db := storetest.OpenReader(t, src)
		defer db.Close()
		got, warnings, err := count(t, db, store.Filter{})
		if err != nil || len(warnings) > 0 {
			t.Fatalf("select: %v, warnings %v", err, warnings)
		}
		return src, got["node-a"]
	}
	first, got := query(1 << 30)
	if got != n || first.Stats().Gets < uint64(2*len(ids)) || first.Stats().DiskHits != 0 {
		t.Fatalf("first run: %d samples (want %d), stats %+v: want a meta and a data GET a block, no disk hit", got, n, first.Stats())
	}
	cached := first.Stats().DiskCacheBytes
	again, got := query(1 << 30)
	if st := again.Stats(); got != n || st.Gets != 0 || st.DiskHits < uint64(2*len(ids)) || st.DiskCacheBytes != cached {
		t.Fatalf("after a restart: %d samples (want %d), stats %+v: want no GET, every meta and range from disk (%d bytes)", got, n, st, cached)
	}

	files, _ := filepath.Glob(filepath.Join(cacheDir, "*"))
	var largest int64
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		largest = max(largest, st.Size())
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 10_000 { // a data range, not a meta: damage it
			b[len(b)/2] ^= 0xff
			if err := os.WriteFile(f, b, 0o600); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	repaired, got := query(1 << 30)
	if st := repaired.Stats(); got != n || st.Gets != 1 {
		t.Fatalf("with a damaged cache file: %d samples (want %d), stats %+v: want one GET, the damaged range's", got, n, st)
	}

	small := largest + 1000
	bounded, got := query(small)
	var onDisk int64
	files, _ = filepath.Glob(filepath.Join(cacheDir, "*"))
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		onDisk += st.Size()
	}
	if got != n || onDisk > small || bounded.Stats().DiskCacheBytes != onDisk {
		t.Errorf("bounded to %d bytes: %d samples (want %d), %d bytes on disk, %d counted", small, got, n, onDisk, bounded.Stats().DiskCacheBytes)
	}
	if _, err := OpenDiskCache(cacheDir, 0, quiet()); err == nil {
		t.Error("a cache of 0 bytes opened")
	}
}
