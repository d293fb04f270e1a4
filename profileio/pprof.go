package profileio

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"

	"github.com/google/pprof/profile"

	"github.com/heatscope/heatscope/sample"
)

// PprofBuilder aggregates samples into a pprof profile as they arrive, so its
// memory grows with the number of distinct stacks, not with the recording's
// length. Sample types are samples/count and cpu/nanoseconds; each sample
// carries the labels comm, pid and tid, node when it has one (the machine
// it was taken on), and the numeric label cpu (unit "cpu"),
// and, for samples with container metadata, the labels cgroup, container_id,
// container_runtime, container, pod, pod_uid, namespace and qos (those
// known); samples with a cgroup id carry it as the numeric label cgroup_id
// (unit "id"). ReadPprof reads all of them back. Samples whose user stack
// was walked with unwind tables (frames marked with sample.Frame.Method,
// by the recorder or read back from the store) say how each user frame
// was found (unwindLabels): pprof's locations and functions have no field
// for it, and a location is shared by every stack through its address, so
// a frame reached both ways is one location of one function. Kernel
// frames sit in a "[kernel.kallsyms]" mapping, user frames in their binaries'
// mappings with build ids, Python frames in the PythonMapping pseudo mapping:
// a Python function is a Function with its qualified name as name,
// "qualname (file)" (sample.FunctionName) as system name, its file as filename and its first line as start line, a
// Python frame a Location (at address 0) with one Line, its function at
// the line being run, so that go tool pprof -list shows the source and
// -traces the Python chain. Frames are already symbolized, so every mapping is
// marked as having functions and pprof does not try to symbolize again.
// The samples of one thread share one Label map, and those of one CPU
// (and cgroup) their NumLabel and NumUnit maps, so that a profile of
// hundreds of thousands of samples does not cost as many maps: treat the
// profile's label maps as read-only.
type PprofBuilder struct {
	periodNs int64
	prof     *profile.Profile
	mappings map[string]*profile.Mapping
	// python is the PythonMapping mapping, nil until a Python frame.
	python    *profile.Mapping
	functions map[functionKey]*profile.Function
	locations map[locationKey]*profile.Location
	samples   map[string]*profile.Sample
	// labels and numLabels hold the label maps samples share: those of a
	// thread (by labelKey), those of a CPU and cgroup.
	labels    map[string]map[string][]string
	numLabels map[numKey]numLabels
	key       []byte
	labelKey  []byte
	minTime   int64
	maxTime   int64
	// lastPeriod is the period of the sample at maxTime.
	lastPeriod int64
	keepTimes  bool
}

// PythonMapping is the pseudo mapping of Python frames in pprof profiles
// (their files are their functions' filenames): ReadPprof reads its
// locations back as sample.KindPython frames.
const PythonMapping = "[python]"

type functionKey struct {
	name, module string
	// startLine tells apart Python functions of one name and file
	// (lambdas, a function defined twice); 0 for native ones.
	startLine uint32
}

type locationKey struct {
	module, function string
	address          uint64
	// line and python tell a Python frame's locations apart: one per
	// line run, none shared with a native frame.
	line   uint32
	python bool
}

// NewPprofBuilder returns a builder for samples taken every periodNs
// nanoseconds of CPU time (sample.PeriodOf the frequency).
func NewPprofBuilder(periodNs int64) *PprofBuilder {
	return &PprofBuilder{
		periodNs: periodNs,
		prof: &profile.Profile{
			SampleType: []*profile.ValueType{
				{Type: "samples", Unit: "count"},
				{Type: "cpu", Unit: "nanoseconds"},
			},
			DefaultSampleType: "cpu",
			PeriodType:        &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
			Period:            periodNs,
		},
		mappings:  map[string]*profile.Mapping{},
		functions: map[functionKey]*profile.Function{},
		locations: map[locationKey]*profile.Location{},
		samples:   map[string]*profile.Sample{},
		labels:    map[string]map[string][]string{},
		numLabels: map[numKey]numLabels{},
		minTime:   math.MaxInt64,
		maxTime:   math.MinInt64,
	}
}

