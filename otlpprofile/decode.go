package otlpprofile

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/heatscope/heatscope/sample"
)

// MaxStackFrames is the most frames Decode gives a sample: a longer stack
// (locations with many inlined lines, or a sender that walks deeper than
// heatscope's 127 kernel and 127 user frames) keeps its leaf-most frames
// and is counted in Report.TruncatedStacks.
const MaxStackFrames = 1024

// maxCachedFrames bounds the frames of the decoded stacks Decode keeps
// for reuse while it reads one request: past it, a stack is decoded anew
// for each sample, so that a request of many long, distinct stacks costs
// time, not memory.
const maxCachedFrames = 1 << 18

// DecodeOptions says how Decode reads a request.
type DecodeOptions struct {
	// NodeAttribute is the resource attribute naming the node a sample
	// was taken on (sample.Sample.Node); "" means host.name.
	NodeAttribute string
	// RequireCPU leaves out the samples that do not say which CPU they
	// ran on (counted in Report.NoCPU) instead of giving them CPU 0: a
	// store adds a CPU's samples up as that CPU's time, and those of
	// every CPU on one would read busier than a CPU can be.
	RequireCPU bool
}

// Report says what Decode read, and what it had to guess or leave out.
type Report struct {
	// Samples is how many samples Decode gave its function.
	Samples int
	// NoTimestamp counts the samples whose sender gave no timestamp
	// (aggregated values): each was given its profile's time.
	NoTimestamp int
	// NoPeriod counts the samples whose weight was not known (a count
	// without a CPU period): their PeriodNs is 0.
	NoPeriod int
	// TruncatedStacks counts the samples whose stack was cut to
	// MaxStackFrames.
	TruncatedStacks int
	// NoCPU counts the samples that did not say which CPU they ran on
	// (no cpu.logical_number, or one out of range): their CPU is 0, or,
	// under DecodeOptions.RequireCPU, they were left out.
	NoCPU int
	// Skipped lists the profiles that were not CPU time (an off-CPU or
	// memory profile), which Decode left out.
	Skipped []SkippedProfile
}

// SkippedProfile is a profile Decode left out, named by its sample type.
type SkippedProfile struct {
	Type, Unit string
	// Samples is how many OTLP samples it held.
	Samples int
}

func (s SkippedProfile) String() string {
	return fmt.Sprintf("a profile of %s/%s (%d samples) is not CPU time", s.Type, s.Unit, s.Samples)
}

// Decode gives fn each sample p holds, in the order p holds them, each
// weighing its own period and keeping its own timestamp. The sample is
// reused after fn returns, and its Stack and Container are shared with
// other samples: fn copies what it keeps and modifies neither.
//
// Decode checks the whole request before it gives fn any sample: a
// request whose indices point outside its tables, whose values and
// timestamps disagree in number, or whose values are negative is an
// error, and fn sees none of it. An error of fn's stops Decode and is
// returned as it is.
func Decode(p pprofile.Profiles, opts DecodeOptions, fn func(*sample.Sample) error) (Report, error) {
	d, err := newDecoder(p, opts)
	if err != nil {
		return Report{}, err
	}
	if err := d.check(); err != nil {
		return Report{}, err
	}
	return d.report, d.emit(fn)
}

// attr is one entry of the attribute table.
type attr struct {
	key   string
	value pcommon.Value
}

// location is one entry of the location table, as heatscope frames (one
// per line: inlined functions first).
type location struct{ frames []sample.Frame }

// decoder reads one request. Its tables are the dictionary's, checked
// and decoded once.
type decoder struct {
	p       pprofile.Profiles
	opts    DecodeOptions
	strs    []string
	attrs   []attr
	locs    []location
	stacks  pprofile.StackSlice
	nLinks  int
	report  Report
	cached  map[int32]decodedStack
	nCached int
	scratch []sample.Frame
	boxes   map[sample.Container]*sample.Container
	// noCPU says the sample being emitted named no CPU (Report.NoCPU).
	noCPU bool
}

