package query

import (
	"github.com/google/pprof/profile"

	"github.com/heatscope/heatscope/profileio"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// PprofAdder adds batches of samples to one pprof builder: the profile
// Samples and PprofBuilder.Add would build sample by sample, but each
// frame, stack and thread of a block's tables (which all its chunks
// share) is turned into locations and labels once, instead of rebuilding
// every sample's frames and hashing their strings per sample. Frames a
// batch's KeepFrame leaves out are left out of the stacks, as Samples
// does.
type PprofAdder struct {
	b       *profileio.PprofBuilder
	frames  map[*store.Frame]*profile.Location
	stacks  map[stackRef]located
	threads map[*store.Thread]*sample.Sample
}

// located is a stack as the builder takes it: its locations, and its
// frames marked with how they were found (for the unwind labels; nil for
// most stacks).
type located struct {
	locs   []*profile.Location
	marked []sample.Frame
}

// stackRef is a stack of one table under one frame mask.
type stackRef struct {
	start *uint32 // the table's StackStart
	keep  *bool   // the batch's KeepFrame, nil for every frame
	id    uint32
}

// NewPprofAdder returns an adder to b.
func NewPprofAdder(b *profileio.PprofBuilder) *PprofAdder {
	return &PprofAdder{b: b, frames: map[*store.Frame]*profile.Location{}, stacks: map[stackRef]located{},
		threads: map[*store.Thread]*sample.Sample{}}
}

// Add adds rows of batch bt (indices into bt.T, in the order given),
// each weighing bt's period.
func (a *PprofAdder) Add(bt *store.Batch, rows []int32) {
	t := bt.T
	a.b.SetPeriod(bt.Weight())
	var keep *bool
	if len(bt.KeepFrame) > 0 {
		keep = &bt.KeepFrame[0]
	}
	var s sample.Sample
	for _, i := range rows {
		ref := stackRef{start: &t.StackStart[0], keep: keep, id: t.Stack[i]}
		st, ok := a.stacks[ref]
		if !ok {
			ids := t.StackOf(ref.id)
			st.locs = make([]*profile.Location, 0, len(ids))
			for _, id := range ids {
				if bt.KeepFrame != nil && !bt.KeepFrame[id] {
					continue
				}
				loc := a.frames[&t.Frames[id]]
				if loc == nil {
					f := t.FrameOf(id)
					loc = a.b.Location(&f)
					a.frames[&t.Frames[id]] = loc
				}
				st.locs = append(st.locs, loc)
				if t.Frames[id].Method != sample.MethodNotKnown {
					st.marked = append(st.marked, t.FrameOf(id))
				}
			}
			a.stacks[ref] = st
		}
		th := a.threads[&t.Threads[t.Thread[i]]]
		if th == nil {
			info := t.Threads[t.Thread[i]]
			th = &sample.Sample{PID: info.PID, TID: info.TID, Comm: t.Strings[info.Comm], CgroupID: info.Cgroup,
				Container: t.ContainerOf(info), Node: bt.Node}
			a.threads[&t.Threads[t.Thread[i]]] = th
		}
		s = *th
		s.Time, s.CPU, s.Stack = t.Time[i], t.CPU[i], st.marked
		a.b.AddLocated(&s, st.locs)
	}
}
