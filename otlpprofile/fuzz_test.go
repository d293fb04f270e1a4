package otlpprofile

import (
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/heatscope/heatscope/sample"
)

// The seed corpus is in testdata/fuzz/FuzzDecode/: a request heatscope
// wrote and one of the OpenTelemetry eBPF profiler's shape.

// fuzzSampleLimit and fuzzFrameLimit stop a decode after this many
// samples or frames: a small request can stand for many (a sample of many
// timestamps, a stack of many inlined lines).
const (
	fuzzSampleLimit = 20_000
	fuzzFrameLimit  = 1 << 18
)

var errEnough = errors.New("enough samples")

// FuzzDecode: any bytes either fail to unmarshal, fail Decode's checks
// with an error, or decode into samples that keep heatscope's invariants;
// and what was decoded is a fixed point: encoded and decoded again, it
// gives the same samples.
func FuzzDecode(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := UnmarshalRequest(data)
		if err != nil {
			return
		}
		var got []sample.Sample
		frames := 0
		_, err = Decode(p, DecodeOptions{}, func(s *sample.Sample) error {
			checkSample(t, s)
			frames += len(s.Stack)
			if len(got) == fuzzSampleLimit || frames > fuzzFrameLimit {
				return errEnough
			}
			c := *s
			c.Stack = slices.Clone(s.Stack)
			got = append(got, c)
			return nil
		})
		if err != nil {
			return
		}
		e := NewEncoder("fuzz", "", 0)
		for i := range got {
			e.Add(&got[i])
		}
		again, _ := decodeAll(t, wire(t, e.Profiles()), DecodeOptions{})
		sortSamples(got)
		sortSamples(again)
		if len(got) != len(again) {
			t.Fatalf("%d samples decoded, %d after encoding them again", len(got), len(again))
		}
		for i := range got {
			if !reflect.DeepEqual(got[i], again[i]) {
				t.Fatalf("sample %d:\n first  %+v %+v\n again  %+v %+v", i, got[i], got[i].Container, again[i], again[i].Container)
			}
		}
	})
}

// checkSample fails t when s breaks the invariants every reader keeps.
func checkSample(t *testing.T, s *sample.Sample) {
	t.Helper()
	if len(s.Stack) > MaxStackFrames {
		t.Fatalf("%d frames", len(s.Stack))
	}
	if s.Time < 0 || s.PeriodNs < 0 {
		t.Fatalf("time %d, period %d", s.Time, s.PeriodNs)
	}
	for _, f := range s.Stack {
		if f.Function == "" {
			t.Fatalf("frame without a name: %+v", f)
		}
		if !f.Kind.Valid() {
			t.Fatalf("frame of kind %d", f.Kind)
		}
		if f.Kind != sample.KindPython && (f.Line != 0 || f.StartLine != 0) || f.Kind == sample.KindPython && (f.Address != 0 || f.BuildID != "") {
			t.Fatalf("frame %+v", f)
		}
		if f.Method > sample.MethodFP || f.Method != sample.MethodNotKnown && f.Kind == sample.KindKernel {
			t.Fatalf("frame of kind %d marked with method %d", f.Kind, f.Method)
		}
	}
	if s.Container != nil && *s.Container == (sample.Container{}) {
		t.Fatalf("an empty container")
	}
}
