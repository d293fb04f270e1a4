package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/heatscope/heatscope/pipeline"
	"github.com/heatscope/heatscope/profileio"
	"github.com/heatscope/heatscope/sample"
)

// runIn runs heatscope in this process and returns its exit status and
// what it printed.
func runIn(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestFlagErrorIsLast checks that a bad flag value prints its error as the
// last line, without the flag list above it, and that -h lists the flags.
func TestFlagErrorIsLast(t *testing.T) {
	for _, args := range [][]string{{"record", "--duration", "abc"}, {"export", "--nosuchflag"}, {"import", "--span", "x"}} {
		code, _, stderr := runIn(args...)
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		last := lines[len(lines)-1]
		if code != 2 || len(lines) != 1 || !strings.Contains(last, args[1][1:]) || !strings.Contains(last, "heatscope "+args[0]+" -h") {
			t.Errorf("%q: exit %d, stderr %q; want one line naming %s and -h", args, code, stderr, args[1])
		}
	}
	code, _, stderr := runIn("record", "-h")
	if code != 0 || !strings.Contains(stderr, "flags:") || !strings.Contains(stderr, "-duration") {
		t.Errorf("record -h: exit %d, stderr %q; want the flag list", code, stderr)
	}
}

// TestExportOutsideTheData exports ranges that hold no sample: the error
// says so and where the data starts and ends, and no file is left. The
// data is a perf script without wall time, so every time is written in
// seconds on its capture's clock, never as a date in 1970; a source that
// does not exist is named with those that do.
func TestExportOutsideTheData(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	script := filepath.Join(dir, "capture.perf")
	writePerfScript(t, script, 300) // at 5000 s after the epoch: long ago
	if code, _, stderr := runIn("import", "--data", data, script); code != 0 {
		t.Fatalf("import: %d %s", code, stderr)
	}
	out := filepath.Join(dir, "out.pb.gz")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--from", "-1m"}, "no samples at or after "},
		{[]string{"--to", "1970-01-01T00:00:01Z"}, "no samples before 1 s for this filter"},
		{[]string{"--from", "-1m", "--to", "-0s"}, "no samples in the data from "},
		// A filter that matches nothing: of how many samples, in the
		// window of all of them.
		{[]string{"--comm", "nosuchcommand"}, `none of the 300 samples in the data from 5000 s through 5002.99 s passes the filter comm "nosuchcommand"`},
	} {
		code, _, stderr := runIn(append([]string{"export", "--data", data, "-o", out}, tc.args...)...)
		where := "samples span 5000 s to 5002.99 s"
		switch {
		case tc.args[0] == "--comm":
			where = "through 5002.99 s"
		case len(tc.args) == 4:
			where = "they span 5000 s to 5002.99 s"
		}
		if code == 0 || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, where) ||
			!strings.Contains(stderr, "capture's own clock") || strings.Contains(stderr, "1970") || strings.Contains(stderr, "must be after") {
			t.Errorf("export %q: exit %d, %q; want %q and where the data is", tc.args, code, stderr, tc.want)
		}
		if m, _ := filepath.Glob(out); len(m) != 0 {
			t.Errorf("export %q left %s behind", tc.args, out)
		}
	}
	code, _, stderr := runIn("export", "--data", data, "-o", out, "--from", "-1m", "--to", "-2m")
	if code != 2 || !strings.Contains(stderr, "--to must be after --from") {
		t.Errorf("export with --to before --from: %d %q", code, stderr)
	}
	code, _, stderr = runIn("export", "--data", data, "-o", out, "--source", "capture,nosuch")
	if code != 2 || !strings.Contains(stderr, `--source: no source "nosuch": the data holds capture`) {
		t.Errorf("export of a source that does not exist: %d %q", code, stderr)
	}
	code, _, stderr = runIn("export", "--data", data, "-o", out)
	if code != 0 || !strings.Contains(stderr, "exported 300 samples from 5000 s through 5002.99 s on the capture's own clock") || strings.Contains(stderr, "1970") {
		t.Errorf("export of the relative source: %d %q; want its times in seconds", code, stderr)
	}
}

