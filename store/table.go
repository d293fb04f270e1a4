package store

import (
	"encoding/binary"
	"hash/maphash"
	"slices"
	"strings"

	"github.com/heatscope/heatscope/sample"
)

// Frame is a stack frame with its strings interned in a Table.
type Frame struct {
	// Function, Module and BuildID index Table.Strings.
	Function, Module, BuildID uint32
	// Kind is the frame's sample.Kind.
	Kind sample.Kind
	// Method is how the frame was found (sample.Frame.Method): a frame
	// reached both ways is two frames of the table, of one function.
	Method sample.Method
	// Address is the frame's module-relative address.
	Address uint64
	// Line and StartLine are the frame's source lines
	// (sample.Frame.Line): a function run at two lines is two frames
	// of the table, as a native one at two addresses is.
	Line, StartLine uint32
}

// Thread is the who of a sample: process, thread, command and cgroup.
type Thread struct {
	PID, TID uint32
	// Comm indexes Table.Strings.
	Comm   uint32
	Cgroup uint64
	// Meta is 1 + the index in Table.Cgroups of the cgroup's metadata, 0
	// when it has none. It is not stored with the thread: tables derive it
	// from the cgroup id, so a sample's labels cost nothing beyond its
	// thread id.
	Meta uint32
}

// Cgroup is the metadata of one cgroup (see sample.Container), its strings
// interned in a Table.
type Cgroup struct {
	ID uint64
	// Path, ContainerID, Runtime, PodUID, QoS, Namespace, Pod and
	// Container index Table.Strings.
	Path, ContainerID, Runtime, PodUID, QoS, Namespace, Pod, Container uint32
}

// Table holds samples in columns, with strings, frames, stacks and threads
// each stored once. The head appends to one; a block persists one; queries
// read them the same way.
//
// Stack i's frame ids, leaf first, are StackFrames[StackStart[i]:StackStart[i+1]].
type Table struct {
	Strings     []string
	Frames      []Frame
	StackStart  []uint32 // len(stacks)+1 offsets into StackFrames
	StackFrames []uint32
	Threads     []Thread
	// Cgroups holds each cgroup's metadata once, in the order first seen.
	Cgroups []Cgroup

	// Sample columns, one entry per sample.
	Time   []int64 // wall-clock Unix ns, to the microsecond
	CPU    []uint32
	Thread []uint32 // index into Threads
	Stack  []uint32 // index into stacks
}

// Len returns the number of samples.
func (t *Table) Len() int { return len(t.Time) }

// NumStacks returns the number of distinct stacks.
func (t *Table) NumStacks() int { return max(len(t.StackStart)-1, 0) }

// StackOf returns the frame ids of stack i, leaf first.
func (t *Table) StackOf(i uint32) []uint32 {
	return t.StackFrames[t.StackStart[i]:t.StackStart[i+1]]
}

// Sample rebuilds sample i as a sample.Sample.
func (t *Table) Sample(i int) sample.Sample {
	th := t.Threads[t.Thread[i]]
	ids := t.StackOf(t.Stack[i])
	stack := make([]sample.Frame, len(ids))
	for j, id := range ids {
		stack[j] = t.FrameOf(id)
	}
	return sample.Sample{Time: t.Time[i], CPU: t.CPU[i], PID: th.PID, TID: th.TID,
		Comm: t.Strings[th.Comm], CgroupID: th.Cgroup, Container: t.ContainerOf(th), Stack: stack}
}

// ContainerOf returns the metadata of th's cgroup, nil when it has none.
func (t *Table) ContainerOf(th Thread) *sample.Container {
	if th.Meta == 0 {
		return nil
	}
	c := &t.Cgroups[th.Meta-1]
	return &sample.Container{Cgroup: t.Strings[c.Path], ID: t.Strings[c.ContainerID], Runtime: t.Strings[c.Runtime],
		PodUID: t.Strings[c.PodUID], QoS: t.Strings[c.QoS], Namespace: t.Strings[c.Namespace],
		Pod: t.Strings[c.Pod], Name: t.Strings[c.Container]}
}

// FrameOf returns frame id as a sample.Frame.
func (t *Table) FrameOf(id uint32) sample.Frame {
	f := t.Frames[id]
	return sample.Frame{Function: t.Strings[f.Function], Module: t.Strings[f.Module],
		BuildID: t.Strings[f.BuildID], Address: f.Address, Kind: f.Kind, Method: f.Method,
		Line: f.Line, StartLine: f.StartLine}
}