func newDecoder(p pprofile.Profiles, opts DecodeOptions) (*decoder, error) {
	if opts.NodeAttribute == "" {
		opts.NodeAttribute = keyHostName
	}
	dict := p.Dictionary()
	d := &decoder{
		p: p, opts: opts,
		strs:   dict.StringTable().AsRaw(),
		stacks: dict.StackTable(),
		nLinks: dict.LinkTable().Len(),
		cached: map[int32]decodedStack{},
		boxes:  map[sample.Container]*sample.Container{},
	}
	if err := d.readAttributes(dict.AttributeTable()); err != nil {
		return nil, err
	}
	functions, err := d.readFunctions(dict.FunctionTable())
	if err != nil {
		return nil, err
	}
	mappings, err := d.readMappings(dict.MappingTable())
	if err != nil {
		return nil, err
	}
	if err := d.readLocations(dict.LocationTable(), functions, mappings); err != nil {
		return nil, err
	}
	for i, st := range d.stacks.All() {
		for _, l := range st.LocationIndices().All() {
			if err := inRange("stack_table", i, "location", l, len(d.locs)); err != nil {
				return nil, err
			}
		}
	}
	return d, nil
}

// inRange checks one index of a table entry.
func inRange(table string, entry int, field string, index int32, n int) error {
	if index < 0 || int(index) >= n {
		return fmt.Errorf("otlp: %s[%d]: %s index %d outside its table of %d", table, entry, field, index, n)
	}
	return nil
}

func (d *decoder) str(table string, entry int, field string, index int32) (string, error) {
	if err := inRange(table, entry, field, index, len(d.strs)); err != nil {
		return "", err
	}
	return d.strs[index], nil
}

func (d *decoder) readAttributes(t pprofile.KeyValueAndUnitSlice) error {
	d.attrs = make([]attr, t.Len())
	for i, a := range t.All() {
		key, err := d.str("attribute_table", i, "key string", a.KeyStrindex())
		if err != nil {
			return err
		}
		if _, err := d.str("attribute_table", i, "unit string", a.UnitStrindex()); err != nil {
			return err
		}
		d.attrs[i] = attr{key: key, value: a.Value()}
	}
	return nil
}

// checkAttrs checks a record's attribute indices.
func (d *decoder) checkAttrs(table string, entry int, indices pcommon.Int32Slice) error {
	for _, a := range indices.All() {
		if err := inRange(table, entry, "attribute", a, len(d.attrs)); err != nil {
			return err
		}
	}
	return nil
}

// function is one entry of the function table.
type function struct {
	name, file string
	startLine  int64
}

// readFunctions reads each function: its name (else its system name,
// else ""), file and first line.
func (d *decoder) readFunctions(t pprofile.FunctionSlice) ([]function, error) {
	out := make([]function, t.Len())
	for i, f := range t.All() {
		name, err := d.str("function_table", i, "name string", f.NameStrindex())
		if err != nil {
			return nil, err
		}
		system, err := d.str("function_table", i, "system name string", f.SystemNameStrindex())
		if err != nil {
			return nil, err
		}
		file, err := d.str("function_table", i, "file name string", f.FilenameStrindex())
		if err != nil {
			return nil, err
		}
		if name == "" {
			name = system
		}
		out[i] = function{name: name, file: file, startLine: f.StartLine()}
	}
	return out, nil
}

// readMappings returns each mapping as a frame's module and build id.
func (d *decoder) readMappings(t pprofile.MappingSlice) ([]mappingKey, error) {
	out := make([]mappingKey, t.Len())
	for i, m := range t.All() {
		module, err := d.str("mapping_table", i, "file name string", m.FilenameStrindex())
		if err != nil {
			return nil, err
		}
		if err := d.checkAttrs("mapping_table", i, m.AttributeIndices()); err != nil {
			return nil, err
		}
		out[i].module = module
		for _, a := range m.AttributeIndices().All() {
			if d.attrs[a].key == keyBuildIDGNU {
				out[i].buildID = strValue(d.attrs[a].value)
			}
		}
	}
	return out, nil
}

