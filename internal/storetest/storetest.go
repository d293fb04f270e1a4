// Package storetest builds data directories of known samples for tests
// and benchmarks, through the store's exported API alone: the one owner
// of the synthetic stores that the store's external tests (package
// store_test) and the tests of the packages above it (overview) read. The
// store's internal tests cannot import it (it imports store); what they
// need of it they build with the store's own helpers.
package storetest

import (
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// Record opens a new data directory with opts (a logger that drops
// everything if opts has none), gives feed a function that appends a
// sample to it (failing tb on an error), and closes it, every sample
// sealed into blocks. It returns the directory.
func Record(tb testing.TB, opts store.Options, feed func(add func(*sample.Sample))) string {
	tb.Helper()
	dir := tb.TempDir()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	db, err := store.Open(dir, opts)
	if err != nil {
		tb.Fatal(err)
	}
	feed(func(s *sample.Sample) {
		if err := db.Append(s); err != nil {
			tb.Fatal(err)
		}
	})
	if err := db.Close(); err != nil {
		tb.Fatal(err)
	}
	return dir
}

// DutyNode records into a new data directory as node, with labels, in
// 20 s blocks: per CPU, a thread (comm "t<cpu>", tid 100+cpu) busy
// share[cpu] of every 100 ms and idle samples (comm "swapper/<cpu>") the
// rest, sampled every period from start for seconds, at whole µs.
func DutyNode(tb testing.TB, node string, labels map[string]string, start, seconds, period int64, share []float64) string {
	tb.Helper()
	opts := store.Options{Source: node, Node: node, NodeLabels: labels, PeriodNs: period, BlockDuration: 20 * time.Second}
	hot := []sample.Frame{{Function: "spin", Module: "/bin/spin", Kind: sample.KindUser}}
	idle := []sample.Frame{{Function: "default_idle", Module: "[kernel.kallsyms]", Kind: sample.KindKernel}}
	const tenth = int64(100 * time.Millisecond)
	return Record(tb, opts, func(add func(*sample.Sample)) {
		for ts := start; ts < start+seconds*int64(time.Second); ts += period {
			for cpu, sh := range share {
				digit := string(rune('0' + cpu))
				s := sample.Sample{Time: ts / 1000 * 1000, CPU: uint32(cpu), Comm: "swapper/" + digit, Stack: idle}
				if float64((ts-start)%tenth) < sh*float64(tenth) {
					s = sample.Sample{Time: ts / 1000 * 1000, CPU: uint32(cpu), PID: 100, TID: uint32(100 + cpu), Comm: "t" + digit, Stack: hot}
				}
				add(&s)
			}
		}
	})
}

// RecordSynth appends cfg's synthetic samples to a new data directory as
// node (its labels, blocks of blockDuration, cfg.Hz's period) and returns
// the directory with the number of samples.
func RecordSynth(tb testing.TB, node string, labels map[string]string, cfg synth.Config, blockDuration time.Duration) (string, int) {
	tb.Helper()
	opts := store.Options{Source: node, Node: node, NodeLabels: labels, PeriodNs: sample.PeriodOf(int64(cfg.Hz)), BlockDuration: blockDuration}
	n := 0
	dir := Record(tb, opts, func(add func(*sample.Sample)) {
		g := synth.New(cfg)
		var s sample.Sample
		for g.Next(&s) {
			add(&s)
			n++
		}
	})
	return dir, n
}

// ImportDir imports cfg's synthetic samples (at cfg.Hz's period) into a
// new data directory as "heatscope import" does and returns it with the
// range of its samples.
func ImportDir(tb testing.TB, cfg synth.Config) (string, store.Range) {
	tb.Helper()
	dir := tb.TempDir()
	w, err := store.Open(dir, store.Options{Source: "host", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	st, err := w.Import("synthetic", sample.PeriodOf(int64(cfg.Hz)), synth.New(cfg).Feed)
	if err != nil {
		tb.Fatal(err)
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	return dir, store.Range{From: st.First, To: st.Last + 1}
}

// Imported is ImportDir's directory opened read-only with opts, closed
// when tb ends.
func Imported(tb testing.TB, cfg synth.Config, opts store.Options) (*store.DB, store.Range) {
	tb.Helper()
	dir, r := ImportDir(tb, cfg)
	opts.ReadOnly = true
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	db, err := store.Open(dir, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db, r
}

// OpenDirs opens a Reader of the blocks of the data directories dirs,
// closed when tb ends (or before, by the caller).
func OpenDirs(tb testing.TB, dirs ...string) *store.Reader {
	tb.Helper()
	var sources []store.BlockSource
	for _, d := range dirs {
		sources = append(sources, store.DirSource(d))
	}
	return OpenReader(tb, sources...)
}

// OpenReader opens a Reader of the blocks of sources (a bucket's, a
// directory's), closed when tb ends (or before, by the caller).
func OpenReader(tb testing.TB, sources ...store.BlockSource) *store.Reader {
	tb.Helper()
	rd, err := store.OpenReader(sources, store.ReaderOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { rd.Close() })
	return rd
}

// SameNodeCPU reports whether a and b are the same node's with the same
// figures in every step.
func SameNodeCPU(a, b store.NodeCPU) bool {
	return a.Node == b.Node && slices.Equal(a.BusiestNs, b.BusiestNs) && slices.Equal(a.TotalNs, b.TotalNs) &&
		slices.Equal(a.Samples, b.Samples) && slices.Equal(a.CoveredNs, b.CoveredNs)
}

// NearNodeCPU reports whether a and b have the same samples and covered
// time in every step, and CPU times within a period a CPU (of cpus): what
// a step read from 10 s summaries and one scanned from the samples agree
// to.
func NearNodeCPU(a, b store.NodeCPU, period int64, cpus int64) bool {
	near := func(x, y []int64, within int64) bool {
		return slices.EqualFunc(x, y, func(p, q int64) bool { return max(p-q, q-p) <= within })
	}
	return a.Node == b.Node && slices.Equal(a.Samples, b.Samples) && slices.Equal(a.CoveredNs, b.CoveredNs) &&
		near(a.BusiestNs, b.BusiestNs, period) && near(a.TotalNs, b.TotalNs, cpus*period)
}