// TestTopLeavesIdleOut checks that record --top counts no CPU idle
// samples, as export and the UI do by default.
func TestTopLeavesIdleOut(t *testing.T) {
	b := pipeline.NewProfile(sample.PeriodOf(99))
	idle := sample.Sample{Comm: "swapper/0", Stack: []sample.Frame{{Function: "pv_native_safe_halt", Kind: sample.KindKernel},
		{Function: "default_idle", Kind: sample.KindKernel}}}
	busy := sample.Sample{Comm: "gzip", PID: 9, TID: 9, Stack: []sample.Frame{{Function: "deflate", Module: "/usr/bin/gzip", Kind: sample.KindUser}}}
	irq := sample.Sample{Comm: "swapper/1", Stack: []sample.Frame{{Function: "e1000_intr", Kind: sample.KindKernel}}}
	for range 37 {
		b.Add(&idle)
	}
	for range 60 {
		b.Add(&busy)
	}
	for range 3 {
		b.Add(&irq)
	}
	kept, left := b.Busy()
	var out bytes.Buffer
	printTop(&out, profileio.TopFunctions(kept, nil), 5, left)
	if left != 37 || strings.Contains(out.String(), "halt") || !strings.Contains(out.String(), " 95.24% ") ||
		!strings.Contains(out.String(), "e1000_intr") ||
		!strings.HasPrefix(out.String(), "self% is each function's share of the 0.636s of CPU time sampled, CPU idle excluded (37 idle samples left out") {
		t.Fatalf("%d idle samples left out; top:\n%s", left, out.String())
	}
}

// TestTopWeighsPeriods checks that record --top ranks and shares CPU
// time: 60 samples of fast at 99 Hz, then, the guard having lowered the
// rate to a quarter, 30 of slow, which took twice fast's CPU time.
func TestTopWeighsPeriods(t *testing.T) {
	p99 := int64(1e9) / 99
	b := profileio.NewPprofBuilder(p99)
	add := func(fn string, n int) {
		s := sample.Sample{Comm: "app", PID: 9, TID: 9, Stack: []sample.Frame{{Function: fn, Module: "/usr/bin/app", Kind: sample.KindUser}}}
		for range n {
			b.Add(&s)
		}
	}
	add("fast", 60)
	b.SetPeriod(4 * p99)
	add("slow", 30)
	var out bytes.Buffer
	printTop(&out, profileio.TopFunctions(b.Profile(), nil), 5, 0)
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	want := []string{
		"self% is each function's share of the 1.818s of CPU time sampled, CPU idle excluded (no idle samples)",
		" self CPU   self% total CPU  samples  function",
		"   1.212s  66.67%    1.212s       30  slow",
		"   0.606s  33.33%    0.606s       60  fast",
	}
	if !slices.Equal(lines, want) {
		t.Fatalf("top:\n%s\nwant:\n%s", out.String(), strings.Join(want, "\n"))
	}
}

// TestMakeInstall installs with make into a temporary PREFIX, as README
// says, and runs what it installed.
func TestMakeInstall(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed: make install cannot be tried")
	}
	prefix := t.TempDir()
	out, err := exec.Command("make", "-C", filepath.Join("..", ".."), "install", "PREFIX="+prefix).CombinedOutput()
	if err != nil {
		t.Fatalf("make install PREFIX=%s: %v\n%s", prefix, err, out)
	}
	bin := filepath.Join(prefix, "bin", "heatscope")
	_, stderr, err := runHeatscope(bin, "--help")
	if err != nil || !strings.Contains(stderr, "heatscope COMMAND") {
		t.Fatalf("%s --help: %v\n%s", bin, err, stderr)
	}
}

// TestTopGroupsUnresolvedFrames checks that record --top counts frames
// left as addresses per module, as export and the UI do ([anon], not a
// line per address), each sample once in total however many of its
// frames the module holds.
func TestTopGroupsUnresolvedFrames(t *testing.T) {
	b := pipeline.NewProfile(sample.PeriodOf(99))
	for i := range 10 {
		s := sample.Sample{Comm: "node", PID: 9, TID: 9, Stack: []sample.Frame{
			{Function: fmt.Sprintf("[anon+0x7f01fd57a%03x]", i), Kind: sample.KindUser},
			{Function: fmt.Sprintf("[anon+0x7f01fd4ca%03x]", i), Kind: sample.KindUser},
			{Function: "main", Module: "/usr/bin/node", Kind: sample.KindUser}}}
		b.Add(&s)
	}
	var out bytes.Buffer
	printRunTop(&out, b, 5)
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	want := []string{
		"self% is each function's share of the 0.101s of CPU time sampled, CPU idle excluded (no idle samples)",
		" self CPU   self% total CPU  samples  function",
		"   0.101s 100.00%    0.101s       10  [anon]",
		"   0.000s   0.00%    0.101s        0  main",
	}
	if !slices.Equal(lines, want) {
		t.Fatalf("top:\n%s\nwant:\n%s", out.String(), strings.Join(want, "\n"))
	}
}
