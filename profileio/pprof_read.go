package profileio

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/bits"
	"slices"
	"strconv"

	"github.com/google/pprof/profile"

	"github.com/heatscope/heatscope/sample"
)

// timestampLabel is the numeric label, in nanoseconds, that carries a pprof
// sample's own time (PprofBuilder.KeepTimestamps).
const timestampLabel = "timestamp_ns"

// nodeLabel is the label that carries a sample's node.
const nodeLabel = "node"

// cgroupIDLabel is the numeric label that carries a sample's cgroup v2 id.
const cgroupIDLabel = "cgroup_id"

// ReadPprof reads a pprof profile (profile.proto, gzipped or not, or one of
// the legacy formats github.com/google/pprof/profile parses) and calls fn
// once per sample it stands for. A pprof file is one message, so it is read
// whole; the samples it expands to are not kept. fn may keep each sample,
// whose Stack is its own.
//
// A pprof sample stands for n samples: its samples/count value, or, without
// that sample type, its cpu/nanoseconds value divided by the profile's
// period (at least 1). Samples whose value is zero or negative, as in diff
// profiles, stand for none and are skipped. The n samples are at the
// sample's numeric label "timestamp_ns" when it has one (PprofBuilder with
// KeepTimestamps writes it), else spread evenly over the profile's window
// [TimeNanos, TimeNanos+DurationNanos).
//
// The labels heatscope's PprofBuilder writes are read back: comm, and pid,
// tid and cpu as string or numeric labels, the container labels, and the
// unwind labels, as each user frame's Method (markUnwind). Frames come from each
// location's lines, innermost inlined function first, so the stack is leaf
// first. Module and BuildID come from the location's mapping, Address is
// the location's address. A frame is KindKernel in a "[kernel.kallsyms]"
// mapping or at a kernel address, KindJIT in a perf map or heatscope's
// "[jit]" mapping, KindPython in the PythonMapping mapping (Function the
// function's name, Module its filename, Line the line's number and
// StartLine the function's start line, Address 0), KindUnknown when it
// has no function name (Function is then "[module+0xoffset]") or a
// bracketed one, KindUser otherwise.
func ReadPprof(r io.Reader, fn func(*sample.Sample) error) error {
	in, err := openInput(r)
	if err != nil {
		return fmt.Errorf("pprof: %w", err)
	}
	data, err := io.ReadAll(in)
	if err != nil {
		return fmt.Errorf("pprof: read: %w", err)
	}
	p, err := profile.ParseData(data)
	if err != nil {
		return fmt.Errorf("pprof: %w", err)
	}
	if err := p.CheckValid(); err != nil {
		return fmt.Errorf("pprof: invalid profile: %w", err)
	}
	count, err := sampleCounter(p)
	if err != nil {
		return fmt.Errorf("pprof: %w", err)
	}
	rd := pprofReader{names: interner{}, frames: map[*profile.Location][]sample.Frame{}, containers: map[sample.Container]*sample.Container{}}
	for _, ps := range p.Sample {
		n := count(ps)
		if n <= 0 {
			continue
		}
		head := rd.head(ps)
		stack := rd.stack(ps)
		markUnwind(stack, ps)
		ts, hasTime := numLabel(ps, timestampLabel)
		for k := range uint64(n) {
			s := new(sample.Sample)
			*s = head
			switch {
			case hasTime:
				s.Time = ts
			case p.DurationNanos > 0:
				hi, lo := bits.Mul64(uint64(p.DurationNanos), k)
				offset, _ := bits.Div64(hi, lo, uint64(n)) // k < n, so it fits
				s.Time = p.TimeNanos + int64(offset)
			default:
				s.Time = p.TimeNanos
			}
			if len(stack) > 0 {
				s.Stack = make([]sample.Frame, len(stack))
				copy(s.Stack, stack)
			}
			if err := fn(s); err != nil {
				return fmt.Errorf("pprof: %w", err)
			}
		}
	}
	return nil
}

