package profileio

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/sample"
)

var foldedStart = time.Unix(1_700_000_000, 0)

func readFolded(t *testing.T, o FoldedOptions, data []byte, span time.Duration) []sample.Sample {
	t.Helper()
	return collect(t, func(fn func(*sample.Sample) error) error {
		return o.Read(bytes.NewReader(data), foldedStart, span, fn)
	})
}

func user(name string) sample.Frame { return sample.Frame{Function: name, Kind: sample.KindUser} }

func TestReadFoldedFile(t *testing.T) {
	data, err := os.ReadFile("testdata/stacks.folded")
	if err != nil {
		t.Fatal(err)
	}
	kernel := func(name string) sample.Frame {
		return sample.Frame{Function: name, Module: sample.KernelModule, Kind: sample.KindKernel}
	}
	jit := func(name string) sample.Frame {
		return sample.Frame{Function: name, Module: jitModule, Kind: sample.KindJIT}
	}
	unknown := sample.Frame{Function: "[unknown]", Kind: sample.KindUnknown}
	stacks := []struct {
		comm  string
		stack []sample.Frame
		count int
	}{
		{"bash", []sample.Frame{unknown, user("read_input"), user("main")}, 3},
		{"swapper", []sample.Frame{kernel("default_idle"), kernel("cpu_idle"), kernel("start_kernel")}, 2},
		{"java", []sample.Frame{user("inlined_fn"), jit("LFoo:.bar"), jit("Interpreter")}, 4},
		{"go", []sample.Frame{user("main.(*T).hot"), user("main.main"), user("runtime.main")}, 1},
	}
	const span = 10 * time.Second // 10 samples: one a second
	var want, wantNoComm []sample.Sample
	for _, st := range stacks {
		for range st.count {
			at := foldedStart.Add(time.Duration(len(want)) * time.Second).UnixNano()
			want = append(want, sample.Sample{Time: at, Comm: st.comm, Stack: st.stack})
			withComm := append(append([]sample.Frame(nil), st.stack...), user(st.comm))
			wantNoComm = append(wantNoComm, sample.Sample{Time: at, Stack: withComm})
		}
	}
	for name, input := range map[string][]byte{"plain": data, "gzip": gzipBytes(t, data)} {
		t.Run(name, func(t *testing.T) {
			got := readFolded(t, FoldedOptions{FirstFrameIsComm: true}, input, span)
			if diff := diffSamples(want, got); diff != "" {
				t.Errorf("with comm: %s", diff)
			}
			got = collect(t, func(fn func(*sample.Sample) error) error {
				return ReadFolded(bytes.NewReader(input), foldedStart, span, fn)
			})
			if diff := diffSamples(wantNoComm, got); diff != "" {
				t.Errorf("without comm: %s", diff)
			}
		})
	}
}

func TestReadFoldedSpread(t *testing.T) {
	// 3 samples over 1 ns: all fit in [start, start+1ns), at 0, 0, 0;
	// 4 over 10 ns: 0, 2, 5, 7 (i*span/N rounded down).
	got := readFolded(t, FoldedOptions{}, []byte("a 3\n"), 1)
	for _, s := range got {
		if s.Time != foldedStart.UnixNano() {
			t.Errorf("time %d, want %d", s.Time, foldedStart.UnixNano())
		}
	}
	got = readFolded(t, FoldedOptions{}, []byte("a;b 1\nc 3\n"), 10)
	var offsets []int64
	for _, s := range got {
		offsets = append(offsets, s.Time-foldedStart.UnixNano())
	}
	if fmt.Sprint(offsets) != "[0 2 5 7]" {
		t.Errorf("offsets %v, want [0 2 5 7]", offsets)
	}
	// A huge span times a large index must not overflow.
	got = readFolded(t, FoldedOptions{}, []byte("a 2\n"), 200*365*24*time.Hour)
	if want := foldedStart.Add(100 * 365 * 24 * time.Hour).UnixNano(); got[1].Time != want {
		t.Errorf("second sample at %d, want %d", got[1].Time, want)
	}
}

func TestReadFoldedErrors(t *testing.T) {
	tests := []struct{ name, input, want string }{
		{"no count", "main;f\n", "line 1: no sample count"},
		{"not a number", "main;f x\n", `line 1: sample count "x" is not a positive integer`},
		{"zero", "\n\nmain;f 0\n", "line 3: sample count"},
		{"negative", "main;f -3\n", "line 1: sample count"},
		{"fraction", "main;f 1.5\n", "line 1: sample count"},
		{"too large", "main;f 99999999999999999999\n", "line 1: sample count"},
		{"overflow", "a 9223372036854775807\nb 1\n", "line 2: sample counts add up"},
		{"perf script", "bash 1 [000] 1.0: cpu-clock:\n", "line 1: sample count"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			called := false
			err := ReadFolded(strings.NewReader(tt.input), foldedStart, time.Second, func(*sample.Sample) error {
				called = true
				return nil
			})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
			if called {
				t.Error("samples were emitted before the error")
			}
		})
	}
	if err := ReadFolded(strings.NewReader("a 1\n"), foldedStart, -time.Second, func(*sample.Sample) error { return nil }); err == nil {
		t.Error("a negative span was accepted")
	}
	if err := ReadFolded(strings.NewReader("a 1\n"), time.Time{}, time.Second, func(*sample.Sample) error { return nil }); err == nil {
		t.Error("a start time outside Unix nanoseconds was accepted")
	}
}

func TestFoldedRoundTrip(t *testing.T) {
	samples := testSamples()
	samples = append(samples,
		sample.Sample{Time: 1, Comm: "java", Stack: []sample.Frame{
			{Function: "Interpreter", Module: jitModule, Kind: sample.KindJIT},
			{Function: "[libjvm.so+0x10]", Module: "/usr/lib/libjvm.so", Kind: sample.KindUnknown},
			vfs,
		}},
		sample.Sample{Time: 2, Comm: "java", Stack: []sample.Frame{
			{Function: "Interpreter", Module: jitModule, Kind: sample.KindJIT},
			{Function: "[libjvm.so+0x10]", Module: "/usr/lib/libjvm.so", Kind: sample.KindUnknown},
			vfs,
		}},
	)
	b := NewFoldedBuilder()
	b.AnnotateKinds(true)
	for i := range samples {
		b.Add(&samples[i])
	}
	var buf bytes.Buffer
	if _, err := b.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	// Folded stacks keep the command, the function names and the kinds.
	key := func(s sample.Sample) string {
		k := s.Comm
		for _, f := range s.Stack {
			k += fmt.Sprintf(";%s/%v", strings.ReplaceAll(f.Function, ";", ":"), f.Kind)
		}
		return k
	}
	want := map[string]int{}
	for _, s := range samples {
		want[key(s)]++
	}
	const span = time.Minute
	got := map[string]int{}
	var last int64
	for i, s := range readFolded(t, FoldedOptions{FirstFrameIsComm: true}, buf.Bytes(), span) {
		got[key(s)]++
		if s.Time < last || s.Time >= foldedStart.Add(span).UnixNano() || (i == 0 && s.Time != foldedStart.UnixNano()) {
			t.Errorf("sample %d at %d, outside the span or out of order", i, s.Time)
		}
		last = s.Time
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("stacks read back:\n%v\nwant\n%v\nfrom\n%s", got, want, buf.String())
	}
	if !strings.Contains(buf.String(), "vfs_read_[k]") || !strings.Contains(buf.String(), "Interpreter_[j]") {
		t.Errorf("kinds not annotated:\n%s", buf.String())
	}
}
