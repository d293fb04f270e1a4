package query

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/profileio"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// trainPy is the program whose Python frames pythonStore's samples hold:
// Trainer.step (from line 4) runs zlib.compress at line 7 (30 samples,
// zlib's native frames above it) and loops at line 6 (10 samples).
const trainPy = `import zlib

class Trainer:
    def step(self, data):
        total = 0
        for _ in range(100):
            total += len(zlib.compress(data))
        return total

def main():
    t = Trainer()
    while True:
        t.step(b"x" * 1000000)

main()
`

// pythonStore writes trainPy to a directory and, through a real store, 40
// samples of a CPython process running it, as the symbolizer interleaves
// them; it returns the store, the file's path and the samples' range.
func pythonStore(t *testing.T) (*store.DB, string, store.Range) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "train.py")
	if err := os.WriteFile(file, []byte(trainPy), 0o644); err != nil {
		t.Fatal(err)
	}
	const interp, libz = "/usr/bin/python3.11", "/usr/lib/x86_64-linux-gnu/libz.so.1.2.13"
	py := func(fn string, line, start uint32) sample.Frame {
		return sample.Frame{Function: fn, Module: file, Kind: sample.KindPython, Line: line, StartLine: start}
	}
	native := func(fn, module string, addr uint64) sample.Frame {
		return sample.Frame{Function: fn, Module: module, Address: addr, Kind: sample.KindUser}
	}
	root := []sample.Frame{py("main", 13, 10), py("<module>", 15, 1),
		native("PyEval_EvalCode", interp, 0x250000), native("Py_RunMain", interp, 0x251000), native("main", interp, 0x252000)}
	compress := append([]sample.Frame{native("deflate", libz, 0x3000), native("compress2", libz, 0x3100),
		native("zlib_compress", interp, 0x2a0000), py("Trainer.step", 7, 4)}, root...)
	loop := append([]sample.Frame{py("Trainer.step", 6, 4)}, root...)

	db, err := store.Open(t.TempDir(), store.Options{Source: "host", BlockDuration: 20 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixNano()
	for i := range 40 {
		s := sample.Sample{Time: start + int64(i)*int64(10*time.Millisecond), CPU: uint32(i % 2), PID: 4242, TID: 4242,
			Comm: "python3", Stack: compress}
		if i%4 == 3 {
			s.Stack = loop
		}
		if err := db.Append(&s); err != nil {
			t.Fatal(err)
		}
	}
	return db, file, store.Range{From: start, To: start + int64(time.Second)}
}

// TestPythonFramesInPprof: a recording's Python frames, read from the
// store into a pprof profile, are Python functions to the real go tool
// pprof: -traces shows the chain between zlib's frames and the
// interpreter's, -list shows Trainer.step's source with each line's time,
// and -top names the Python functions, "<module>" included (which
// go tool pprof would strip whole as C++ template parameters, were its
// system name its name).
func TestPythonFramesInPprof(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("skipping: go tool pprof needs the go command on PATH")
	}
	db, file, r := pythonStore(t)
	p, _, err := PprofOf(context.Background(), db, r, &store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "profile.pb.gz")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := profileio.WritePprof(f, p); err != nil {
		t.Fatal(err)
	}
	f.Close()
	pprof := func(args ...string) string {
		t.Helper()
		o, err := exec.Command("go", append([]string{"tool", "pprof"}, append(args, out)...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("go tool pprof %v: %v\n%s", args, err, o)
		}
		return string(o)
	}

	traces := pprof("-traces")
	chain := []string{"deflate", "compress2", "zlib_compress", "Trainer.step", "main", "<module>", "PyEval_EvalCode", "Py_RunMain", "main"}
	if !inOrder(traces, chain) {
		t.Errorf("go tool pprof -traces: no trace with %v in order:\n%s", chain, traces)
	}
	if !inOrder(traces, []string{"ms   Trainer.step\n", "main\n", "<module>\n", "PyEval_EvalCode"}) {
		t.Errorf("go tool pprof -traces: no trace with Trainer.step as its leaf:\n%s", traces)
	}

	list := pprof("-list", "Trainer.step")
	for _, want := range []string{"ROUTINE ======================== Trainer.step in " + file,
		"total += len(zlib.compress(data))", "for _ in range(100):"} {
		if !strings.Contains(list, want) {
			t.Errorf("go tool pprof -list Trainer.step: no %q:\n%s", want, list)
		}
	}
	// Line 7 ran 30 samples' time (cumulative: zlib's frames above
	// it), line 6 10 samples' (flat).
	flat6, cum6 := listed(t, list, 6)
	flat7, cum7 := listed(t, list, 7)
	if flat6 <= 0 || cum6 != flat6 || flat7 != 0 || cum7 != 3*cum6 {
		t.Errorf("go tool pprof -list Trainer.step: line 6 %v flat %v cum, line 7 %v flat %v cum; want line 7 three times line 6's time, all above it:\n%s",
			flat6, cum6, flat7, cum7, list)
	}

	top := pprof("-top", "-nodecount=50")
	for _, want := range []string{"Trainer.step", " <module>\n", "deflate"} {
		if !strings.Contains(top, want) {
			t.Errorf("go tool pprof -top: no %q:\n%s", want, top)
		}
	}
	t.Logf("go tool pprof -traces:\n%s\n-list Trainer.step:\n%s", traces, list)
}

// inOrder reports whether s holds each of words, in order.
func inOrder(s string, words []string) bool {
	for _, w := range words {
		i := strings.Index(s, w)
		if i < 0 {
			return false
		}
		s = s[i+len(w):]
	}
	return true
}

// listed returns the flat and cumulative times go tool pprof -list
// shows for source line n ("." is 0).
func listed(t *testing.T, list string, n int) (flat, cum time.Duration) {
	t.Helper()
	for line := range strings.Lines(list) {
		f := strings.Fields(line)
		if len(f) < 3 || f[2] != strconv.Itoa(n)+":" {
			continue
		}
		d := func(s string) time.Duration {
			if s == "." {
				return 0
			}
			v, err := time.ParseDuration(s)
			if err != nil {
				t.Fatalf("go tool pprof -list: line %d: %v", n, err)
			}
			return v
		}
		return d(f[0]), d(f[1])
	}
	t.Fatalf("go tool pprof -list: no line %d:\n%s", n, list)
	return 0, 0
}

// TestPythonFramesInViews: the flame graph and the top table name a
// Python function "qualname (file)", of kind "python", its lines added
// up (Trainer.step ran at two lines: one node, one row of all 40
// samples); the frame filter matches a Python function by its qualified
// name and by its file.
func TestPythonFramesInViews(t *testing.T) {
	db, file, r := pythonStore(t)
	step := "Trainer.step (" + file + ")"
	root, _, err := FlameGraphOf(context.Background(), db, r, &store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var found []*Node
	var walk func(n *Node)
	walk = func(n *Node) {
		if n.Name == step {
			found = append(found, n)
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(root)
	if len(found) != 1 || found[0].Kind != "python" || found[0].Value != 40 || found[0].Self != 10 {
		t.Errorf("flame graph nodes named %q: %+v, want one of kind python, 40 samples, 10 self", step, found)
	}
	top, _, err := TopOf(context.Background(), db, r, &store.Filter{}, GroupNone, GroupAddresses)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]string{}
	for _, fn := range top.Functions {
		kinds[fn.Name] = fn.Kind
		if fn.Name == step && (fn.Total != 40 || fn.Self != 10) {
			t.Errorf("top: %+v, want 40 samples, 10 self", fn)
		}
	}
	if kinds[step] != "python" || kinds["<module> ("+file+")"] != "python" || kinds["main ("+file+")"] != "python" || kinds["main"] != "user" {
		t.Errorf("top table's functions and kinds: %v", kinds)
	}
	for _, re := range []string{`^Trainer\.step$`, `train\.py\)$`, `^<module> \(`} {
		f := store.Filter{Frame: regexp.MustCompile(re)}
		top, _, err := TopOf(context.Background(), db, r, &f, GroupNone, GroupAddresses)
		if err != nil || top.Samples != 40 {
			t.Errorf("frame=%s: %d samples (%v), want all 40", re, top.Samples, err)
		}
	}
	f := store.Filter{Frame: regexp.MustCompile(`^Trainer\.step \(/elsewhere`)}
	if top, _, err := TopOf(context.Background(), db, r, &f, GroupNone, GroupAddresses); err != nil || top.Samples != 0 {
		t.Errorf("frame= of another file: %d samples (%v), want none", top.Samples, err)
	}

	// Code objects that could not be read, at two addresses: one
	// "[python]" node, as a stripped binary's addresses are one node.
	for i, code := range []uint64{0x7f00aa, 0x7f00bb} {
		s := sample.Sample{Time: r.From + int64(i+1)*int64(time.Millisecond), PID: 4242, TID: 4242, Comm: "python3",
			Stack: []sample.Frame{{Function: sample.UnknownName("python", code), Module: "[python]", Kind: sample.KindPython}}}
		if err := db.Append(&s); err != nil {
			t.Fatal(err)
		}
	}
	root, _, err = FlameGraphOf(context.Background(), db, r, &store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	found = nil
	step = "[python]"
	walk(root)
	if len(found) != 1 || found[0].Kind != "python" || found[0].Value != 2 {
		t.Errorf("flame graph nodes named [python]: %+v, want one of kind python, 2 samples", found)
	}
}
