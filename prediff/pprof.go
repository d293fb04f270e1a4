package prediff

import (
	"context"
	"fmt"

	"github.com/google/pprof/profile"

	"github.com/heatscope/heatscope/profileio"
	"github.com/heatscope/heatscope/query"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// Profiles builds two pprof profiles of the events Compare would compare
// (opts.Tree, Table and Focus are ignored): a holds the samples of every
// window before an event, b those of every window before that, each
// sample weighing its own period and labelled with its node, every
// address kept (as export's pprof), so that
// "go tool pprof -diff_base b a" shows what grew. Each profile's duration
// is the windows' total length. The Result lists the events (no tree, no
// table); with no event the profiles are empty.
func Profiles(ctx context.Context, db *store.DB, opts Options) (a, b *profile.Profile, res *Result, warnings store.Warnings, err error) {
	opts.Tree, opts.Table, opts.Focus = false, false, nil
	if res, warnings, err = Compare(ctx, db, opts); err != nil {
		return nil, nil, nil, warnings, err
	}
	var ba, bb *profileio.PprofBuilder
	for _, e := range res.Events {
		f := opts.Filter
		f.Nodes, f.NodeRegex, f.NodeLabels = []string{e.Node}, nil, nil
		r := store.Range{From: max(0, e.Time-2*opts.Window), To: e.Time}
		if r.To <= r.From {
			continue
		}
		split := e.Time - opts.Window
		w, err := query.Samples(ctx, db, r, &f, func(s *sample.Sample, periodNs int64) error {
			bld := &bb
			if s.Time >= split {
				bld = &ba
			}
			if *bld == nil {
				*bld = profileio.NewPprofBuilder(periodNs)
			}
			(*bld).SetPeriod(periodNs)
			(*bld).Add(s)
			return nil
		})
		warnings = append(warnings, w...)
		if err != nil {
			return nil, nil, nil, warnings, fmt.Errorf("the windows before %s's event at %s: %w", e.Node, query.FormatTime(e.Time), err)
		}
	}
	finish := func(bld *profileio.PprofBuilder) *profile.Profile {
		if bld == nil {
			bld = profileio.NewPprofBuilder(store.DefaultPeriodNs)
		}
		p := bld.Profile()
		p.DurationNanos = int64(len(res.Events)) * opts.Window
		return p
	}
	return finish(ba), finish(bb), res, warnings, nil
}
