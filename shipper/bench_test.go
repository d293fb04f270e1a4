package shipper_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/miniotest"
	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/shipper"
	"github.com/heatscope/heatscope/store"
)

// BenchmarkShipBlock ships one 45 s block of 8 CPUs at 99 Hz (the block a
// recorder with a bucket cuts) to a real MinIO per op, and reports the
// shipper's CPU time per block (user+system of this process, which is the
// client only: MinIO runs in its own) and that as a share of one CPU at
// one block every 45 s.
func BenchmarkShipBlock(b *testing.B) {
	srv := miniotest.Start(b)
	bkt := srv.Open("bench")
	dir := b.TempDir()
	var sh *shipper.Shipper
	db, err := store.Open(dir, store.Options{Source: "node-a", Node: "node-a", BlockDuration: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	benchRecord(b, db, time.Now().Add(-10*time.Minute).UnixNano(), 45)
	db.Close()
	entries, _ := os.ReadDir(filepath.Join(dir, "blocks"))
	if len(entries) != 1 {
		b.Fatalf("%d blocks, want 1: %v", len(entries), entries)
	}
	st, _ := os.Stat(filepath.Join(dir, "blocks", entries[0].Name(), "data"))
	b.SetBytes(st.Size())
	ctx := context.Background()
	var cpu time.Duration
	for b.Loop() {
		os.Remove(filepath.Join(dir, shipper.StateFile))
		sh, err = shipper.New(shipper.Options{Bucket: bkt, BucketName: bkt.Name(), Dir: dir, Node: "node-a"})
		if err != nil {
			b.Fatal(err)
		}
		before := cpuTime()
		if err := sh.Sync(ctx); err != nil {
			b.Fatal(err)
		}
		cpu += cpuTime() - before
		if sh.Stats().BlocksShipped != 1 {
			b.Fatalf("shipped %d blocks", sh.Stats().BlocksShipped)
		}
	}
	perBlock := cpu / time.Duration(b.N)
	b.ReportMetric(float64(perBlock.Microseconds()), "cpu-µs/block")
	b.ReportMetric(100*perBlock.Seconds()/45, "%cpu@45s")
	b.ReportMetric(float64(st.Size()), "bytes/block")
}

// benchRecord appends seconds of 8 CPUs at 99 Hz, busy (no idle samples).
func benchRecord(b *testing.B, db *store.DB, start int64, seconds float64) {
	g := synth.New(synth.Config{CPUs: 8, Hz: 99, Start: start, Seconds: seconds, Stacks: 5000, IdleShare: 0.0001, Containers: true})
	var s sample.Sample
	for g.Next(&s) {
		s.Time = s.Time / 1000 * 1000
		if err := db.Append(&s); err != nil {
			b.Fatal(err)
		}
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