// KeepTimestamps makes every pprof sample record its samples' time in a
// numeric label "timestamp_ns" (unit "nanoseconds"), so that ReadPprof
// gives back the exact times. Samples with different times then no longer
// merge, and the profile grows with the number of samples. Off by default;
// call it before the first Add.
func (b *PprofBuilder) KeepTimestamps(on bool) { b.keepTimes = on }

// SetPeriod sets the CPU time each sample added from now on stands for
// when it does not carry its own (sample.Sample.PeriodNs): samples read
// back from a store, whose period is kept per batch. The profile's Period
// field keeps the first period.
func (b *PprofBuilder) SetPeriod(periodNs int64) { b.periodNs = periodNs }

// Add adds one sample, weighing its own period (s.PeriodNs) when it
// carries one, else the builder's.
func (b *PprofBuilder) Add(s *sample.Sample) {
	locs := make([]*profile.Location, len(s.Stack))
	for i := range s.Stack {
		locs[i] = b.Location(&s.Stack[i])
	}
	b.add(s, locs, false)
}

// AddLocated adds one sample as Add does, its stack given as the
// locations Location returned for its frames (leaf first) rather than as
// s.Stack. A caller that meets the same stack many times looks its frames
// up once; locs is not kept. s.Stack is read only for the unwind labels:
// it may hold just the stack's frames marked with a Method (none, most
// often), in their order.
func (b *PprofBuilder) AddLocated(s *sample.Sample, locs []*profile.Location) { b.add(s, locs, true) }

func (b *PprofBuilder) add(s *sample.Sample, locs []*profile.Location, shared bool) {
	period := b.periodNs
	if s.PeriodNs > 0 {
		period = s.PeriodNs
	}
	b.minTime = min(b.minTime, s.Time)
	if s.Time >= b.maxTime {
		b.maxTime, b.lastPeriod = s.Time, period
	}
	// The thread's string labels, shared by all its samples.
	lk := b.labelKey[:0]
	lk = append(lk, s.Comm...)
	lk = append(lk, 0)
	lk = binary.AppendUvarint(lk, uint64(s.PID))
	lk = binary.AppendUvarint(lk, uint64(s.TID))
	lk = binary.AppendUvarint(lk, s.CgroupID)
	lk = append(append(lk, s.Node...), 0)
	labels, withLabels := containerLabels(s.Container)
	if withLabels {
		for _, l := range labels {
			lk = append(append(lk, l.value...), 0)
		}
	}
	// How the user frames were found, when they were walked with unwind
	// tables.
	method, fpFrames := unwindLabels(s.Stack)
	lk = append(append(lk, method...), 0)
	for _, f := range fpFrames {
		lk = append(append(lk, f...), 0)
	}
	b.labelKey = lk
	key := b.key[:0]
	for _, l := range locs {
		key = binary.AppendUvarint(key, l.ID)
	}
	key = append(key, 0)
	key = append(key, lk...)
	key = binary.AppendUvarint(key, uint64(s.CPU))
	if b.keepTimes {
		key = binary.AppendVarint(key, s.Time)
	}
	b.key = key
	if ps, ok := b.samples[string(key)]; ok {
		ps.Value[0]++
		ps.Value[1] += period
		return
	}
	if shared {
		locs = slices.Clone(locs)
	}
	ps := &profile.Sample{Location: locs, Value: []int64{1, period}, Label: b.labels[string(lk)]}
	if ps.Label == nil {
		ps.Label = map[string][]string{
			"comm": {s.Comm},
			"pid":  {strconv.FormatUint(uint64(s.PID), 10)},
			"tid":  {strconv.FormatUint(uint64(s.TID), 10)},
		}
		if s.Node != "" {
			ps.Label[nodeLabel] = []string{s.Node}
		}
		for _, l := range labels {
			if withLabels && l.value != "" {
				ps.Label[l.name] = []string{l.value}
			}
		}
		if method != "" {
			ps.Label[UnwindLabel] = []string{method}
		}
		if len(fpFrames) > 0 {
			ps.Label[UnwindFPLabel] = fpFrames
		}
		b.labels[string(lk)] = ps.Label
	}
	// The numeric labels, shared by the samples of a CPU and cgroup
	// (without timestamps).
	nk := numKey{cpu: s.CPU, cgroup: s.CgroupID}
	if nl, ok := b.numLabels[nk]; ok && !b.keepTimes {
		ps.NumLabel, ps.NumUnit = nl.values, nl.units
	} else {
		// A unit keeps CPU 0: pprof's encoding drops a numeric label
		// whose value is 0 when it has no unit.
		ps.NumLabel = map[string][]int64{"cpu": {int64(s.CPU)}}
		ps.NumUnit = map[string][]string{"cpu": {"cpu"}}
		if s.CgroupID != 0 {
			ps.NumLabel[cgroupIDLabel] = []int64{int64(s.CgroupID)}
			ps.NumUnit[cgroupIDLabel] = []string{"id"}
		}
		if b.keepTimes {
			ps.NumLabel[timestampLabel] = []int64{s.Time}
			ps.NumUnit[timestampLabel] = []string{"nanoseconds"}
		} else {
			b.numLabels[nk] = numLabels{ps.NumLabel, ps.NumUnit}
		}
	}
	b.samples[string(key)] = ps
	b.prof.Sample = append(b.prof.Sample, ps)
}