// readLocations decodes each location as its frames. A Python frame
// (cpython) is its function's name, file and first line and its line's
// number, at no address, as heatscope keeps one.
func (d *decoder) readLocations(t pprofile.LocationSlice, functions []function, mappings []mappingKey) error {
	d.locs = make([]location, t.Len())
	for i, l := range t.All() {
		if err := inRange("location_table", i, "mapping", l.MappingIndex(), len(mappings)); err != nil {
			return err
		}
		if err := d.checkAttrs("location_table", i, l.AttributeIndices()); err != nil {
			return err
		}
		m := mappings[l.MappingIndex()]
		f := sample.Frame{Module: m.module, BuildID: m.buildID, Address: l.Address()}
		for _, a := range l.AttributeIndices().All() {
			switch d.attrs[a].key {
			case keyFrameType:
				f.Kind = kindOfFrameType(strValue(d.attrs[a].value))
			case keyUnwindMethod:
				f.Method = methodOf(strValue(d.attrs[a].value))
			}
		}
		switch f.Kind {
		case sample.KindKernel:
			// Kernel frames are not unwound by the user stack's walk.
			f.Method = sample.MethodNotKnown
			if f.Module == "" {
				f.Module = sample.KernelModule
			}
		case sample.KindPython:
			f.Address, f.BuildID = 0, ""
		}
		var frames []sample.Frame
		for j, line := range l.Lines().All() {
			if err := inRange("location_table", i, fmt.Sprintf("line %d function", j), line.FunctionIndex(), len(functions)); err != nil {
				return err
			}
			fn := functions[line.FunctionIndex()]
			if fn.name == "" {
				continue
			}
			f.Function = fn.name
			if f.Kind == sample.KindPython {
				f.Module, f.Line, f.StartLine = fn.file, lineNumber(line.Line()), lineNumber(fn.startLine)
			}
			frames = append(frames, f)
		}
		if len(frames) == 0 {
			// An unsymbolized frame (the eBPF profiler sends native
			// frames so): named as heatscope names an address it could
			// not resolve.
			f.Function = unknownName(f.Module, f.Address)
			frames = append(frames, f)
		}
		d.locs[i].frames = frames
	}
	return nil
}

// lineNumber is a source line, from 1; 0 (not known) when out of range.
func lineNumber(n int64) uint32 {
	if n < 0 || n > math.MaxUint32 {
		return 0
	}
	return uint32(n)
}

// unknownName is sample.UnknownName with the module's base name, as the
// symbolizer writes it.
func unknownName(module string, addr uint64) string {
	switch {
	case module == "":
		module = "unknown"
	case strings.HasPrefix(module, "[") && strings.HasSuffix(module, "]") && len(module) > 2:
		module = module[1 : len(module)-1]
	default:
		if i := strings.LastIndexByte(module, '/'); i >= 0 && i+1 < len(module) {
			module = module[i+1:]
		}
	}
	return sample.UnknownName(module, addr)
}

// weighing says what a profile's samples weigh: a value times perValue
// nanoseconds, a timestamp without a value perTimestamp; ok is false for
// a profile that is not CPU time.
type weighing struct {
	perValue, perTimestamp int64
	ok                     bool
}

// weighingOf reads a profile's sample and period types.
func (d *decoder) weighingOf(p pprofile.Profile) (typ, unit string, w weighing) {
	// The indices were checked by check.
	typ, unit = d.strs[p.SampleType().TypeStrindex()], d.strs[p.SampleType().UnitStrindex()]
	var cpuPeriod int64
	if d.strs[p.PeriodType().TypeStrindex()] == typeCPU && d.strs[p.PeriodType().UnitStrindex()] == unitNanoseconds && p.Period() > 0 {
		cpuPeriod = p.Period()
	}
	switch {
	case typ == typeCPU && unit == unitNanoseconds:
		// A timestamp alone is a sample of the profile's period (one
		// nanosecond, the value OTLP implies, is no CPU sample).
		return typ, unit, weighing{perValue: 1, perTimestamp: cpuPeriod, ok: true}
	case unit == unitCount && (typ == typeSamples || typ == typeCPU):
		return typ, unit, weighing{perValue: cpuPeriod, perTimestamp: cpuPeriod, ok: true}
	}
	return typ, unit, weighing{}
}

// check checks every profile and sample of the request, and counts the
// profiles that are not CPU time, before any sample is given out.
func (d *decoder) check() error {
	for i, rp := range d.p.ResourceProfiles().All() {
		for j, sp := range rp.ScopeProfiles().All() {
			for k, p := range sp.Profiles().All() {
				if err := d.checkProfile(p); err != nil {
					return fmt.Errorf("otlp: resource %d, scope %d, profile %d: %w", i, j, k, err)
				}
			}
		}
	}
	return nil
}