// snapshot returns a view of t's samples and tables as they are now. Later
// appends do not change it: every column is append-only, so they write past
// the view's lengths or into new arrays.
func (t *Table) snapshot() *Table {
	c := *t
	return &c
}

// Builder appends samples to a Table, interning as it goes.
type Builder struct {
	T       Table
	strings map[string]uint32
	frames  map[Frame]uint32
	// stacks finds a stack from a hash of its frame ids (see internStack).
	stacks   map[uint64]uint32
	threads  map[Thread]uint32
	cgroups  map[uint64]uint32 // cgroup id -> Thread.Meta
	stackKey []byte
	ids      []uint32
	// byHash finds a stack from a hash of its frames' contents, so that
	// a sample whose stack was seen before costs one hash and one compare
	// instead of interning every frame (a 7x faster Append).
	byHash map[uint64]uint32
	seed   maphash.Seed
	// lastModule and lastBuildID are the string ids of the last frame's
	// module and build id (internFrame); 0, "", at first.
	lastModule, lastBuildID uint32

	// periodNs is the sampling period a WAL replay read for the samples
	// (0 when the segment names none).
	periodNs int64

	// onNew, when set, hears of every new string, frame, stack, cgroup
	// and thread as it is interned (the WAL logs them ahead of the
	// samples).
	onNew newEntries
}

// newEntries receives table entries as a Builder creates them.
type newEntries interface {
	newString(s string)
	newFrame(f Frame)
	newStack(frames []uint32)
	newThread(t Thread)
	newCgroup(c Cgroup)
}

// NewBuilder returns an empty builder. String 0 is always "".
func NewBuilder() *Builder {
	b := &Builder{
		strings: map[string]uint32{},
		frames:  map[Frame]uint32{},
		stacks:  map[uint64]uint32{},
		threads: map[Thread]uint32{},
		cgroups: map[uint64]uint32{},
		byHash:  map[uint64]uint32{},
		seed:    maphash.MakeSeed(),
	}
	b.T.StackStart = []uint32{0}
	b.internString("")
	return b
}

// table returns b's Table as it is now, for keeping once b is done with:
// a copy, since a pointer to b.T would keep b's interning maps (as large as
// the tables) for as long as the table is kept.
func (b *Builder) table() *Table {
	t := b.T
	return &t
}

// internString returns the id of s, adding a copy of it the first time:
// a name may be a slice of a larger string (a symbol table's names), which
// the table must not keep alive past the symbolizer's cache.
func (b *Builder) internString(s string) uint32 {
	if id, ok := b.strings[s]; ok {
		return id
	}
	s = strings.Clone(s)
	id := uint32(len(b.T.Strings))
	b.T.Strings = append(b.T.Strings, s)
	b.strings[s] = id
	if b.onNew != nil {
		b.onNew.newString(s)
	}
	return id
}

// internStringAgain is internString for a string that is often the one
// interned last in its place (last, a string id): that one costs a
// compare with the table's copy instead of a map lookup.
func (b *Builder) internStringAgain(s string, last *uint32) uint32 {
	if b.T.Strings[*last] == s {
		return *last
	}
	*last = b.internString(s)
	return *last
}

// internFrame returns the id of f, adding it the first time. Frames are
// keyed by their strings' ids: 32 bytes a frame, where keying them by
// their strings took 72 (a merge under churn interns a frame or more per
// process).
//
// Only a user frame keeps how it was found: a method on a kernel frame
// (from a crafted import, say) is dropped here, since the readers refuse a
// marked kernel frame as corrupt and the store must not write what it
// cannot read back.
//
// The module and build id of the frame before are checked first: the
// frames of a stack come in runs of one binary, so most frames of a new
// stack cost one map lookup (their function's) and a compare, not three
// (bench/churn case b: interning the frames of new stacks was half of
// Append's CPU, most new processes' samples being new stacks).
func (b *Builder) internFrame(f *sample.Frame) uint32 {
	method := f.Method
	if f.Kind == sample.KindKernel {
		method = sample.MethodNotKnown
	}
	fr := Frame{Function: b.internString(f.Function), Module: b.internStringAgain(f.Module, &b.lastModule),
		BuildID: b.internStringAgain(f.BuildID, &b.lastBuildID), Kind: f.Kind, Method: method, Address: f.Address,
		Line: f.Line, StartLine: f.StartLine}
	if id, ok := b.frames[fr]; ok {
		return id
	}
	id := uint32(len(b.T.Frames))
	b.T.Frames = append(b.T.Frames, fr)
	b.frames[fr] = id
	if b.onNew != nil {
		b.onNew.newFrame(fr)
	}
	return id
}

