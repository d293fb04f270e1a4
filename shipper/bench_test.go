package shipper_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
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
	blocks, _ := store.LocalBlocks(dir)
	if len(blocks) != 1 {
		b.Fatalf("%d blocks, want 1: %v", len(blocks), blocks)
	}
	st, _ := os.Stat(blocks[0].DataPath())
	b.SetBytes(st.Size())
	ctx := context.Background()
	var cpu time.Duration
	for b.Loop() {
		os.Remove(filepath.Join(dir, shipper.StateFile))
		sh, err = shipper.New(shipper.Options{Bucket: bkt, BucketName: bkt.Name(), Dir: dir, Node: "node-a", Instance: testInstance})
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

// BenchmarkShipperMemory measures the memory that shipping adds to a
// process such as the recorder: the S3 client and the shipper, shipping a
// data directory's ten 45 s blocks (8 CPUs at 99 Hz) to a real MinIO per
// op, over HTTPS (as S3, GCS and Azure are reached) and over plain HTTP
// (a MinIO on loopback: there the client signs the body in 64 KiB chunks,
// streaming, which allocates about 400 KB a block more). Before each op
// the heap is collected and returned to the OS and the peak RSS reset
// (/proc/self/clear_refs); it reports the peak RSS above the level before
// (peak-MB: what shipping costs the recorder at its worst), the RSS left
// once the op's garbage is collected with the client and shipper still
// alive (retained-MB), and the live heap the client and shipper hold then
// (heap-KB).
func BenchmarkShipperMemory(b *testing.B) {
	b.Run("https", func(b *testing.B) { benchShipperMemory(b, miniotest.StartTLS(b)) })
	b.Run("http", func(b *testing.B) { benchShipperMemory(b, miniotest.Start(b)) })
}

func benchShipperMemory(b *testing.B, srv *miniotest.Server) {
	dir := b.TempDir()
	db, err := store.Open(dir, store.Options{Source: "node-a", Node: "node-a", BlockDuration: 45 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now().Add(-time.Hour).Truncate(45 * time.Second).UnixNano()
	for i := range 10 {
		benchRecord(b, db, start+int64(i)*45e9, 45)
	}
	db.Close()
	if blocks, _ := store.LocalBlocks(dir); len(blocks) < 10 {
		b.Fatalf("%d blocks, want 10", len(blocks))
	}
	var peak, retained, heap []float64
	for i := 0; b.Loop(); i++ {
		os.Remove(filepath.Join(dir, shipper.StateFile))
		rss0, heap0 := settle(b)
		if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
			b.Skipf("cannot reset the peak RSS (/proc/self/clear_refs): %v", err)
		}
		bkt := srv.Open(fmt.Sprintf("mem-%d", i))
		sh, err := shipper.New(shipper.Options{Bucket: bkt, BucketName: bkt.Name(), Dir: dir, Node: "node-a", Instance: testInstance})
		if err != nil {
			b.Fatal(err)
		}
		if err := sh.Sync(context.Background()); err != nil {
			b.Fatal(err)
		}
		hwm := procStatus(b, "VmHWM:")
		rss1, heap1 := settle(b)
		if sh.Stats().BlocksShipped < 10 {
			b.Fatalf("shipped %d blocks", sh.Stats().BlocksShipped)
		}
		peak = append(peak, float64(hwm-rss0)/(1<<20))
		retained = append(retained, float64(rss1-rss0)/(1<<20))
		heap = append(heap, float64(int64(heap1)-int64(heap0))/(1<<10))
		runtime.KeepAlive(sh)
		bkt.Close()
	}
	b.ReportMetric(median(peak), "peak-MB")
	b.ReportMetric(median(retained), "retained-MB")
	b.ReportMetric(median(heap), "heap-KB")
}

// settle collects the garbage, returns the freed memory to the OS, and
// returns the RSS and the live heap then.
func settle(b *testing.B) (rss int64, heapLive uint64) {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return procStatus(b, "VmRSS:"), ms.HeapAlloc
}

// procStatus reads a memory line of /proc/self/status, in bytes.
func procStatus(b *testing.B, key string) int64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == key {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	b.Fatalf("no %s in /proc/self/status", key)
	return 0
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
