package query

import (
	"context"

	"github.com/google/pprof/profile"

	"github.com/heatscope/heatscope/profileio"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// Samples calls fn with every sample in r that passes f, rebuilt as a
// sample.Sample with the frames the filter's stack part keeps, and the CPU
// time in nanoseconds it stands for (its own sampling period). Samples come
// a chunk at a time, chunks in time order (within a chunk, CPU by CPU).
func Samples(ctx context.Context, db Selector, r store.Range, f *store.Filter, fn func(s *sample.Sample, periodNs int64) error) (store.Warnings, error) {
	return db.Select(ctx, r, f, func(b *store.Batch) error {
		period := b.Weight()
		for _, i := range b.Rows {
			s := b.T.Sample(int(i))
			s.Node = b.Node
			if b.KeepFrame != nil {
				ids := b.T.StackOf(b.T.Stack[i])
				kept := s.Stack[:0]
				for j, id := range ids {
					if b.KeepFrame[id] {
						kept = append(kept, s.Stack[j])
					}
				}
				s.Stack = kept
			}
			if err := fn(&s, period); err != nil {
				return err
			}
		}
		return nil
	})
}

// PprofOf builds a pprof profile of the samples in r that pass f, each
// sample's CPU time its own sampling period. The profile's Period is the
// first sample's. It is the profile Samples and PprofBuilder.Add build,
// batch by batch (PprofAdder).
func PprofOf(ctx context.Context, db Selector, r store.Range, f *store.Filter) (*profile.Profile, store.Warnings, error) {
	var b *profileio.PprofBuilder
	var add *PprofAdder
	warnings, err := db.Select(ctx, r, f, func(bt *store.Batch) error {
		if len(bt.Rows) == 0 {
			return nil
		}
		if b == nil {
			b = profileio.NewPprofBuilder(bt.Weight())
			add = NewPprofAdder(b)
		}
		add.Add(bt, bt.Rows)
		return nil
	})
	if b == nil {
		b = profileio.NewPprofBuilder(store.DefaultPeriodNs)
	}
	if err != nil {
		return nil, warnings, err
	}
	return b.Profile(), warnings, nil
}