// sampleCounter returns how to tell the number of samples a pprof sample
// stands for.
func sampleCounter(p *profile.Profile) (func(*profile.Sample) int64, error) {
	ns := -1
	for i, st := range p.SampleType {
		if st.Type == "samples" && st.Unit == "count" {
			return func(s *profile.Sample) int64 { return s.Value[i] }, nil
		}
		if st.Type == "cpu" && st.Unit == "nanoseconds" && ns < 0 {
			ns = i
		}
	}
	if ns < 0 {
		return nil, fmt.Errorf("no samples/count or cpu/nanoseconds sample type among %d types", len(p.SampleType))
	}
	period := p.Period
	if p.PeriodType != nil && p.PeriodType.Unit != "nanoseconds" {
		period = 0
	}
	return func(s *profile.Sample) int64 {
		v := s.Value[ns]
		if v <= 0 {
			return 0
		}
		if period > 0 {
			v /= period
		}
		return max(v, 1)
	}, nil
}

// head returns a sample with the fields pprof labels carry: comm, pid, tid,
// cpu, and the container metadata containerLabels writes (one Container
// for each distinct set, shared by its samples).
func (rd *pprofReader) head(ps *profile.Sample) sample.Sample {
	var s sample.Sample
	s.Comm = stringLabel(ps, "comm")
	s.Node = stringLabel(ps, nodeLabel)
	s.PID = uint32Label(ps, "pid")
	s.TID = uint32Label(ps, "tid")
	s.CPU = uint32Label(ps, "cpu")
	if id, ok := numLabel(ps, cgroupIDLabel); ok {
		s.CgroupID = uint64(id)
	}
	c := sample.Container{Cgroup: stringLabel(ps, "cgroup"), ID: stringLabel(ps, "container_id"),
		Runtime: stringLabel(ps, "container_runtime"), Name: stringLabel(ps, "container"), Pod: stringLabel(ps, "pod"),
		PodUID: stringLabel(ps, "pod_uid"), Namespace: stringLabel(ps, "namespace"), QoS: stringLabel(ps, "qos")}
	if c != (sample.Container{}) {
		shared, ok := rd.containers[c]
		if !ok {
			shared = &c
			rd.containers[c] = shared
		}
		s.Container = shared
		if s.CgroupID == 0 {
			s.CgroupID = syntheticCgroupID(&c)
		}
	}
	return s
}

// syntheticCgroupID stands in for the cgroup id of a sample that has
// container labels but no cgroup_id (a profile from another tool): the
// store keeps one container's metadata per cgroup id, so each distinct
// container needs an id of its own. Real ids are inode numbers; these have
// the top bit set.
func syntheticCgroupID(c *sample.Container) uint64 {
	h := fnv.New64a()
	for _, v := range []string{c.Cgroup, c.ID, c.Runtime, c.Name, c.Pod, c.PodUID, c.Namespace, c.QoS} {
		h.Write([]byte(v))
		h.Write([]byte{0})
	}
	return 1<<63 | h.Sum64()>>1
}

