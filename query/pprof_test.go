package query

import (
	"context"
	"fmt"
	"maps"
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
// frames) and with container labels: the same samples, stacks, labels,
// values, locations, functions, mappings, period and time span. (Not the
// same bytes: the store may cut its head into a block between the two
// reads, which changes the order samples come in, hence the ids.)
func TestPprofOfMatchesSampleBySample(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixNano()
	db, _ := testStore(t, synth.Config{CPUs: 4, Hz: 99, Start: start, Seconds: 45, Stacks: 300, Containers: true})
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
