package profileio

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/heatscope/heatscope/sample"
)

// formatFiles returns one file of each format, uncompressed.
func formatFiles(t *testing.T) map[Format][]byte {
	t.Helper()
	perf, err := os.ReadFile("testdata/perfscript.txt")
	if err != nil {
		t.Fatal(err)
	}
	folded, err := os.ReadFile("testdata/stacks.folded")
	if err != nil {
		t.Fatal(err)
	}
	p, err := profile.ParseData(writePprof(t, richSamples(), true))
	if err != nil {
		t.Fatal(err)
	}
	var raw bytes.Buffer
	if err := p.WriteUncompressed(&raw); err != nil {
		t.Fatal(err)
	}
	return map[Format][]byte{FormatPerfScript: perf, FormatFolded: folded, FormatPprof: raw.Bytes()}
}

func TestDetect(t *testing.T) {
	for format, data := range formatFiles(t) {
		big := data
		for len(big) < 3*DetectHeadSize && format != FormatPprof {
			big = append(big, data...)
		}
		heads := map[string][]byte{
			"whole":         data,
			"gzip":          gzipBytes(t, data),
			"cut":           big[:min(len(big), DetectHeadSize)],
			"cut mid-line":  data[:len(data)*2/3],
			"gzip cut":      gzipBytes(t, big)[:200],
			"crlf":          bytes.ReplaceAll(data, []byte("\n"), []byte("\r\n")),
			"leading blank": append([]byte("\n\n"), data...),
		}
		if format == FormatPprof {
			delete(heads, "crlf")
			delete(heads, "leading blank")
		}
		for name, head := range heads {
			got, err := Detect(head)
			if err != nil || got != format {
				t.Errorf("%v %s: detected %v, %v", format, name, got, err)
			}
		}
	}
	garbage := map[string][]byte{
		"empty":          nil,
		"blank":          []byte("\n\n"),
		"prose":          []byte("hello world\nthis is not a profile\n"),
		"json":           []byte(`{"traceEvents": []}`),
		"folded no semi": []byte("main 3\n"),
		"frame first":    []byte("\tffffffff81234567 f ([kernel.kallsyms])\nx 1 [000] 1.0: c:\n"),
		"gzip header":    gzipMagic,
		"bad gzip":       {0x1f, 0x8b, 0xff, 0xff, 0xff, 0xff},
	}
	for name, head := range garbage {
		if got, err := Detect(head); err == nil {
			t.Errorf("%s: detected %v", name, got)
		}
	}
}

func TestReadAny(t *testing.T) {
	opts := AnyOptions{Folded: FoldedOptions{FirstFrameIsComm: true}, FoldedStart: foldedStart, FoldedSpan: time.Second}
	for format, data := range formatFiles(t) {
		for name, input := range map[string][]byte{"plain": data, "gzip": gzipBytes(t, data)} {
			var got []sample.Sample
			f, err := ReadAny(bytes.NewReader(input), opts, func(s *sample.Sample) error {
				got = append(got, *s)
				return nil
			})
			if err != nil || f != format {
				t.Fatalf("%v %s: read as %v: %v", format, name, f, err)
			}
			var want []sample.Sample
			switch format {
			case FormatPerfScript:
				want = wantPerfScriptFile
			case FormatFolded:
				want = readFolded(t, opts.Folded, data, time.Second)
			case FormatPprof:
				want = richSamples()
			}
			if diff := diffSamples(want, got); diff != "" {
				t.Errorf("%v %s: %s", format, name, diff)
			}
		}
	}
	_, err := ReadAny(strings.NewReader("not a profile\n"), opts, func(*sample.Sample) error { return nil })
	if err == nil {
		t.Error("prose was read")
	}
	stop := errors.New("stop")
	_, err = ReadAny(strings.NewReader("main;f 3\n"), opts, func(*sample.Sample) error { return stop })
	if !errors.Is(err, stop) {
		t.Errorf("callback error lost: %v", err)
	}
}

func TestFormatString(t *testing.T) {
	for f, want := range map[Format]string{FormatPerfScript: "perf-script", FormatFolded: "folded", FormatPprof: "pprof", FormatUnknown: "unknown"} {
		if f.String() != want {
			t.Errorf("%d: %q, want %q", f, f.String(), want)
		}
	}
}

// TestDetectNamesTheLine checks that a file of no known format is refused
// naming the first line that is neither perf script nor folded stacks.
func TestDetectNamesTheLine(t *testing.T) {
	_, err := Detect([]byte("# a comment\n\nthis is not a profile\nnor this\n"))
	if err == nil || !strings.Contains(err.Error(), `line 3: "this is not a profile"`) {
		t.Errorf("garbage text: %v, want line 3 named", err)
	}
	_, err = Detect([]byte{0x00, 0x01, 0xfe, 0x42, 0x42, 0x42, 0x42, 0x42})
	if err == nil || !strings.Contains(err.Error(), "binary data") {
		t.Errorf("garbage bytes: %v, want binary data named", err)
	}
}
