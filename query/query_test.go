package query

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// testStore fills a store with synthetic samples (some in blocks, some in
// the head) and returns them too.
func testStore(t testing.TB, cfg synth.Config) (*store.DB, []sample.Sample) {
	t.Helper()
	db, err := store.Open(t.TempDir(), store.Options{Source: "host", BlockDuration: 20 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	g := synth.New(cfg)
	var all []sample.Sample
	var s sample.Sample
	for g.Next(&s) {
		s.Time = s.Time / 1000 * 1000
		if err := db.Append(&s); err != nil {
			t.Fatal(err)
		}
		c := s
		c.Stack = slices.Clone(s.Stack)
		all = append(all, c)
	}
	return db, all
}

func isIdle(s *sample.Sample) bool {
	if !strings.HasPrefix(s.Comm, "swapper") {
		return false
	}
	return slices.ContainsFunc(s.Stack, func(f sample.Frame) bool {
		return regexp.MustCompile(`cpuidle|cpu_idle|native_safe_halt|do_idle|default_idle`).MatchString(f.Function)
	})
}

// keeps is the brute-force version of a filter.
func keeps(f *store.Filter, s *sample.Sample) bool {
	if !f.IncludeIdle && isIdle(s) {
		return false
	}
	if f.Comm != "" && s.Comm != f.Comm || len(f.PIDs) > 0 && !slices.Contains(f.PIDs, s.PID) ||
		len(f.CPUs) > 0 && !slices.Contains(f.CPUs, s.CPU) {
		return false
	}
	kept := keptFrames(f, s)
	if len(kept) == 0 && f.Stack != store.AllFrames {
		return false
	}
	if f.Frame != nil && !slices.ContainsFunc(kept, func(fr sample.Frame) bool {
		return f.Frame.MatchString(fr.Function) || fr.Kind == sample.KindPython && f.Frame.MatchString(fr.Name())
	}) {
		return false
	}
	return true
}

func keptFrames(f *store.Filter, s *sample.Sample) []sample.Frame {
	if f.Stack == store.AllFrames {
		return s.Stack
	}
	var out []sample.Frame
	for _, fr := range s.Stack {
		if (fr.Kind == sample.KindKernel) == (f.Stack == store.KernelFrames) {
			out = append(out, fr)
		}
	}
	return out
}

var filters = map[string]store.Filter{
	"default":     {},
	"idle":        {IncludeIdle: true},
	"comm":        {Comm: "kubelet"},
	"pid":         {PIDs: []uint32{1000, 1300}},
	"cpu":         {CPUs: []uint32{3}},
	"frame":       {Frame: regexp.MustCompile(`mem_cgroup|cgroup_rstat`)},
	"kernel":      {Stack: store.KernelFrames},
	"user":        {Stack: store.UserFrames},
	"kernel+comm": {Stack: store.KernelFrames, Comm: "kubelet", Frame: regexp.MustCompile(`^vfs_read$`)},
	// Python frames (synth's Python) by qualified name and by file.
	"python-name": {Frame: regexp.MustCompile(`^Trainer\.fit$`)},
	"python-file": {Frame: regexp.MustCompile(`/srv/model\.py`), Stack: store.UserFrames},
}

func TestHeatmapMatchesBruteForce(t *testing.T) {
	start := time.Now().Add(-time.Hour).Truncate(time.Second).UnixNano() + 300e6
	db, all := testStore(t, synth.Config{CPUs: 4, Hz: 99, Start: start, Seconds: 65, Stacks: 400, Python: true})
	r := store.Range{From: start + 2_500_000_000, To: start + 61_200_000_000}
	for name, f := range filters {
		t.Run(name, func(t *testing.T) {
			for _, rows := range []int{1, 7, 50, 100} {
				h, warnings, err := HeatmapOf(context.Background(), db, r, &f, rows)
				if err != nil || len(warnings) > 0 {
					t.Fatal(err, warnings)
				}
				startSec := math.Floor(float64(r.From) / 1e9)
				want := make([][]int, len(h.Columns))
				for c := range want {
					want[c] = make([]int, rows)
				}
				total := 0
				for i := range all {
					s := &all[i]
					if s.Time < r.From || s.Time >= r.To || !keeps(&f, s) {
						continue
					}
					sec := float64(s.Time) / 1e9
					want[int(sec-startSec)][rows-1-int(float64(rows)*math.Mod(sec, 1))]++
					total++
				}
				got := 0
				for c := range want {
					for row := range rows {
						got += h.Values[c][row]
						if h.Values[c][row] != want[c][row] {
							t.Fatalf("rows=%d cell [%d][%d] = %d, want %d", rows, c, row, h.Values[c][row], want[c][row])
						}
					}
				}
				if total == 0 && name != "kernel+comm" {
					t.Fatalf("filter selects nothing: the test proves nothing")
				}
				if h.Start != startSec || len(h.Columns) != 60 || h.Rows[0] != 1000*float64(rows-1)/float64(rows) || h.Rows[rows-1] != 0 {
					t.Fatalf("shape: start %v cols %d rows %v", h.Start, len(h.Columns), h.Rows)
				}
			}
		})
	}
}

// pathCounts folds samples into "comm;root;...;leaf" -> count.
func pathCounts(all []sample.Sample, f *store.Filter, r store.Range) map[string]int64 {
	out := map[string]int64{}
	for i := range all {
		s := &all[i]
		if s.Time < r.From || s.Time >= r.To || !keeps(f, s) {
			continue
		}
		parts := []string{s.Comm}
		kept := keptFrames(f, s)
		for j := len(kept) - 1; j >= 0; j-- {
			parts = append(parts, kept[j].Name())
		}
		out[strings.Join(parts, ";")]++
	}
	return out
}

func treePaths(n *Node, prefix []string, out map[string]int64) {
	if n.Kind != "root" {
		prefix = append(prefix, n.Name)
	}
	if n.Self > 0 {
		out[strings.Join(prefix, ";")] += n.Self
	}
	var sum int64
	for _, c := range n.Children {
		sum += c.Value
		treePaths(c, prefix, out)
	}
	if sum+n.Self != n.Value {
		panic("node value is not self plus children")
	}
}

// TestFlameGraphMatchesBruteForce: each path's samples, and each node's
// samples that reached its frame by frame pointers (synth's Unwind), are
// those of the samples, for every filter.
func TestFlameGraphMatchesBruteForce(t *testing.T) {
	start := time.Now().Add(-time.Hour).UnixNano()
	db, all := testStore(t, synth.Config{CPUs: 4, Hz: 99, Start: start, Seconds: 50, Stacks: 300, Unwind: true, Python: true})
	r := store.Range{From: start + 5e9, To: start + 45e9}
	for name, f := range filters {
		t.Run(name, func(t *testing.T) {
			root, _, err := FlameGraphOf(context.Background(), db, r, &f)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]int64{}
			treePaths(root, nil, got)
			want := pathCounts(all, &f, r)
			if len(got) != len(want) {
				t.Fatalf("%d distinct paths, want %d", len(got), len(want))
			}
			for p, n := range want {
				if got[p] != n {
					t.Fatalf("path %s: %d, want %d", p, got[p], n)
				}
			}
			gotFP, wantFP := framePointerCounts(t, root), framePointerPaths(all, &f, r)
			if !strings.HasPrefix(name, "kernel") && len(wantFP) == 0 {
				t.Fatal("no frame found with frame pointers: the counts are not tested")
			}
			if !maps.Equal(gotFP, wantFP) {
				t.Errorf("%d nodes with frames reached by frame pointers, want %d; first differences: %v", len(gotFP), len(wantFP), firstDiff(gotFP, wantFP))
			}
		})
	}
}

func TestTopAndDiff(t *testing.T) {
	start := time.Now().Add(-time.Hour).UnixNano()
	db, all := testStore(t, synth.Config{CPUs: 2, Hz: 99, Start: start, Seconds: 40, Stacks: 200, Python: true})
	f := store.Filter{}
	a := store.Range{From: start, To: start + 10e9}
	b := store.Range{From: start + 10e9, To: start + 30e9}
	top, _, err := TopOf(context.Background(), db, a, &f, GroupNone, GroupAddresses)
	if err != nil {
		t.Fatal(err)
	}
	self := map[string]int64{}
	var n int64
	for i := range all {
		s := &all[i]
		if s.Time >= a.From && s.Time < a.To && keeps(&f, s) {
			self[s.Stack[0].Name()]++
			n++
		}
	}
	if top.Samples != n {
		t.Fatalf("top covers %d samples, want %d", top.Samples, n)
	}
	for _, fn := range top.Functions {
		if fn.Self != self[fn.Name] || fn.Total < fn.Self {
			t.Fatalf("%s: self %d total %d, want self %d", fn.Name, fn.Self, fn.Total, self[fn.Name])
		}
	}
	if !slices.IsSortedFunc(top.Functions, func(x, y Function) int { return int(y.Self - x.Self) }) {
		t.Fatal("top functions not sorted by self")
	}

	// By totals (FlameScope's) and by the windows' lengths.
	for _, norm := range []Normalization{ByTotals, ByLength} {
		d, _, err := DiffOf(context.Background(), db, a, b, &f, norm, GroupAddresses)
		if err != nil {
			t.Fatal(err)
		}
		// One period throughout: the CPU time is the count times it.
		if d.SamplesA != n || d.TotalA != n*store.DefaultPeriodNs || d.TotalB != d.SamplesB*store.DefaultPeriodNs || d.TotalB == 0 ||
			d.Root.A != d.TotalA || d.Root.B != d.TotalB {
			t.Fatalf("diff totals %d/%d ns in %d/%d samples, root %d/%d", d.TotalA, d.TotalB, d.SamplesA, d.SamplesB, d.Root.A, d.Root.B)
		}
		weight := float64(d.TotalA) / float64(d.TotalB)
		if norm == ByLength {
			weight = float64(a.To-a.From) / float64(b.To-b.From)
		}
		var check func(n *DiffNode)
		check = func(n *DiffNode) {
			if want := n.SelfA - int64(math.Round(float64(n.SelfB)*weight)); n.Delta != want {
				t.Fatalf("normalization %d, %s: delta %d, want %d", norm, n.Name, n.Delta, want)
			}
			if want := n.A - int64(math.Round(float64(n.B)*weight)); n.DeltaTotal != want {
				t.Fatalf("normalization %d, %s: total delta %d, want %d", norm, n.Name, n.DeltaTotal, want)
			}
			for _, c := range n.Children {
				check(c)
			}
		}
		check(d.Root)
	}
	for _, v := range []string{"tota", "LENGTH", "1"} {
		var pe *ParamError
		if _, err := ParseNormalization(v); !errors.As(err, &pe) || pe.Param != "normalize" {
			t.Errorf("ParseNormalization(%q) = %v, want an error naming normalize", v, err)
		}
	}
}

func TestTimelineFastPathMatchesScan(t *testing.T) {
	start := time.Now().Add(-2 * time.Hour).Truncate(10 * time.Second).UnixNano()
	db, all := testStore(t, synth.Config{CPUs: 2, Hz: 99, Start: start, Seconds: 200, Stacks: 100})
	step := int64(20e9)
	r := store.Range{From: start, To: start + 200e9}
	for name, f := range map[string]store.Filter{"default": {}, "idle": {IncludeIdle: true}, "comm": {Comm: "java"}} {
		tl, _, err := db.Timeline(context.Background(), r, step, &f)
		if err != nil {
			t.Fatal(err)
		}
		counts := tl.Samples
		want := make([]int64, len(counts))
		for i := range all {
			if s := &all[i]; s.Time >= r.From && s.Time < r.To && keeps(&f, s) {
				want[(s.Time-r.From)/step]++
			}
		}
		if !slices.Equal(counts, want) {
			t.Fatalf("%s: timeline %v, want %v", name, counts, want)
		}
	}
}

func TestPerCPUMatchesBruteForce(t *testing.T) {
	start := time.Now().Add(-time.Hour).UnixNano() + 123_456_000
	db, all := testStore(t, synth.Config{CPUs: 4, Hz: 99, Start: start, Seconds: 45, Stacks: 300, Python: true})
	r := store.Range{From: start + 2_250_000_000, To: start + 41_700_000_000}
	for name, f := range filters {
		t.Run(name, func(t *testing.T) {
			for _, step := range []int64{10e6, 333e6, 1e9, 7e9, 100e9} {
				p, warnings, err := PerCPUOf(context.Background(), db, r, &f, step)
				if err != nil || len(warnings) > 0 {
					t.Fatal(err, warnings)
				}
				n := int((r.To - r.From + step - 1) / step)
				want := map[uint32][]int{}
				total := 0
				for i := range all {
					s := &all[i]
					if s.Time < r.From || s.Time >= r.To || !keeps(&f, s) {
						continue
					}
					if want[s.CPU] == nil {
						want[s.CPU] = make([]int, n)
					}
					want[s.CPU][(s.Time-r.From)/step]++
					total++
				}
				if total == 0 && name != "kernel+comm" {
					t.Fatal("filter selects nothing: the test proves nothing")
				}
				if p.Start != float64(r.From)/1e9 || p.Step != float64(step)/1e9 || len(p.CPUs) != len(want) || len(p.Counts) != len(want) {
					t.Fatalf("step %d: start %v step %v cpus %v, want %d CPUs", step, p.Start, p.Step, p.CPUs, len(want))
				}
				if !slices.IsSorted(p.CPUs) {
					t.Fatalf("CPUs not sorted: %v", p.CPUs)
				}
				for i, cpu := range p.CPUs {
					if !slices.Equal(p.Counts[i], want[cpu]) {
						t.Fatalf("step %d CPU %d: %v, want %v", step, cpu, p.Counts[i], want[cpu])
					}
				}
				if name == "cpu" && !slices.Equal(p.CPUs, []uint32{3}) {
					t.Fatalf("cpu filter: CPUs %v", p.CPUs)
				}
			}
		})
	}
	for _, step := range []int64{0, -1, 1e6} { // 1 ms: 39 450 steps
		if _, _, err := PerCPUOf(context.Background(), db, r, &store.Filter{}, step); err == nil {
			t.Errorf("step %d accepted", step)
		}
	}
}
