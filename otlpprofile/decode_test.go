package otlpprofile

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/heatscope/heatscope/sample"
)

// dictBuilder fills a ProfilesDictionary the way a foreign sender would,
// for the tests' hand-made requests.
type dictBuilder struct {
	d pprofile.ProfilesDictionary
}

func newDictBuilder(p pprofile.Profiles) *dictBuilder {
	b := &dictBuilder{d: p.Dictionary()}
	b.d.StringTable().Append("")
	b.d.MappingTable().AppendEmpty()
	b.d.LocationTable().AppendEmpty()
	b.d.FunctionTable().AppendEmpty()
	b.d.LinkTable().AppendEmpty()
	b.d.AttributeTable().AppendEmpty()
	b.d.StackTable().AppendEmpty()
	return b
}

func (b *dictBuilder) str(s string) int32 {
	i, err := pprofile.SetString(b.d.StringTable(), s)
	if err != nil {
		panic(err)
	}
	return i
}

func (b *dictBuilder) attr(key string, value any) int32 {
	a := pprofile.NewKeyValueAndUnit()
	a.SetKeyStrindex(b.str(key))
	if err := a.Value().FromRaw(value); err != nil {
		panic(err)
	}
	i, err := pprofile.SetAttribute(b.d.AttributeTable(), a)
	if err != nil {
		panic(err)
	}
	return i
}

// location adds a location of a mapping with a GNU build id, of a frame
// type, with one line per function name given (none: unsymbolized).
func (b *dictBuilder) location(file, buildID, frameType string, addr uint64, funcs ...string) int32 {
	m := b.d.MappingTable().AppendEmpty()
	m.SetFilenameStrindex(b.str(file))
	if buildID != "" {
		m.AttributeIndices().Append(b.attr("process.executable.build_id.gnu", buildID))
		m.AttributeIndices().Append(b.attr("process.executable.build_id.htlhash", "00112233445566778899aabbccddeeff"))
	}
	l := b.d.LocationTable().AppendEmpty()
	l.SetMappingIndex(int32(b.d.MappingTable().Len() - 1))
	l.SetAddress(addr)
	if frameType != "" {
		l.AttributeIndices().Append(b.attr("profile.frame.type", frameType))
	}
	for _, name := range funcs {
		f := b.d.FunctionTable().AppendEmpty()
		f.SetNameStrindex(b.str(name))
		l.Lines().AppendEmpty().SetFunctionIndex(int32(b.d.FunctionTable().Len() - 1))
	}
	return int32(b.d.LocationTable().Len() - 1)
}

func (b *dictBuilder) stack(locs ...int32) int32 {
	b.d.StackTable().AppendEmpty().LocationIndices().Append(locs...)
	return int32(b.d.StackTable().Len() - 1)
}

// ebpfProfilerRequest is a request shaped as the OpenTelemetry eBPF
// profiler sends one: a resource per process (pid, container, executable
// in the resource), samples/count with a cpu/nanoseconds period and
// timestamps alone, thread.name / thread.id / cpu.logical_number on each
// sample, kernel frames symbolized, native frames not, an inlined Go
// frame, and an interpreted Python frame (its function's file and first
// line, its line's number).
func ebpfProfilerRequest() pprofile.Profiles {
	p := pprofile.NewProfiles()
	b := newDictBuilder(p)
	kernel := b.location("", "", "kernel", 0xffffffff81000010, "entry_SYSCALL_64")
	native := b.location("/usr/lib/libc.so.6", "c0ffee", "native", 0x1234)
	inlined := b.location("/usr/local/bin/server", "", "go", 0x4000, "runtime.memmove", "main.handle")
	python := b.location("", "", "cpython", 17, "handler")
	pyLine := b.d.LocationTable().At(int(python)).Lines().At(0)
	pyLine.SetLine(12)
	pyFunc := b.d.FunctionTable().At(int(pyLine.FunctionIndex()))
	pyFunc.SetFilenameStrindex(b.str("/srv/app.py"))
	pyFunc.SetStartLine(10)
	stack := b.stack(kernel, native, inlined, python)

	rp := p.ResourceProfiles().AppendEmpty()
	rp.Resource().Attributes().PutStr("host.name", "worker-1")
	rp.Resource().Attributes().PutInt("process.pid", 4242)
	rp.Resource().Attributes().PutStr("container.id", "deadbeef")
	rp.Resource().Attributes().PutStr("process.executable.name", "server")
	rp.Resource().Attributes().PutStr("process.executable.path", "/usr/local/bin/server")
	sp := rp.ScopeProfiles().AppendEmpty()
	sp.Scope().SetName("go.opentelemetry.io/ebpf-profiler")
	prof := sp.Profiles().AppendEmpty()
	prof.SampleType().SetTypeStrindex(b.str("samples"))
	prof.SampleType().SetUnitStrindex(b.str("count"))
	prof.PeriodType().SetTypeStrindex(b.str("cpu"))
	prof.PeriodType().SetUnitStrindex(b.str("nanoseconds"))
	prof.SetPeriod(50_000_000) // 20 Hz
	prof.SetTime(pcommon.Timestamp(1_000))
	s := prof.Samples().AppendEmpty()
	s.SetStackIndex(stack)
	s.AttributeIndices().Append(b.attr("thread.name", "worker"), b.attr("thread.id", int64(4243)), b.attr("cpu.logical_number", int64(3)))
	s.TimestampsUnixNano().Append(2_000, 3_000)
	return p
}