// stringLabel returns the first value of a string label, or "".
func stringLabel(ps *profile.Sample, key string) string {
	if v := ps.Label[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// uint32Label reads a label written as a string or as a number.
func uint32Label(ps *profile.Sample, key string) uint32 {
	if v, ok := numLabel(ps, key); ok && v >= 0 && v <= 1<<32-1 {
		return uint32(v)
	}
	if v := ps.Label[key]; len(v) > 0 {
		if n, err := strconv.ParseUint(v[0], 10, 32); err == nil {
			return uint32(n)
		}
	}
	return 0
}

func numLabel(ps *profile.Sample, key string) (int64, bool) {
	if v := ps.NumLabel[key]; len(v) > 0 {
		return v[0], true
	}
	return 0, false
}

// markUnwind marks stack's user frames above the sampled pc (leaf first,
// after its kernel frames) with how they were found, as ps's unwind labels
// say (unwindLabels wrote them): every one with a table ("table"), every
// one with frame pointers ("fp"), or those unwind_fp names, in order, with
// frame pointers and the others with a table ("table+fp"; in a recursion,
// the first frame of a name takes it). Labels that do not fit the stack
// (a name that is not its frames', counts that do not add up, another
// value, a kernel frame above the user ones) mark nothing: they are
// untrusted input.
func markUnwind(stack []sample.Frame, ps *profile.Sample) {
	method, fp := stringLabel(ps, UnwindLabel), ps.Label[UnwindFPLabel]
	if method == "" {
		return
	}
	pc := 0
	for pc < len(stack) && stack[pc].Kind == sample.KindKernel {
		pc++
	}
	if pc+1 >= len(stack) {
		return
	}
	above := stack[pc+1:]
	if slices.ContainsFunc(above, func(f sample.Frame) bool { return f.Kind == sample.KindKernel }) {
		return // a kernel frame above a user one: not a stack a walk wrote
	}
	matched := 0
	for i := range above {
		if matched < len(fp) && above[i].Function == fp[matched] {
			matched++
		}
	}
	switch {
	case matched != len(fp):
		return
	case method == "table" && len(fp) == 0, method == "fp" && len(fp) == len(above),
		method == "table+fp" && len(fp) > 0 && len(fp) < len(above):
	default:
		return
	}
	matched = 0
	for i := range above {
		above[i].Method = sample.MethodTable
		if matched < len(fp) && above[i].Function == fp[matched] {
			above[i].Method = sample.MethodFP
			matched++
		}
	}
}

// pprofReader turns pprof locations into frames, each location once.
type pprofReader struct {
	names  interner
	frames map[*profile.Location][]sample.Frame
	// containers holds one copy of each distinct container's metadata.
	containers map[sample.Container]*sample.Container
	stackTo    []sample.Frame
	scratch    []byte
}

// stack returns ps's frames, leaf first, in a buffer reused by the next call.
func (rd *pprofReader) stack(ps *profile.Sample) []sample.Frame {
	st := rd.stackTo[:0]
	for _, loc := range ps.Location {
		fs, ok := rd.frames[loc]
		if !ok {
			fs = rd.locationFrames(loc)
			rd.frames[loc] = fs
		}
		st = append(st, fs...)
	}
	rd.stackTo = st
	return st
}

// locationFrames returns a location's frames: one per line, innermost
// inlined function first, or one unnamed frame when it has no lines.
func (rd *pprofReader) locationFrames(loc *profile.Location) []sample.Frame {
	var module, buildID string
	offset := loc.Address
	if m := loc.Mapping; m != nil {
		module, buildID = m.File, m.BuildID
		if loc.Address >= m.Start {
			offset = loc.Address - m.Start + m.Offset
		}
	}
	if module == PythonMapping {
		return pythonFrames(loc)
	}
	class := classify(module)
	frame := func(name string) sample.Frame {
		resolved := !isUnresolvedName(name)
		if name == "" || name == "[unknown]" {
			rd.scratch = appendUnknownName(rd.scratch[:0], module, offset)
			name = rd.names.get(rd.scratch)
		}
		return sample.Frame{
			Function: name,
			Module:   module,
			BuildID:  buildID,
			Address:  loc.Address,
			Kind:     frameKind(class, loc.Address, resolved),
		}
	}
	if len(loc.Line) == 0 {
		return []sample.Frame{frame("")}
	}
	fs := make([]sample.Frame, len(loc.Line))
	for i, line := range loc.Line {
		var name string
		if fn := line.Function; fn != nil {
			name = fn.Name
			if name == "" {
				name = fn.SystemName
			}
		}
		fs[i] = frame(name)
	}
	return fs
}

// pythonFrames returns the frames of a location in the PythonMapping
// mapping: one Python frame per line, innermost first. A line number or
// start line that is not a uint32 (untrusted input) reads as not known.
func pythonFrames(loc *profile.Location) []sample.Frame {
	lineNumber := func(n int64) uint32 {
		if n < 0 || n > math.MaxUint32 {
			return 0
		}
		return uint32(n)
	}
	fs := make([]sample.Frame, 0, max(len(loc.Line), 1))
	for _, line := range loc.Line {
		f := sample.Frame{Function: "[unknown]", Kind: sample.KindPython, Line: lineNumber(line.Line)}
		if fn := line.Function; fn != nil {
			f.Module, f.StartLine = fn.Filename, lineNumber(fn.StartLine)
			if f.Function = fn.Name; f.Function == "" {
				f.Function = cmp.Or(fn.SystemName, "[unknown]")
			}
		}
		fs = append(fs, f)
	}
	if len(fs) == 0 {
		fs = append(fs, sample.Frame{Function: "[unknown]", Kind: sample.KindPython})
	}
	return fs
}