// addString appends a string as it was logged (replay keeps logged ids).
func (b *Builder) addString(s string) {
	id := uint32(len(b.T.Strings))
	b.T.Strings = append(b.T.Strings, s)
	if _, dup := b.strings[s]; !dup {
		b.strings[s] = id
	}
}

// addFrame appends a frame as it was logged.
func (b *Builder) addFrame(f Frame) {
	id := uint32(len(b.T.Frames))
	b.T.Frames = append(b.T.Frames, f)
	if _, dup := b.frames[f]; !dup {
		b.frames[f] = id
	}
}

// internStack interns a stack of frame ids (leaf first). The stacks map
// is keyed by a hash of the ids, not by a copy of them: a stack whose hash
// another stack took tries the next value, and so on (nothing is ever
// removed, so the first free value ends the search). That is 16 bytes a
// stack in the map, where a key of its own took 60 to 150.
func (b *Builder) internStack(ids []uint32) uint32 {
	key := b.stackKey[:0]
	for _, id := range ids {
		key = binary.LittleEndian.AppendUint32(key, id)
	}
	b.stackKey = key
	h := maphash.Bytes(b.seed, key)
	for ; ; h++ {
		id, ok := b.stacks[h]
		if !ok {
			break
		}
		if slices.Equal(b.T.StackOf(id), ids) {
			return id
		}
	}
	id := uint32(b.T.NumStacks())
	b.T.StackFrames = append(b.T.StackFrames, ids...)
	b.T.StackStart = append(b.T.StackStart, uint32(len(b.T.StackFrames)))
	b.stacks[h] = id
	if b.onNew != nil {
		b.onNew.newStack(ids)
	}
	return id
}

func (b *Builder) internThread(th Thread) uint32 {
	if id, ok := b.threads[th]; ok {
		return id
	}
	id := uint32(len(b.T.Threads))
	b.T.Threads = append(b.T.Threads, th)
	b.threads[th] = id
	if b.onNew != nil {
		b.onNew.newThread(th)
	}
	return id
}

// cgroupMeta returns the Thread.Meta of cgroup id, interning c as its
// metadata when the table has none yet. The first metadata seen for a
// cgroup is the table's.
func (b *Builder) cgroupMeta(id uint64, c *sample.Container) uint32 {
	if m, ok := b.cgroups[id]; ok || c == nil {
		return m
	}
	cg := Cgroup{ID: id, Path: b.internString(c.Cgroup), ContainerID: b.internString(c.ID),
		Runtime: b.internString(c.Runtime), PodUID: b.internString(c.PodUID), QoS: b.internString(c.QoS),
		Namespace: b.internString(c.Namespace), Pod: b.internString(c.Pod), Container: b.internString(c.Name)}
	b.addCgroup(cg)
	if b.onNew != nil {
		b.onNew.newCgroup(cg)
	}
	return b.cgroups[id]
}

// addCgroup appends cgroup metadata whose strings are interned already.
// A cgroup id already known keeps its first metadata.
func (b *Builder) addCgroup(c Cgroup) {
	if _, dup := b.cgroups[c.ID]; dup {
		return
	}
	b.T.Cgroups = append(b.T.Cgroups, c)
	b.cgroups[c.ID] = uint32(len(b.T.Cgroups))
}

// Append adds one sample.
func (b *Builder) Append(s *sample.Sample) {
	h := b.hashStack(s.Stack)
	stack, ok := b.byHash[h]
	if !ok || !b.sameStack(stack, s.Stack) {
		ids := b.ids[:0]
		for i := range s.Stack {
			ids = append(ids, b.internFrame(&s.Stack[i]))
		}
		b.ids = ids
		stack = b.internStack(ids)
		b.byHash[h] = stack
	}
	thread := b.internThread(Thread{PID: s.PID, TID: s.TID, Comm: b.internString(s.Comm), Cgroup: s.CgroupID,
		Meta: b.cgroupMeta(s.CgroupID, s.Container)})
	b.appendRow(s.Time, s.CPU, thread, stack)
}

// appendRow adds a sample row. Times are kept to the microsecond, the
// precision blocks store, so a sample reads back the same from the head, the
// WAL and a block.
func (b *Builder) appendRow(time int64, cpu, thread, stack uint32) {
	b.T.Time = append(b.T.Time, micros(time)*1000)
	b.T.CPU = append(b.T.CPU, cpu)
	b.T.Thread = append(b.T.Thread, thread)
	b.T.Stack = append(b.T.Stack, stack)
}

