package prediff

import (
	"context"

	"github.com/google/pprof/profile"

	"github.com/heatscope/heatscope/profileio"
	"github.com/heatscope/heatscope/query"
	"github.com/heatscope/heatscope/store"
)

// Profiles builds two pprof profiles of the events Compare would compare
// (opts.Tree, Table and Focus are ignored): a holds the samples of every
// window before an event, b those of every window before that, each
// sample weighing its own period and labelled with its node, every
// address kept (as export's pprof), so that
// "go tool pprof -diff_base b a" shows what grew. Each profile's duration
// is the windows' total length. The Result lists the events (no tree, no
// table); with no event the profiles are empty. The windows are read
// once, as Compare reads them, and each batch is added to the profiles
// stack by stack (query.PprofAdder), not sample by sample.
func Profiles(ctx context.Context, db Reader, opts Options) (a, b *profile.Profile, res *Result, warnings store.Warnings, err error) {
	opts.Tree, opts.Table, opts.Focus = false, false, nil
	type side struct {
		b   *profileio.PprofBuilder
		add *query.PprofAdder
	}
	var sa, sb side
	var rowsA, rowsB []int32
	add := func(s *side, bt *store.Batch, rows []int32) {
		if len(rows) == 0 {
			return
		}
		if s.b == nil {
			s.b = profileio.NewPprofBuilder(bt.Weight())
			s.add = query.NewPprofAdder(s.b)
		}
		s.add.Add(bt, rows)
	}
	res, warnings, err = compare(ctx, db, opts, func(bt *store.Batch, split int64) {
		rowsA, rowsB = rowsA[:0], rowsB[:0]
		for _, i := range bt.Rows {
			if bt.T.Time[i] >= split {
				rowsA = append(rowsA, i)
			} else {
				rowsB = append(rowsB, i)
			}
		}
		add(&sb, bt, rowsB)
		add(&sa, bt, rowsA)
	})
	if err != nil {
		return nil, nil, nil, warnings, err
	}
	finish := func(bld *profileio.PprofBuilder) *profile.Profile {
		if bld == nil {
			bld = profileio.NewPprofBuilder(store.DefaultPeriodNs)
		}
		p := bld.Profile()
		p.DurationNanos = int64(len(res.Events)) * opts.Window
		return p
	}
	return finish(sa.b), finish(sb.b), res, warnings, nil
}
