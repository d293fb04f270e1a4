package profileio

import (
	"bytes"
	"slices"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/heatscope/heatscope/sample"
)

var (
	hot    = sample.Frame{Function: "hot_c_function", Module: "/usr/bin/fixture", BuildID: "abcd", Address: 0x1130, Kind: sample.KindUser}
	inner  = sample.Frame{Function: "inner", Module: "/usr/bin/fixture", BuildID: "abcd", Address: 0x1160, Kind: sample.KindUser}
	mainFn = sample.Frame{Function: "main", Module: "/usr/bin/fixture", BuildID: "abcd", Address: 0x1190, Kind: sample.KindUser}
	vfs    = sample.Frame{Function: "vfs_read", Module: sample.KernelModule, Address: 0xffffffff81234567, Kind: sample.KindKernel}
	odd    = sample.Frame{Function: "ns::f;g", Module: "/lib/x.so", Address: 0x10, Kind: sample.KindUser}
)

func testSamples() []sample.Sample {
	return []sample.Sample{
		{Time: 1_000_000_000, CPU: 0, PID: 10, TID: 10, Comm: "fixture", Stack: []sample.Frame{hot, inner, mainFn}},
		{Time: 1_010_000_000, CPU: 0, PID: 10, TID: 10, Comm: "fixture", Stack: []sample.Frame{hot, inner, mainFn}},
		{Time: 1_020_000_000, CPU: 1, PID: 10, TID: 11, Comm: "fixture", Stack: []sample.Frame{vfs, inner, mainFn}},
		{Time: 1_500_000_000, CPU: 1, PID: 20, TID: 20, Comm: "other", Stack: []sample.Frame{odd}},
	}
}