// hashStack hashes what tells stacks apart in practice: each frame's
// address, kind, method, line and function name. sameStack checks the rest, so a
// collision only costs a slower Append.
func (b *Builder) hashStack(frames []sample.Frame) uint64 {
	h := uint64(len(frames))
	for i := range frames {
		f := &frames[i]
		h ^= maphash.String(b.seed, f.Function) + f.Address*0x9e3779b97f4a7c15 + uint64(f.Kind) + uint64(f.Method)<<8 + uint64(f.Line)<<16
		h = (h << 27) | (h >> 37)
		h *= 0x94d049bb133111eb
	}
	return h
}

// sameStack reports whether stack id holds exactly these frames.
func (b *Builder) sameStack(id uint32, frames []sample.Frame) bool {
	ids := b.T.StackOf(id)
	if len(ids) != len(frames) {
		return false
	}
	for i, fid := range ids {
		f, g := &b.T.Frames[fid], &frames[i]
		if f.Address != g.Address || f.Kind != g.Kind || f.Method != g.Method || f.Line != g.Line || f.StartLine != g.StartLine ||
			b.T.Strings[f.Function] != g.Function ||
			b.T.Strings[f.Module] != g.Module || b.T.Strings[f.BuildID] != g.BuildID {
			return false
		}
	}
	return true
}

// remap translates one table's ids into a Builder's, filled lazily.
type remap struct {
	src                                       *Table
	strings, frames, stacks, threads, cgroups []uint32
}

const unmapped = ^uint32(0)

func newRemap(src *Table) *remap {
	fill := func(n int) []uint32 {
		s := make([]uint32, n)
		for i := range s {
			s[i] = unmapped
		}
		return s
	}
	return &remap{src: src, strings: fill(len(src.Strings)), frames: fill(len(src.Frames)),
		stacks: fill(src.NumStacks()), threads: fill(len(src.Threads)), cgroups: fill(len(src.Cgroups))}
}

func (b *Builder) mapString(m *remap, id uint32) uint32 {
	if m.strings[id] == unmapped {
		m.strings[id] = b.internString(m.src.Strings[id])
	}
	return m.strings[id]
}

func (b *Builder) mapFrame(m *remap, id uint32) uint32 {
	if m.frames[id] == unmapped {
		f := m.src.Frames[id]
		sf := sample.Frame{Function: m.src.Strings[f.Function], Module: m.src.Strings[f.Module],
			BuildID: m.src.Strings[f.BuildID], Kind: f.Kind, Method: f.Method, Address: f.Address,
			Line: f.Line, StartLine: f.StartLine}
		m.frames[id] = b.internFrame(&sf)
	}
	return m.frames[id]
}

func (b *Builder) mapStack(m *remap, id uint32) uint32 {
	if m.stacks[id] == unmapped {
		src := m.src.StackOf(id)
		ids := make([]uint32, len(src))
		for i, f := range src {
			ids[i] = b.mapFrame(m, f)
		}
		m.stacks[id] = b.internStack(ids)
	}
	return m.stacks[id]
}

func (b *Builder) mapThread(m *remap, id uint32) uint32 {
	if m.threads[id] == unmapped {
		th := m.src.Threads[id]
		th.Comm = b.mapString(m, th.Comm)
		th.Meta = b.mapCgroup(m, th.Meta)
		m.threads[id] = b.internThread(th)
	}
	return m.threads[id]
}

// mapCgroup translates a Thread.Meta.
func (b *Builder) mapCgroup(m *remap, meta uint32) uint32 {
	if meta == 0 {
		return 0
	}
	if m.cgroups[meta-1] == unmapped {
		c := m.src.Cgroups[meta-1]
		if known, ok := b.cgroups[c.ID]; ok {
			m.cgroups[meta-1] = known
		} else {
			s := func(id uint32) string { return m.src.Strings[id] }
			m.cgroups[meta-1] = b.cgroupMeta(c.ID, &sample.Container{Cgroup: s(c.Path), ID: s(c.ContainerID),
				Runtime: s(c.Runtime), PodUID: s(c.PodUID), QoS: s(c.QoS), Namespace: s(c.Namespace), Pod: s(c.Pod),
				Name: s(c.Container)})
		}
	}
	return m.cgroups[meta-1]
}

// appendFrom adds sample i of m's table, translating its ids.
func (b *Builder) appendFrom(m *remap, i int) {
	t := m.src
	b.appendRow(t.Time[i], t.CPU[i], b.mapThread(m, t.Thread[i]), b.mapStack(m, t.Stack[i]))
}