func (d *decoder) checkProfile(p pprofile.Profile) error {
	for _, ix := range []int32{p.SampleType().TypeStrindex(), p.SampleType().UnitStrindex(), p.PeriodType().TypeStrindex(), p.PeriodType().UnitStrindex()} {
		if ix < 0 || int(ix) >= len(d.strs) {
			return fmt.Errorf("sample or period type: string index %d outside the string table of %d", ix, len(d.strs))
		}
	}
	if err := d.checkAttrs("profile", 0, p.AttributeIndices()); err != nil {
		return err
	}
	typ, unit, w := d.weighingOf(p)
	if !w.ok {
		d.report.Skipped = append(d.report.Skipped, SkippedProfile{Type: typ, Unit: unit, Samples: p.Samples().Len()})
		return nil
	}
	for i, s := range p.Samples().All() {
		if err := inRange("sample", i, "stack", s.StackIndex(), d.stacks.Len()); err != nil {
			return err
		}
		if err := inRange("sample", i, "link", s.LinkIndex(), d.nLinks); err != nil {
			return err
		}
		if err := d.checkAttrs("sample", i, s.AttributeIndices()); err != nil {
			return err
		}
		values, times := s.Values(), s.TimestampsUnixNano()
		if values.Len() > 0 && times.Len() > 0 && values.Len() != times.Len() {
			return fmt.Errorf("sample[%d]: %d values for %d timestamps", i, values.Len(), times.Len())
		}
		for _, v := range values.All() {
			if v < 0 {
				return fmt.Errorf("sample[%d]: negative value %d", i, v)
			}
			if hi, _ := bits.Mul64(uint64(v), uint64(w.perValue)); hi != 0 || uint64(v)*uint64(w.perValue) > math.MaxInt64 {
				return fmt.Errorf("sample[%d]: value %d of %d ns overflows", i, v, w.perValue)
			}
		}
		for _, t := range times.All() {
			if t > math.MaxInt64 {
				return fmt.Errorf("sample[%d]: timestamp %d past 2262", i, t)
			}
		}
		if times.Len() == 0 && uint64(p.Time()) > math.MaxInt64 {
			return fmt.Errorf("profile time %d past 2262", p.Time())
		}
	}
	return nil
}