func TestPprofRoundTrip(t *testing.T) {
	const period = 10_101_010
	b := NewPprofBuilder(period)
	for i := range testSamples() {
		b.Add(&testSamples()[i])
	}
	var buf bytes.Buffer
	if err := WritePprof(&buf, b.Profile()); err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(&buf)
	if err != nil {
		t.Fatalf("parse written profile: %v", err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	if len(p.SampleType) != 2 || p.SampleType[0].Type != "samples" || p.SampleType[1].Unit != "nanoseconds" || p.Period != period {
		t.Fatalf("sample types %v period %d", p.SampleType, p.Period)
	}
	// The two identical samples merge; the other two stay apart.
	if len(p.Sample) != 3 {
		t.Fatalf("%d samples, want 3", len(p.Sample))
	}
	first := p.Sample[0]
	if first.Value[0] != 2 || first.Value[1] != 2*period {
		t.Errorf("merged sample values %v", first.Value)
	}
	if first.Label["comm"][0] != "fixture" || first.Label["pid"][0] != "10" || first.Label["tid"][0] != "10" || first.NumLabel["cpu"][0] != 0 {
		t.Errorf("labels %v %v", first.Label, first.NumLabel)
	}
	if names := []string{first.Location[0].Line[0].Function.Name, first.Location[2].Line[0].Function.Name}; names[0] != "hot_c_function" || names[1] != "main" {
		t.Errorf("stack leaf..root = %v", names)
	}
	if m := first.Location[0].Mapping; m.File != "/usr/bin/fixture" || m.BuildID != "abcd" || !m.HasFunctions {
		t.Errorf("user mapping %+v", m)
	}
	if m := p.Sample[1].Location[0].Mapping; m.File != "[kernel.kallsyms]" {
		t.Errorf("kernel frame mapping %q", m.File)
	}
	if p.TimeNanos != 1_000_000_000 || p.DurationNanos != 500_000_000+period {
		t.Errorf("time %d duration %d", p.TimeNanos, p.DurationNanos)
	}
}

func TestFolded(t *testing.T) {
	b := NewFoldedBuilder()
	for i := range testSamples() {
		b.Add(&testSamples()[i])
	}
	var buf bytes.Buffer
	if _, err := b.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	want := "fixture;main;inner;hot_c_function 2\n" +
		"fixture;main;inner;vfs_read 1\n" +
		"other;ns::f:g 1\n"
	if buf.String() != want {
		t.Fatalf("folded:\n%s\nwant:\n%s", buf.String(), want)
	}
}

func TestTopFunctions(t *testing.T) {
	b := NewPprofBuilder(1)
	for i := range testSamples() {
		b.Add(&testSamples()[i])
	}
	top := TopFunctions(b.Profile(), nil)
	got := map[string]FunctionCount{}
	for _, fc := range top {
		got[fc.Name] = fc
	}
	if top[0].Name != "hot_c_function" || top[0].Self != 2 {
		t.Errorf("top = %+v", top[0])
	}
	if got["main"].Self != 0 || got["main"].Total != 3 || got["inner"].Total != 3 || got["ns::f;g"].Self != 1 {
		t.Errorf("counts %+v", got)
	}
	// Functions without self time sort last, by name.
	if last := top[len(top)-2:]; last[0].Name != "inner" || last[1].Name != "main" || last[0].Self != 0 || last[1].Self != 0 {
		t.Errorf("functions without self time do not sort last by name: %+v", top)
	}
}

// TestTopFunctionsWeighPeriods: 60 samples of fast at 99 Hz (0.61 s),
// then, the rate lowered, 30 of slow at 24.5 Hz (1.22 s): slow took more
// CPU time and comes first, though it has fewer samples.
func TestTopFunctionsWeighPeriods(t *testing.T) {
	p99, p24 := int64(1e9)/99, int64(1e9)/99*4
	b := NewPprofBuilder(p99)
	add := func(fn string, n int) {
		s := sample.Sample{Comm: "app", PID: 1, TID: 1, Stack: []sample.Frame{{Function: fn, Kind: sample.KindUser}, {Function: "main", Kind: sample.KindUser}}}
		for range n {
			b.Add(&s)
		}
	}
	add("fast", 60)
	b.SetPeriod(p24)
	add("slow", 30)
	top := TopFunctions(b.Profile(), nil)
	want := []FunctionCount{
		{Name: "slow", Self: 30, Total: 30, SelfNs: 30 * p24, TotalNs: 30 * p24},
		{Name: "fast", Self: 60, Total: 60, SelfNs: 60 * p99, TotalNs: 60 * p99},
		{Name: "main", Total: 90, TotalNs: 60*p99 + 30*p24},
	}
	if !slices.Equal(top, want) {
		t.Fatalf("top:\n%+v\nwant\n%+v", top, want)
	}
}

// TestBuildersWeighEachSamplesPeriod: a sample that carries its period
// (as the recorder stamps them) weighs it in the pprof and folded
// outputs, whatever the builder's period; one that carries none weighs
// the builder's.
func TestBuildersWeighEachSamplesPeriod(t *testing.T) {
	p99, p24 := sample.PeriodOf(99), sample.PeriodOf(24)
	pb, fb := NewPprofBuilder(p99), NewFoldedBuilder()
	fb.SetPeriod(p99)
	add := func(fn string, period int64, n int) {
		s := sample.Sample{Comm: "app", PID: 1, TID: 1, PeriodNs: period, Stack: []sample.Frame{{Function: fn, Kind: sample.KindUser}}}
		for range n {
			pb.Add(&s)
			fb.Add(&s)
		}
	}
	add("fast", 0, 10)
	add("slow", p24, 5)
	top := TopFunctions(pb.Profile(), nil)
	want := []FunctionCount{
		{Name: "slow", Self: 5, Total: 5, SelfNs: 5 * p24, TotalNs: 5 * p24},
		{Name: "fast", Self: 10, Total: 10, SelfNs: 10 * p99, TotalNs: 10 * p99},
	}
	if !slices.Equal(top, want) {
		t.Errorf("pprof top:\n%+v\nwant\n%+v", top, want)
	}
	if short, long, mixed := fb.MixedPeriods(); !mixed || short != p99 || long != p24 {
		t.Errorf("folded periods: %d to %d (mixed %v), want %d to %d", short, long, mixed, p99, p24)
	}
	if got := fb.cpuNs["app;slow"]; got != 5*p24 {
		t.Errorf("folded CPU time of slow: %d, want %d", got, 5*p24)
	}
}
