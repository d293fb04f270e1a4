package profileio

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/heatscope/heatscope/sample"
)

// richSamples covers every frame kind, CPU 0, pid 0, identical samples and
// container metadata.
func richSamples() []sample.Sample {
	cart := &sample.Container{Cgroup: "/kubepods/besteffort/podu/abc", ID: "abc", Runtime: "containerd",
		PodUID: "u", QoS: "besteffort", Namespace: "shop", Pod: "cart-1", Name: "cart"}
	jitFrame := sample.Frame{Function: "Interpreter", Module: jitModule, Address: 0x7f92bdd98965, Kind: sample.KindJIT}
	perfMap := sample.Frame{Function: "LFoo;::bar", Module: "/tmp/perf-20.map", Address: 0x7f92bdd98000, Kind: sample.KindJIT}
	unknown := sample.Frame{Function: "[libjvm.so+0x1f00]", Module: "/usr/lib/libjvm.so", Address: 0x1f00, Kind: sample.KindUnknown}
	kmod := sample.Frame{Function: "nf_hook_slow", Module: "[nf_tables]", Address: 0xffffffffc0a1b2c3, Kind: sample.KindKernel}
	idle := sample.Frame{Function: "default_idle", Module: sample.KernelModule, Address: 0xffffffff821f68b5, Kind: sample.KindKernel}
	s := testSamples()
	return append(s,
		sample.Sample{Time: 2_000_000_000, CPU: 3, PID: 20, TID: 21, Comm: "java", CgroupID: 4242, Container: cart, Stack: []sample.Frame{kmod, vfs, perfMap, jitFrame, unknown, mainFn}},
		sample.Sample{Time: 2_000_000_000, CPU: 3, PID: 20, TID: 21, Comm: "java", CgroupID: 4242, Container: cart, Stack: []sample.Frame{kmod, vfs, perfMap, jitFrame, unknown, mainFn}},
		sample.Sample{Time: 2_500_000_000, CPU: 0, PID: 0, TID: 0, Comm: "swapper", Stack: []sample.Frame{idle}},
		sample.Sample{Time: 2_600_000_000, CPU: 1, PID: 30, TID: 30, Comm: "empty"},
	)
}