// emit gives fn each sample of the checked request.
func (d *decoder) emit(fn func(*sample.Sample) error) error {
	var s sample.Sample
	for _, rp := range d.p.ResourceProfiles().All() {
		var res fields
		node := ""
		for k, v := range rp.Resource().Attributes().All() {
			res.set(k, v)
			if k == d.opts.NodeAttribute {
				node = strValue(v)
			}
		}
		for _, sp := range rp.ScopeProfiles().All() {
			for _, p := range sp.Profiles().All() {
				_, _, w := d.weighingOf(p)
				if !w.ok {
					continue
				}
				for _, os := range p.Samples().All() {
					f := res
					for _, a := range os.AttributeIndices().All() {
						f.set(d.attrs[a].key, d.attrs[a].value)
					}
					s = sample.Sample{Node: node}
					f.fill(&s, d.boxes)
					var truncated bool
					s.Stack, truncated = d.stack(os.StackIndex())
					d.noCPU = !f.hasCPU
					if err := d.emitSample(&s, os, p, w, truncated, fn); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// emitSample gives fn one sample per timestamp (or per value, when the
// sender sent values alone) of an OTLP sample.
func (d *decoder) emitSample(s *sample.Sample, os pprofile.Sample, p pprofile.Profile, w weighing, truncated bool, fn func(*sample.Sample) error) error {
	values, times := os.Values(), os.TimestampsUnixNano()
	n := max(values.Len(), times.Len())
	for i := range n {
		if d.noCPU {
			d.report.NoCPU++
			if d.opts.RequireCPU {
				continue
			}
		}
		if times.Len() > 0 {
			s.Time = int64(times.At(i))
		} else {
			s.Time = int64(p.Time())
			d.report.NoTimestamp++
		}
		if values.Len() > 0 {
			s.PeriodNs = values.At(i) * w.perValue
		} else {
			s.PeriodNs = w.perTimestamp
		}
		if s.PeriodNs == 0 {
			d.report.NoPeriod++
		}
		if truncated {
			d.report.TruncatedStacks++
		}
		d.report.Samples++
		if err := fn(s); err != nil {
			return err
		}
	}
	return nil
}

// decodedStack is a stack's frames, and whether they were cut.
type decodedStack struct {
	frames    []sample.Frame
	truncated bool
}

// stack returns a stack's frames, leaf first, cut to MaxStackFrames.
func (d *decoder) stack(index int32) ([]sample.Frame, bool) {
	if st, ok := d.cached[index]; ok {
		return st.frames, st.truncated
	}
	keep := d.nCached < maxCachedFrames
	var st decodedStack
	if keep {
		st.frames = make([]sample.Frame, 0, 8)
	} else {
		st.frames = d.scratch[:0]
	}
	for _, l := range d.stacks.At(int(index)).LocationIndices().All() {
		st.frames = append(st.frames, d.locs[l].frames...)
		if len(st.frames) > MaxStackFrames {
			st.frames, st.truncated = st.frames[:MaxStackFrames], true
			break
		}
	}
	if keep {
		d.cached[index] = st
		d.nCached += len(st.frames)
	} else {
		d.scratch = st.frames
	}
	return st.frames, st.truncated
}

// fields are the attributes a sample's fields are read from: its
// resource's, then its own.
type fields struct {
	pid, tid, cpu, cgroupID    int64
	hasCPU                     bool
	threadName, executableName string
	container                  sample.Container
}

// set reads one attribute. A value of the wrong type, or out of range,
// is unknown.
func (f *fields) set(key string, v pcommon.Value) {
	switch key {
	case keyPID:
		f.pid = intValue(v)
	case keyTID:
		f.tid = intValue(v)
	case keyCPU:
		f.cpu = intValue(v)
		f.hasCPU = v.Type() == pcommon.ValueTypeInt && f.cpu >= 0 && f.cpu <= math.MaxUint32
	case keyCgroupID:
		f.cgroupID = intValue(v)
	case keyThreadName:
		f.threadName = strValue(v)
	case keyExecutableName:
		f.executableName = strValue(v)
	case keyCgroup:
		f.container.Cgroup = strings.TrimPrefix(strValue(v), cgroupV2Prefix)
	case keyContainerID:
		f.container.ID = strValue(v)
	case keyContainerRuntime, keyContainerRuntimeOld:
		f.container.Runtime = strValue(v)
	case keyPodUID:
		f.container.PodUID = strValue(v)
	case keyQoS:
		f.container.QoS = strValue(v)
	case keyNamespace:
		f.container.Namespace = strValue(v)
	case keyPodName:
		f.container.Pod = strValue(v)
	case keyContainerName:
		f.container.Name = strValue(v)
	}
}

// fill sets a sample's fields; a container (nil when no attribute names
// one) is boxed once per request.
func (f *fields) fill(s *sample.Sample, boxes map[sample.Container]*sample.Container) {
	s.PID, s.TID, s.CPU = uint32Value(f.pid), uint32Value(f.tid), uint32Value(f.cpu)
	s.CgroupID = uint64(f.cgroupID)
	s.Comm = f.threadName
	if s.Comm == "" {
		s.Comm = f.executableName
	}
	if f.container == (sample.Container{}) {
		return
	}
	c := boxes[f.container]
	if c == nil {
		c = new(sample.Container)
		*c = f.container
		boxes[f.container] = c
	}
	s.Container = c
}

// strValue reads a string attribute; a value of another type is ""
// (unknown).
func strValue(v pcommon.Value) string {
	if v.Type() != pcommon.ValueTypeStr {
		return ""
	}
	return v.Str()
}

// intValue reads an integer attribute, written as an integer or as a
// decimal string; anything else is 0 (unknown).
func intValue(v pcommon.Value) int64 {
	switch v.Type() {
	case pcommon.ValueTypeInt:
		return v.Int()
	case pcommon.ValueTypeStr:
		n, err := strconv.ParseInt(v.Str(), 10, 64)
		if err != nil {
			return 0
		}
		return n
	}
	return 0
}

// uint32Value is n when it fits a pid, tid or CPU number, else 0 (unknown).
func uint32Value(n int64) uint32 {
	if n < 0 || n > math.MaxUint32 {
		return 0
	}
	return uint32(n)
}