// TestDecodeEBPFProfiler: a request of the OpenTelemetry eBPF profiler's
// shape reads as heatscope samples: the resource's pid and container, the
// sample's thread and CPU, each timestamp a sample of the profile's
// period, inlined lines as frames, unsymbolized frames named as heatscope
// names them, frame types as kinds, the GNU build id kept.
func TestDecodeEBPFProfiler(t *testing.T) {
	got, rep := decodeAll(t, wire(t, ebpfProfilerRequest()), DecodeOptions{})
	stack := []sample.Frame{
		{Function: "entry_SYSCALL_64", Module: sample.KernelModule, Address: 0xffffffff81000010, Kind: sample.KindKernel},
		{Function: "[libc.so.6+0x1234]", Module: "/usr/lib/libc.so.6", BuildID: "c0ffee", Address: 0x1234, Kind: sample.KindUser},
		{Function: "runtime.memmove", Module: "/usr/local/bin/server", Address: 0x4000, Kind: sample.KindUser},
		{Function: "main.handle", Module: "/usr/local/bin/server", Address: 0x4000, Kind: sample.KindUser},
		{Function: "handler", Module: "/srv/app.py", Kind: sample.KindPython, Line: 12, StartLine: 10},
	}
	one := sample.Sample{CPU: 3, PID: 4242, TID: 4243, Comm: "worker", Node: "worker-1", PeriodNs: 50_000_000,
		Container: &sample.Container{ID: "deadbeef"}, Stack: stack}
	first, second := one, one
	first.Time, second.Time = 2_000, 3_000
	if want := []sample.Sample{first, second}; !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	if !reflect.DeepEqual(rep, Report{Samples: 2}) {
		t.Errorf("report %+v, want 2 samples and nothing guessed", rep)
	}
}

