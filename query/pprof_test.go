package query

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/profileio"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// TestPprofOfMatchesSampleBySample: PprofOf, which adds each batch stack
// by stack (AddPprof), builds the profile Samples with PprofBuilder.Add
// builds sample by sample, for every filter (the stack filters drop
// frames) and with container labels and unwind labels (frames marked with
// how they were found): the same samples, stacks, labels, values,
// locations, functions, mappings, period and time span. (Not the same
// bytes: the store may cut its head into a block between the two reads,
// which changes the order samples come in, hence the ids.)
func TestPprofOfMatchesSampleBySample(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixNano()
	db, _ := testStore(t, synth.Config{CPUs: 4, Hz: 99, Start: start, Seconds: 45, Stacks: 300, Containers: true, Unwind: true, Python: true})
	r := store.Range{From: start, To: start + 45*int64(time.Second)}
	for name, f := range filters {
		got, _, err := PprofOf(context.Background(), db, r, &f)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var b *profileio.PprofBuilder
		if _, err := Samples(context.Background(), db, r, &f, func(s *sample.Sample, periodNs int64) error {
			if b == nil {
				b = profileio.NewPprofBuilder(periodNs)
			}
			b.SetPeriod(periodNs)
			b.Add(s)
			return nil
		}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if b == nil {
			t.Fatalf("%s: no sample", name)
		}
		want := b.Profile()
		if err := got.CheckValid(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if g, w := canonical(got), canonical(want); len(got.Sample) == 0 || g != w {
			t.Errorf("%s: PprofOf gives\n%.2000s\nsample by sample\n%.2000s", name, g, w)
		}
	}
}

// canonical writes a profile's content without its ids: one line per
// sample (stack, labels, values), sorted, after the profile's own fields.
func canonical(p *profile.Profile) string {
	var lines []string
	for _, s := range p.Sample {
		var l strings.Builder
		for _, loc := range s.Location {
			fmt.Fprintf(&l, "%s@%#x(%s %s);", loc.Line[0].Function.Name, loc.Address, loc.Mapping.File, loc.Mapping.BuildID)
		}
		for _, k := range slices.Sorted(maps.Keys(s.Label)) {
			fmt.Fprintf(&l, " %s=%q", k, s.Label[k])
		}
		for _, k := range slices.Sorted(maps.Keys(s.NumLabel)) {
			fmt.Fprintf(&l, " %s=%v%v", k, s.NumLabel[k], s.NumUnit[k])
		}
		fmt.Fprintf(&l, " %v", s.Value)
		lines = append(lines, l.String())
	}
	slices.Sort(lines)
	return fmt.Sprintf("period %d, time %d+%d, %d samples, %d locations, %d functions, %d mappings\n%s",
		p.Period, p.TimeNanos, p.DurationNanos, len(p.Sample), len(p.Location), len(p.Function), len(p.Mapping), strings.Join(lines, "\n"))
}

// TestUnwindMethodsSplitNothing: frames reached both ways (synth's
// Unwind) are one flame graph node, one top table row, one pprof location
// and function: the store that keeps how frames were found answers as the
// store of the same samples without, but for the pprof samples' unwind
// labels, which say what the samples' frames say.
func TestUnwindMethodsSplitNothing(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixNano()
	cfg := synth.Config{CPUs: 2, Hz: 99, Start: start, Seconds: 30, Stacks: 200}
	plain, _ := testStore(t, cfg)
	cfg.Unwind = true
	marked, all := testStore(t, cfg)
	ctx := context.Background()
	r := store.Range{From: start, To: start + 30*int64(time.Second)}
	f := &store.Filter{IncludeIdle: true}

	want, _, err := FlameGraphOf(ctx, plain, r, f)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := FlameGraphOf(ctx, marked, r, f)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(stripFP(got), stripFP(want)) {
		t.Error("the flame graph of frames marked with how they were found is not the flame graph without")
	}
	topWant, _, err := TopOf(ctx, plain, r, f, GroupNone, GroupAddresses)
	if err != nil {
		t.Fatal(err)
	}
	topGot, _, err := TopOf(ctx, marked, r, f, GroupNone, GroupAddresses)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(topGot, topWant) {
		t.Error("the top table of frames marked with how they were found is not the top table without")
	}

	pw, _, err := PprofOf(ctx, plain, r, f)
	if err != nil {
		t.Fatal(err)
	}
	pg, _, err := PprofOf(ctx, marked, r, f)
	if err != nil {
		t.Fatal(err)
	}
	if len(pg.Location) != len(pw.Location) || len(pg.Function) != len(pw.Function) {
		t.Errorf("%d locations and %d functions with methods, %d and %d without", len(pg.Location), len(pg.Function), len(pw.Location), len(pw.Function))
	}
	// The labels, by value, against the samples' own frames.
	wantLabels := map[string]int64{}
	for _, s := range all {
		table, fp := false, 0
		for _, fr := range s.Stack {
			table = table || fr.Method == sample.MethodTable
			if fr.Method == sample.MethodFP {
				fp++
				wantLabels["unwind_fp="+fr.Function]++
			}
		}
		switch {
		case fp > 0 && table:
			wantLabels["unwind=table+fp"]++
		case fp > 0:
			wantLabels["unwind=fp"]++
		case table:
			wantLabels["unwind=table"]++
		}
	}
	gotLabels := map[string]int64{}
	for _, s := range pg.Sample {
		for _, k := range []string{profileio.UnwindLabel, profileio.UnwindFPLabel} {
			for _, v := range s.Label[k] {
				gotLabels[k+"="+v] += s.Value[0]
			}
		}
		s.Label = maps.Clone(s.Label) // shared by the samples of a thread
		delete(s.Label, profileio.UnwindLabel)
		delete(s.Label, profileio.UnwindFPLabel)
	}
	if wantLabels["unwind=table+fp"] == 0 || wantLabels["unwind=table"] == 0 || !maps.Equal(gotLabels, wantLabels) {
		t.Errorf("unwind labels %v, want %v", gotLabels, wantLabels)
	}
	// Without its unwind labels, the profile is the one without methods
	// (samples that differed only in them merge).
	if g, w := canonicalMerged(pg), canonicalMerged(pw); g != w {
		t.Errorf("without its unwind labels the profile differs:\n%.2000s\nwant\n%.2000s", g, w)
	}
}

// stripFP returns n with every node's FP zeroed (a copy).
func stripFP(n *Node) *Node {
	c := *n
	c.FP = 0
	c.Children = nil
	for _, k := range n.Children {
		c.Children = append(c.Children, stripFP(k))
	}
	return &c
}

// canonicalMerged is canonical with samples of the same stack and labels
// summed.
func canonicalMerged(p *profile.Profile) string {
	lines := strings.Split(canonical(p), "\n")
	sums := map[string][2]int64{}
	for _, l := range lines[1:] {
		i := strings.LastIndex(l, " [")
		var v [2]int64
		fmt.Sscanf(l[i:], " [%d %d]", &v[0], &v[1])
		s := sums[l[:i]]
		sums[l[:i]] = [2]int64{s[0] + v[0], s[1] + v[1]}
	}
	out := []string{}
	for _, k := range slices.Sorted(maps.Keys(sums)) {
		out = append(out, fmt.Sprintf("%s %v", k, sums[k]))
	}
	return strings.Join(out, "\n")
}

// framePointerCounts returns, for each node of a flame graph
// (";comm;root;...;frame"), how many of its samples reached its frame by
// frame pointers, when any did, checking that never more than its
// samples did.
func framePointerCounts(t *testing.T, root *Node) map[string]int64 {
	t.Helper()
	got := map[string]int64{}
	var walk func(n *Node, prefix string)
	walk = func(n *Node, prefix string) {
		if n.Kind != "root" {
			prefix += ";" + n.Name
		}
		if n.FP > 0 {
			got[prefix] = n.FP
		}
		if n.FP > n.Value {
			t.Errorf("%s: %d samples reached by frame pointers of %d", prefix, n.FP, n.Value)
		}
		for _, c := range n.Children {
			walk(c, prefix)
		}
	}
	walk(root, "")
	return got
}

// framePointerPaths counts framePointerCounts' answer from the samples.
func framePointerPaths(all []sample.Sample, f *store.Filter, r store.Range) map[string]int64 {
	want := map[string]int64{}
	for i := range all {
		s := &all[i]
		if s.Time < r.From || s.Time >= r.To || !keeps(f, s) {
			continue
		}
		path := ";" + s.Comm
		kept := keptFrames(f, s)
		for j := len(kept) - 1; j >= 0; j-- {
			path += ";" + kept[j].Name()
			if kept[j].Method == sample.MethodFP {
				want[path]++
			}
		}
	}
	return want
}

// firstDiff lists up to 5 keys whose values differ.
func firstDiff(got, want map[string]int64) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if got[k] != want[k] && len(out) < 5 {
			out = append(out, fmt.Sprintf("%s: %d, want %d", k, got[k], want[k]))
		}
	}
	return out
}

// BenchmarkFlameGraphUnwind builds the flame graph of 10 s of 4 CPUs
// (2000 stacks) whose frames say nothing of how they were found ("plain")
// and of the same samples with synth's Unwind marks ("unwind": a third of
// the samples with frames found with frame pointers, counted per node).
func BenchmarkFlameGraphUnwind(b *testing.B) {
	start := int64(1795237380e9)
	r := store.Range{From: start, To: start + 11e9}
	for _, unwind := range []bool{false, true} {
		db, _ := testStore(b, synth.Config{CPUs: 4, Hz: 99, Start: start, Seconds: 10, Stacks: 2000, Unwind: unwind})
		b.Run(map[bool]string{false: "plain", true: "unwind"}[unwind], func(b *testing.B) {
			for b.Loop() {
				if _, _, err := FlameGraphOf(context.Background(), db, r, &store.Filter{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