func writePprof(t *testing.T, samples []sample.Sample, keepTimes bool) []byte {
	t.Helper()
	b := NewPprofBuilder(10_101_010)
	b.KeepTimestamps(keepTimes)
	for i := range samples {
		b.Add(&samples[i])
	}
	var buf bytes.Buffer
	if err := WritePprof(&buf, b.Profile()); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func readPprof(t *testing.T, data []byte) []sample.Sample {
	t.Helper()
	return collect(t, func(fn func(*sample.Sample) error) error {
		return ReadPprof(bytes.NewReader(data), fn)
	})
}

func TestPprofRoundTripWithTimestamps(t *testing.T) {
	in := richSamples()
	data := writePprof(t, in, true)
	got := readPprof(t, data)
	if diff := diffSamples(in, got); diff != "" {
		t.Error(diff)
	}
	// The two identical java samples merged into one pprof sample of 2.
	p, err := profile.ParseData(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Sample) != len(in)-1 {
		t.Errorf("%d pprof samples, want %d", len(p.Sample), len(in)-1)
	}
	// Uncompressed protobuf reads the same.
	var raw bytes.Buffer
	if err := p.WriteUncompressed(&raw); err != nil {
		t.Fatal(err)
	}
	if diff := diffSamples(in, readPprof(t, raw.Bytes())); diff != "" {
		t.Errorf("uncompressed: %s", diff)
	}
}

func TestPprofRoundTripWithoutTimestamps(t *testing.T) {
	in := richSamples()
	data := writePprof(t, in, false)
	p, err := profile.ParseData(data)
	if err != nil {
		t.Fatal(err)
	}
	got := readPprof(t, data)
	// The same samples come back, apart from their times, which lie in the
	// profile's window.
	key := func(s sample.Sample) string {
		c := s.Container
		s.Time, s.Container = 0, nil
		if c != nil {
			return fmt.Sprintf("%+v in %+v", s, *c)
		}
		return fmt.Sprintf("%+v", s)
	}
	want := map[string]int{}
	for _, s := range in {
		want[key(s)]++
	}
	have := map[string]int{}
	for _, s := range got {
		have[key(s)]++
		if s.Time < p.TimeNanos || s.Time >= p.TimeNanos+p.DurationNanos {
			t.Errorf("sample at %d outside [%d, %d)", s.Time, p.TimeNanos, p.TimeNanos+p.DurationNanos)
		}
	}
	if fmt.Sprint(want) != fmt.Sprint(have) {
		t.Errorf("read\n%v\nwant\n%v", have, want)
	}
}

// TestReadPprofForeign reads a profile heatscope did not write: only a
// cpu/nanoseconds type, numeric labels, inlined lines, a mapping with an
// offset, a location without lines and one without a mapping.
func TestReadPprofForeign(t *testing.T) {
	m := &profile.Mapping{ID: 1, Start: 0x400000, Limit: 0x500000, Offset: 0x1000, File: "/usr/bin/app", BuildID: "beef"}
	fnInner := &profile.Function{ID: 1, Name: "inner"}
	fnOuter := &profile.Function{ID: 2, Name: "", SystemName: "_Z5outerv"}
	fnMain := &profile.Function{ID: 3, Name: "main"}
	inlined := &profile.Location{ID: 1, Mapping: m, Address: 0x401234, Line: []profile.Line{{Function: fnInner}, {Function: fnOuter}}}
	bare := &profile.Location{ID: 2, Mapping: m, Address: 0x402000}
	noMapping := &profile.Location{ID: 3, Address: 0x7f0000000000}
	kernelAddr := &profile.Location{ID: 4, Address: 0xffffffff81000000, Line: []profile.Line{{Function: fnMain}}}
	p := &profile.Profile{
		SampleType:    []*profile.ValueType{{Type: "cpu", Unit: "nanoseconds"}},
		PeriodType:    &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:        10_000_000,
		TimeNanos:     1_000_000_000,
		DurationNanos: 3_000_000_000,
		Mapping:       []*profile.Mapping{m},
		Function:      []*profile.Function{fnInner, fnOuter, fnMain},
		Location:      []*profile.Location{inlined, bare, noMapping, kernelAddr},
		Sample: []*profile.Sample{
			{Location: []*profile.Location{inlined, bare, noMapping}, Value: []int64{35_000_000},
				NumLabel: map[string][]int64{"pid": {7}, "tid": {8}, "cpu": {2}}, Label: map[string][]string{"comm": {"app"}}},
			{Location: []*profile.Location{kernelAddr}, Value: []int64{1}, Label: map[string][]string{"cpu": {"5"}}},
			{Location: []*profile.Location{kernelAddr}, Value: []int64{0}},
			{Location: []*profile.Location{kernelAddr}, Value: []int64{-20_000_000}},
		},
	}
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	stack := []sample.Frame{
		{Function: "inner", Module: "/usr/bin/app", BuildID: "beef", Address: 0x401234, Kind: sample.KindUser},
		{Function: "_Z5outerv", Module: "/usr/bin/app", BuildID: "beef", Address: 0x401234, Kind: sample.KindUser},
		{Function: "[app+0x3000]", Module: "/usr/bin/app", BuildID: "beef", Address: 0x402000, Kind: sample.KindUnknown},
		{Function: "[unknown]", Address: 0x7f0000000000, Kind: sample.KindUnknown},
	}
	head := sample.Sample{CPU: 2, PID: 7, TID: 8, Comm: "app", Stack: stack}
	var want []sample.Sample
	// 35 ms at a 10 ms period is 3 samples spread over the 3 s window.
	for i := range 3 {
		s := head
		s.Time = 1_000_000_000 + int64(i)*1_000_000_000
		want = append(want, s)
	}
	// 1 ns is less than a period but still one sample.
	want = append(want, sample.Sample{Time: 1_000_000_000, CPU: 5, Stack: []sample.Frame{
		{Function: "main", Address: 0xffffffff81000000, Kind: sample.KindKernel},
	}})
	if diff := diffSamples(want, readPprof(t, buf.Bytes())); diff != "" {
		t.Error(diff)
	}
}

func TestReadPprofErrors(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	random := make([]byte, 4096)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	good := writePprof(t, testSamples(), false)
	heap := &profile.Profile{SampleType: []*profile.ValueType{{Type: "inuse_space", Unit: "bytes"}}}
	var heapBuf bytes.Buffer
	if err := heap.Write(&heapBuf); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		input []byte
		want  string
	}{
		{"random bytes", random, "pprof:"},
		{"truncated gzip", good[:len(good)/2], "pprof:"},
		{"text", []byte("main;f 1\n"), "pprof:"},
		{"heap profile", heapBuf.Bytes(), "no samples/count or cpu/nanoseconds sample type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ReadPprof(bytes.NewReader(tt.input), func(*sample.Sample) error { return nil })
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}
