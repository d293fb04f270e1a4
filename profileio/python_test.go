package profileio

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/sample"
)

// pythonSamples are samples of a CPython program as the symbolizer
// interleaves them (synth.PythonStack): stacks 0 to 3, each once, then
// stack 1 again with its Python leaf at another line, and a "<module>" of
// another file, which must stay apart from train.py's.
func pythonSamples() []sample.Sample {
	var out []sample.Sample
	add := func(stack []sample.Frame) {
		out = append(out, sample.Sample{Time: int64(1_700_000_000_000_000_000 + len(out)*10_000_000), CPU: 1, PID: 42, TID: 43,
			Comm: "python3", Stack: stack})
	}
	for k := range 4 {
		add(synth.PythonStack(k))
	}
	other := slices.Clone(synth.PythonStack(1))
	for i := range other {
		if other[i].Kind == sample.KindPython {
			other[i].Line += 1 // the same functions at other lines
		}
	}
	add(other)
	add([]sample.Frame{{Function: "<module>", Module: "/srv/setup.py", Kind: sample.KindPython, Line: 2, StartLine: 1}})
	return out
}

// TestPythonFramesPprofRoundTrip: Python frames written to pprof (their
// own mapping, function names, files, first lines and lines) read back
// as the same frames, native frames around them unchanged.
func TestPythonFramesPprofRoundTrip(t *testing.T) {
	want := pythonSamples()
	b := NewPprofBuilder(sample.PeriodOf(99))
	b.KeepTimestamps(true)
	for i := range want {
		b.Add(&want[i])
	}
	p := b.Profile()
	var python, withFile int
	for _, m := range p.Mapping {
		if m.File == PythonMapping {
			python++
			if !m.HasFunctions || !m.HasFilenames || !m.HasLineNumbers {
				t.Errorf("the Python mapping %+v does not say it has functions, file names and line numbers", m)
			}
		}
	}
	for _, fn := range p.Function {
		if strings.HasSuffix(fn.Filename, ".py") {
			withFile++
			if fn.StartLine == 0 || fn.SystemName != fn.Name+" ("+fn.Filename+")" {
				t.Errorf("Python function %+v: want its start line and system name %q", fn, fn.Name+" ("+fn.Filename+")")
			}
		}
	}
	if python != 1 || withFile != len(synth.PythonFunctions)+1 {
		t.Errorf("%d Python mappings and %d functions with a .py file, want 1 and %d", python, withFile, len(synth.PythonFunctions)+1)
	}
	var buf bytes.Buffer
	if err := WritePprof(&buf, p); err != nil {
		t.Fatal(err)
	}
	got := collect(t, func(fn func(*sample.Sample) error) error { return ReadPprof(&buf, fn) })
	slices.SortFunc(got, func(a, b sample.Sample) int { return int(a.Time - b.Time) })
	if diff := diffSamples(want, got); diff != "" {
		t.Error(diff)
	}
}

// TestPythonFramesFolded: a folded line names each Python frame
// "qualname (file)", adding its lines up as one function; with kinds
// annotated, "_[p]" marks them and ReadFolded gives back their kind,
// qualified name and file.
func TestPythonFramesFolded(t *testing.T) {
	samples := pythonSamples()
	for _, annotate := range []bool{false, true} {
		b := NewFoldedBuilder()
		b.AnnotateKinds(annotate)
		for i := range samples {
			b.Add(&samples[i])
		}
		var out bytes.Buffer
		if _, err := b.WriteTo(&out); err != nil {
			t.Fatal(err)
		}
		suffix := ""
		if annotate {
			suffix = pythonSuffix
		}
		// Stack 1 (zlib above Trainer.fit, 4 Python frames deep) at two
		// sets of lines: one line of count 2.
		want := "python3;main;Py_BytesMain;Py_RunMain;_PyRun_SimpleFileObject;run_mod;PyEval_EvalCode;" +
			"<module> (/srv/train.py)" + suffix + ";main (/srv/train.py)" + suffix + ";Trainer.fit (/srv/trainer.py)" + suffix +
			";Trainer.step (/srv/trainer.py)" + suffix + ";zlib_compress;compress2;deflate;deflate_slow 2\n"
		if !strings.Contains(out.String(), want) {
			t.Errorf("annotate %v: no line\n%s in\n%s", annotate, want, out.String())
		}
		if !strings.Contains(out.String(), "python3;<module> (/srv/setup.py)"+suffix+" 1\n") {
			t.Errorf("annotate %v: setup.py's <module> not on a line of its own:\n%s", annotate, out.String())
		}
		if !annotate {
			continue
		}
		got := readFolded(t, FoldedOptions{FirstFrameIsComm: true}, out.Bytes(), 0)
		found := 0
		for _, s := range got {
			for _, f := range s.Stack {
				if f.Kind != sample.KindPython {
					continue
				}
				found++
				if i := slices.IndexFunc(synth.PythonFunctions, func(p synth.PythonFunction) bool {
					return p.Name == f.Function && p.File == f.Module
				}); i < 0 && (f.Function != "<module>" || f.Module != "/srv/setup.py") {
					t.Errorf("read back Python frame %+v, not one of the functions written", f)
				}
			}
		}
		if found == 0 {
			t.Errorf("no Python frame read back from\n%s", out.String())
		}
	}
}

// TestPythonFramesPerfScript: a Python frame is "py::qualname:file
// (file)" in perf script text, and ReadPerfScript reads it back as a
// Python frame, without its lines, which the text does not carry.
func TestPythonFramesPerfScript(t *testing.T) {
	samples := pythonSamples()
	var buf bytes.Buffer
	w := NewPerfScriptWriter(&buf)
	for i := range samples {
		if err := w.Add(&samples[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	if !strings.Contains(text, "\t               0 py::Trainer.step:/srv/trainer.py (/srv/trainer.py)\n") {
		t.Errorf("no Trainer.step frame line in\n%s", text)
	}
	got := collect(t, func(fn func(*sample.Sample) error) error { return ReadPerfScript(strings.NewReader(text), fn) })
	want := pythonSamples()
	for i := range want {
		want[i].Time = want[i].Time / 1000 * 1000
		for j := range want[i].Stack {
			want[i].Stack[j].Line, want[i].Stack[j].StartLine = 0, 0
		}
	}
	if diff := diffSamples(want, got); diff != "" {
		t.Error(diff)
	}
}

// TestTopFunctionsNamesPythonFiles: the top table counts a Python
// function under "qualname (file)", so two "<module>" of two files are two
// rows, and a function's lines one.
func TestTopFunctionsNamesPythonFiles(t *testing.T) {
	samples := pythonSamples()
	b := NewPprofBuilder(sample.PeriodOf(99))
	for i := range samples {
		b.Add(&samples[i])
	}
	top := TopFunctions(b.Profile(), nil)
	rows := map[string]FunctionCount{}
	for _, fc := range top {
		rows[fc.Name] = fc
	}
	if fc := rows["<module> (/srv/train.py)"]; fc.Total != 5 {
		t.Errorf("<module> of train.py in %d samples, want 5: %+v", fc.Total, top)
	}
	if fc := rows["<module> (/srv/setup.py)"]; fc.Total != 1 || fc.Self != 1 {
		t.Errorf("<module> of setup.py: %+v, want 1 sample, self", fc)
	}
	if _, ok := rows["<module>"]; ok {
		t.Errorf("a row for <module> without its file: %+v", top)
	}
}