// UnwindLabel is the pprof label that says how a sample's user frames
// above the sampled pc were found, when the sampler walked them with
// unwind tables: "table" (every one with its binary's unwind table),
// "fp" (every one with frame pointers: JIT code, a binary without CFI, or
// a process's first samples before its tables were in) or "table+fp".
// go tool pprof -tagfocus unwind=fp keeps the samples with a frame found
// with frame pointers.
const UnwindLabel = "unwind"

// UnwindFPLabel is the pprof label that names each user frame found with
// frame pointers, leaf first, one value per frame: `go tool pprof -tags`
// says which functions were reached that way and how often.
const UnwindFPLabel = "unwind_fp"

// unwindLabels returns the values of UnwindLabel and UnwindFPLabel for a
// stack, from its frames' methods ("" and none when no frame says how it
// was found: a stack walked with frame pointers alone, data stored before
// the store kept it, or no user frame above the sampled pc).
func unwindLabels(stack []sample.Frame) (string, []string) {
	var fp []string
	table := false
	for i := range stack {
		switch stack[i].Method {
		case sample.MethodTable:
			table = true
		case sample.MethodFP:
			fp = append(fp, stack[i].Function)
		}
	}
	switch {
	case len(fp) == 0 && table:
		return "table", nil
	case len(fp) == 0:
		return "", nil
	case table:
		return "table+fp", fp
	}
	return "fp", fp
}

type numKey struct {
	cpu    uint32
	cgroup uint64
}

type numLabels struct {
	values map[string][]int64
	units  map[string][]string
}

type label struct{ name, value string }

// containerLabels lists a sample's container metadata as pprof labels
// (empty values are left out of the profile); ok is false for nil, which
// has none. An array, not a slice: Add calls it for every sample.
func containerLabels(c *sample.Container) (l [8]label, ok bool) {
	if c == nil {
		return l, false
	}
	return [8]label{{"cgroup", c.Cgroup}, {"container_id", c.ID}, {"container_runtime", c.Runtime},
		{"container", c.Name}, {"pod", c.Pod}, {"pod_uid", c.PodUID}, {"namespace", c.Namespace}, {"qos", c.QoS}}, true
}

