package profileio

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/heatscope/heatscope/sample"
)

// The seed corpora are in testdata/fuzz/<FuzzName>/.

// fuzzSampleLimit stops a read after this many samples: a tiny input can
// stand for billions of them (a folded count, a pprof value).
const fuzzSampleLimit = 10_000

var errEnough = errors.New("enough samples")

// checkSample fails t when s breaks the invariants every reader keeps.
func checkSample(t *testing.T, s *sample.Sample) {
	t.Helper()
	for _, f := range s.Stack {
		if f.Function == "" {
			t.Fatalf("frame without a name: %+v", f)
		}
		if !f.Kind.Valid() {
			t.Fatalf("frame of kind %d", f.Kind)
		}
		if f.Method > sample.MethodFP || f.Method != sample.MethodNotKnown && f.Kind == sample.KindKernel {
			t.Fatalf("frame of kind %d marked with method %d", f.Kind, f.Method)
		}
	}
}

func FuzzReadPerfScript(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		n := 0
		err := ReadPerfScript(bytes.NewReader(data), func(s *sample.Sample) error {
			checkSample(t, s)
			if s.Stack != nil && len(s.Stack) == 0 {
				t.Fatal("empty, non-nil stack")
			}
			n++
			if n >= fuzzSampleLimit {
				return errEnough
			}
			return nil
		})
		if err != nil && n >= fuzzSampleLimit && !errors.Is(err, errEnough) {
			t.Fatalf("callback error lost: %v", err)
		}
		// Every line is an event line exactly when FlameScope says so.
		if len(data) < 4096 {
			for _, line := range bytes.Split(data, []byte("\n")) {
				checkFindEventTime(t, string(bytes.TrimSuffix(line, []byte("\r"))))
			}
		}
	})
}

func FuzzReadFolded(f *testing.F) {
	start := time.Unix(1_700_000_000, 0)
	const span = time.Minute
	f.Fuzz(func(t *testing.T, data []byte, firstIsComm bool) {
		n := 0
		last := int64(-1 << 63)
		_ = FoldedOptions{FirstFrameIsComm: firstIsComm}.Read(bytes.NewReader(data), start, span, func(s *sample.Sample) error {
			checkSample(t, s)
			if s.Time < start.UnixNano() || s.Time >= start.Add(span).UnixNano() || s.Time < last {
				t.Fatalf("sample %d at %d: outside the span or out of order", n, s.Time)
			}
			if !firstIsComm && s.Comm != "" {
				t.Fatalf("comm %q without FirstFrameIsComm", s.Comm)
			}
			last = s.Time
			n++
			if n >= fuzzSampleLimit {
				return errEnough
			}
			return nil
		})
	})
}

func FuzzReadPprof(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		n := 0
		_ = ReadPprof(bytes.NewReader(data), func(s *sample.Sample) error {
			checkSample(t, s)
			n++
			if n >= fuzzSampleLimit {
				return errEnough
			}
			return nil
		})
	})
}

func FuzzDetect(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		format, err := Detect(data)
		if (err == nil) != (format != FormatUnknown) {
			t.Fatalf("Detect gave %v with error %v", format, err)
		}
		if err != nil {
			return
		}
		n := 0
		got, _ := ReadAny(bytes.NewReader(data), AnyOptions{FoldedStart: time.Unix(0, 0), FoldedSpan: time.Second}, func(s *sample.Sample) error {
			checkSample(t, s)
			n++
			if n >= fuzzSampleLimit {
				return errEnough
			}
			return nil
		})
		if len(data) < DetectHeadSize && got != format {
			t.Fatalf("Detect says %v, ReadAny read %v", format, got)
		}
	})
}