// TestDecodeTolerant: what a sender leaves out is unknown, never a panic:
// no attributes at all, attributes of the wrong type or out of range, a
// count without a period (weight unknown, counted), values without
// timestamps (the profile's time, counted), no CPU or one out of range
// (CPU 0, counted), a profile that is not CPU time (left out, named),
// another attribute naming the node.
func TestDecodeTolerant(t *testing.T) {
	p := pprofile.NewProfiles()
	b := newDictBuilder(p)
	loc := b.location("", "", "", 0x99)
	stack := b.stack(loc)
	rp := p.ResourceProfiles().AppendEmpty()
	rp.Resource().Attributes().PutStr("k8s.node.name", "kn-1")
	rp.Resource().Attributes().PutStr("host.name", "ignored")
	sp := rp.ScopeProfiles().AppendEmpty()

	counts := sp.Profiles().AppendEmpty() // no period: weight unknown
	counts.SampleType().SetTypeStrindex(b.str("samples"))
	counts.SampleType().SetUnitStrindex(b.str("count"))
	counts.SetTime(pcommon.Timestamp(77))
	s := counts.Samples().AppendEmpty()
	s.SetStackIndex(stack)
	s.AttributeIndices().Append(b.attr("process.pid", "not a number"), b.attr("thread.id", int64(-5)), b.attr("cpu.logical_number", int64(1)<<40), b.attr("thread.name", true))
	s.Values().Append(4)

	offCPU := sp.Profiles().AppendEmpty()
	offCPU.SampleType().SetTypeStrindex(b.str("off_cpu"))
	offCPU.SampleType().SetUnitStrindex(b.str("nanoseconds"))
	offCPU.Samples().AppendEmpty().TimestampsUnixNano().Append(5)

	cpuNs := sp.Profiles().AppendEmpty() // values alone, in nanoseconds
	cpuNs.SampleType().SetTypeStrindex(b.str("cpu"))
	cpuNs.SampleType().SetUnitStrindex(b.str("nanoseconds"))
	cpuNs.SetTime(pcommon.Timestamp(88))
	s = cpuNs.Samples().AppendEmpty()
	s.Values().Append(7_000_000, 3_000_000)
	s.AttributeIndices().Append(b.attr("process.pid", "31"))

	got, rep := decodeAll(t, wire(t, p), DecodeOptions{NodeAttribute: "k8s.node.name"})
	unknown := []sample.Frame{{Function: "[unknown+0x99]", Address: 0x99}}
	want := []sample.Sample{
		{Time: 77, Node: "kn-1", Stack: unknown},
		{Time: 88, PID: 31, Node: "kn-1", PeriodNs: 7_000_000, Stack: []sample.Frame{}},
		{Time: 88, PID: 31, Node: "kn-1", PeriodNs: 3_000_000, Stack: []sample.Frame{}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	wantRep := Report{Samples: 3, NoTimestamp: 3, NoPeriod: 1, NoCPU: 3, Skipped: []SkippedProfile{{Type: "off_cpu", Unit: "nanoseconds", Samples: 1}}}
	if !reflect.DeepEqual(rep, wantRep) {
		t.Errorf("report %+v, want %+v", rep, wantRep)
	}
	if s := rep.Skipped[0].String(); !strings.Contains(s, "off_cpu/nanoseconds") {
		t.Errorf("skipped profile named %q", s)
	}
}

// TestDecodeLongStack: a stack past MaxStackFrames keeps its leaf-most
// frames and is counted.
func TestDecodeLongStack(t *testing.T) {
	p := pprofile.NewProfiles()
	b := newDictBuilder(p)
	names := make([]string, 600)
	for i := range names {
		names[i] = "f"
	}
	names[0] = "leaf"
	loc := b.location("/bin/x", "", "native", 1, names...)
	stack := b.stack(loc, loc, loc)
	prof := p.ResourceProfiles().AppendEmpty().ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	prof.SampleType().SetTypeStrindex(b.str("cpu"))
	prof.SampleType().SetUnitStrindex(b.str("nanoseconds"))
	s := prof.Samples().AppendEmpty()
	s.SetStackIndex(stack)
	s.Values().Append(1, 2)
	s.TimestampsUnixNano().Append(1, 2)
	got, rep := decodeAll(t, p, DecodeOptions{})
	if len(got) != 2 || len(got[0].Stack) != MaxStackFrames || got[0].Stack[0].Function != "leaf" || rep.TruncatedStacks != 2 {
		t.Errorf("%d samples, first of %d frames, report %+v; want 2 of %d frames, both counted", len(got), len(got[0].Stack), rep, MaxStackFrames)
	}
}

// TestDecodeHostile: a request whose indices point outside their tables,
// or whose values cannot be, is an error naming what is wrong, and the
// function sees no sample of it, not even those before the bad one.
func TestDecodeHostile(t *testing.T) {
	valid := func() pprofile.Profiles {
		e := NewEncoder("dev", "n", 1)
		for i := range 3 {
			e.Add(&sample.Sample{Time: int64(i), PID: 1, Comm: "c", Container: &sample.Container{ID: "x"},
				Stack: []sample.Frame{{Function: "f", Module: "/m", BuildID: "b", Address: 1, Kind: sample.KindUser, Method: sample.MethodFP}}})
		}
		p := e.Profiles()
		// A second sample after the first, so that the bad one is not first.
		p.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().AppendEmpty().TimestampsUnixNano().Append(9)
		return p
	}
	last := func(p pprofile.Profiles) pprofile.Sample {
		ss := p.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples()
		return ss.At(ss.Len() - 1)
	}
	prof := func(p pprofile.Profiles) pprofile.Profile {
		return p.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0)
	}
	cases := []struct {
		name, want string
		spoil      func(p pprofile.Profiles)
	}{
		{"stack index", "stack index 7", func(p pprofile.Profiles) { last(p).SetStackIndex(7) }},
		{"negative stack index", "stack index -1", func(p pprofile.Profiles) { last(p).SetStackIndex(-1) }},
		{"sample attribute", "attribute index 1000", func(p pprofile.Profiles) { last(p).AttributeIndices().Append(1000) }},
		{"link", "link index 3", func(p pprofile.Profiles) { last(p).SetLinkIndex(3) }},
		{"values and timestamps", "2 values for 1 timestamps", func(p pprofile.Profiles) { last(p).Values().Append(1, 2) }},
		{"negative value", "negative value", func(p pprofile.Profiles) {
			last(p).TimestampsUnixNano().FromRaw(nil)
			last(p).Values().Append(-1)
		}},
		{"timestamp", "past 2262", func(p pprofile.Profiles) { last(p).TimestampsUnixNano().Append(1 << 63) }},
		{"sample type", "string index 500", func(p pprofile.Profiles) { prof(p).SampleType().SetUnitStrindex(500) }},
		{"profile attribute", "attribute index 99", func(p pprofile.Profiles) { prof(p).AttributeIndices().Append(99) }},
		{"stack location", "location index 50", func(p pprofile.Profiles) {
			p.Dictionary().StackTable().At(1).LocationIndices().Append(50)
		}},
		{"location mapping", "mapping index 9", func(p pprofile.Profiles) { p.Dictionary().LocationTable().At(1).SetMappingIndex(9) }},
		{"location attribute", "attribute index -3", func(p pprofile.Profiles) {
			p.Dictionary().LocationTable().At(1).AttributeIndices().Append(-3)
		}},
		{"line function", "function index 12", func(p pprofile.Profiles) {
			p.Dictionary().LocationTable().At(1).Lines().At(0).SetFunctionIndex(12)
		}},
		{"function name", "name string index 4000", func(p pprofile.Profiles) { p.Dictionary().FunctionTable().At(1).SetNameStrindex(4000) }},
		{"function system name", "system name string index 4000", func(p pprofile.Profiles) {
			p.Dictionary().FunctionTable().At(1).SetSystemNameStrindex(4000)
		}},
		{"mapping file", "file name string index 4000", func(p pprofile.Profiles) { p.Dictionary().MappingTable().At(1).SetFilenameStrindex(4000) }},
		{"mapping attribute", "attribute index 77", func(p pprofile.Profiles) { p.Dictionary().MappingTable().At(1).AttributeIndices().Append(77) }},
		{"attribute key", "key string index 4000", func(p pprofile.Profiles) { p.Dictionary().AttributeTable().At(1).SetKeyStrindex(4000) }},
		{"attribute unit", "unit string index -1", func(p pprofile.Profiles) { p.Dictionary().AttributeTable().At(1).SetUnitStrindex(-1) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := valid()
			if _, err := Decode(p, DecodeOptions{}, func(*sample.Sample) error { return nil }); err != nil {
				t.Fatalf("the valid request: %v", err)
			}
			c.spoil(p)
			called := 0
			_, err := Decode(p, DecodeOptions{}, func(*sample.Sample) error { called++; return nil })
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one saying %q", err, c.want)
			}
			if called != 0 {
				t.Errorf("the function saw %d samples of a bad request", called)
			}
		})
	}
}

// TestDecodeStopsOnError: an error of the function's stops Decode and is
// returned as it is.
func TestDecodeStopsOnError(t *testing.T) {
	e := NewEncoder("dev", "n", 1)
	for i := range 5 {
		e.Add(&sample.Sample{Time: int64(i)})
	}
	stop := errors.New("full")
	calls := 0
	_, err := Decode(e.Profiles(), DecodeOptions{}, func(*sample.Sample) error {
		calls++
		return stop
	})
	if err != stop || calls != 1 {
		t.Errorf("error %v after %d calls, want %v after 1", err, calls, stop)
	}
}