// Location returns the profile's location of frame f (its module,
// function and address), made on first use.
func (b *PprofBuilder) Location(f *sample.Frame) *profile.Location {
	python := f.Kind == sample.KindPython
	key := locationKey{module: f.Module, function: f.Function, address: f.Address, python: python}
	if python {
		key.line = f.Line
	}
	if loc, ok := b.locations[key]; ok {
		return loc
	}
	loc := &profile.Location{
		ID:      uint64(len(b.prof.Location) + 1),
		Mapping: b.mapping(f),
		Address: f.Address,
		Line:    []profile.Line{{Function: b.function(f)}},
	}
	if python {
		loc.Address = 0 // a Python frame has no address; its line says where it ran
		loc.Line[0].Line = int64(f.Line)
	}
	b.locations[key] = loc
	b.prof.Location = append(b.prof.Location, loc)
	return loc
}

func (b *PprofBuilder) mapping(f *sample.Frame) *profile.Mapping {
	if f.Kind == sample.KindPython {
		return b.pythonMapping()
	}
	if m, ok := b.mappings[f.Module]; ok {
		if m.BuildID == "" && f.BuildID != "" {
			m.BuildID = f.BuildID
		}
		return m
	}
	m := &profile.Mapping{
		ID:              uint64(len(b.prof.Mapping) + 1),
		Limit:           math.MaxUint64,
		File:            f.Module,
		BuildID:         f.BuildID,
		HasFunctions:    true,
		HasFilenames:    false,
		HasLineNumbers:  false,
		HasInlineFrames: false,
	}
	b.mappings[f.Module] = m
	b.prof.Mapping = append(b.prof.Mapping, m)
	return m
}

// pythonMapping returns the mapping of every Python frame, made on
// first use. It has file names and line numbers; a native binary's
// mapping of the same name "[python]" would be another (b.mappings).
func (b *PprofBuilder) pythonMapping() *profile.Mapping {
	if b.python != nil {
		return b.python
	}
	b.python = &profile.Mapping{
		ID:             uint64(len(b.prof.Mapping) + 1),
		Limit:          math.MaxUint64,
		File:           PythonMapping,
		HasFunctions:   true,
		HasFilenames:   true,
		HasLineNumbers: true,
	}
	b.prof.Mapping = append(b.prof.Mapping, b.python)
	return b.python
}

func (b *PprofBuilder) function(f *sample.Frame) *profile.Function {
	key := functionKey{name: f.Function, module: f.Module}
	python := f.Kind == sample.KindPython
	if python {
		key.startLine = f.StartLine
		// A Python function's module is a .py file; the prefix keeps it
		// apart from a native function of that name in a binary of that
		// path.
		key.module = PythonMapping + key.module
	}
	if fn, ok := b.functions[key]; ok {
		return fn
	}
	fn := &profile.Function{
		ID:         uint64(len(b.prof.Function) + 1),
		Name:       f.Function,
		SystemName: f.Function,
	}
	if python {
		fn.Filename, fn.StartLine = f.Module, int64(f.StartLine)
		// The system name is the name heatscope's views give it, with
		// its file: unique in the profile, and not the name, so that
		// go tool pprof takes the name as demangled already (it would
		// strip "<module>" or "<lambda>" whole as C++ template
		// parameters); "" when the file is not known.
		if fn.SystemName = f.Name(); fn.SystemName == fn.Name {
			fn.SystemName = ""
		}
	}
	b.functions[key] = fn
	b.prof.Function = append(b.prof.Function, fn)
	return fn
}

// Profile returns the profile built so far. Its time is the first sample's
// and its duration spans to the last sample plus that sample's period. The builder
// keeps the profile: call Profile once, after the last Add.
func (b *PprofBuilder) Profile() *profile.Profile {
	if len(b.prof.Sample) > 0 {
		b.prof.TimeNanos = b.minTime
		b.prof.DurationNanos = b.maxTime - b.minTime + b.lastPeriod
	}
	return b.prof
}

// WritePprof validates p and writes it gzip-compressed to w.
func WritePprof(w io.Writer, p *profile.Profile) error {
	if err := p.CheckValid(); err != nil {
		return fmt.Errorf("write pprof: invalid profile: %w", err)
	}
	if err := p.Write(w); err != nil {
		return fmt.Errorf("write pprof: %w", err)
	}
	return nil
}
