package main

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/bpftest"
)

// writePerfScript writes a perf script of n samples over 3 s on 2 CPUs,
// with a command that has spaces and digits.
func writePerfScript(t *testing.T, path string, n int) {
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	for i := range n {
		ts := 5000.0 + float64(i)*3/float64(n)
		comm, pid := "Web Content 2", 4242
		if i%3 == 0 {
			comm, pid = "java", 777
		}
		fmt.Fprintf(w, "%s %d/%d [%03d] %.6f: 10101010 cpu-clock:\n", comm, pid, pid+i%2, i%2, ts)
		fmt.Fprintf(w, "\tffffffff8123abcd vfs_read+0x1d ([kernel.kallsyms])\n")
		fmt.Fprintf(w, "\t    7f0012345678 work_%d (/usr/lib/libwork.so)\n", i%5)
		fmt.Fprintf(w, "\t    55aa00001111 main (/usr/bin/app)\n\n")
	}
	w.Flush()
	f.Close()
}

// importedDataDir builds heatscope into a temporary directory and imports
// a perf script of n samples (writePerfScript's, as source "capture") into a
// data directory there.
func importedDataDir(t *testing.T, n int) (bin, dir, data string) {
	t.Helper()
	dir = t.TempDir()
	bin = buildHeatscope(t, dir)
	data = filepath.Join(dir, "data")
	script := filepath.Join(dir, "capture.perf")
	writePerfScript(t, script, n)
	if _, stderr, err := runHeatscope(bin, "import", "--data", data, script); err != nil {
		t.Fatalf("import: %v\n%s", err, stderr)
	}
	return bin, dir, data
}

func TestImportExportRoundTrip(t *testing.T) {
	dir := t.TempDir()
	bin := buildHeatscope(t, dir)
	data := filepath.Join(dir, "data")
	script := filepath.Join(dir, "capture.perf")
	writePerfScript(t, script, 3000)
	// gzip a copy too: both import.
	gz := filepath.Join(dir, "second.perf.gz")
	in, _ := os.ReadFile(script)
	gf, _ := os.Create(gz)
	zw := gzip.NewWriter(gf)
	zw.Write(in)
	zw.Close()
	gf.Close()

	_, stderr, err := runHeatscope(bin, "import", "--data", data, script, gz)
	if err != nil {
		t.Fatalf("import: %v\n%s", err, stderr)
	}
	if !strings.Contains(stderr, `source "capture"`) || !strings.Contains(stderr, `source "second"`) || !strings.Contains(stderr, "3000 samples") {
		t.Fatalf("import report:\n%s", stderr)
	}
	out := filepath.Join(dir, "out.perf")
	if _, stderr, err := runHeatscope(bin, "export", "--data", data, "--source", "capture", "--format", "perf-script", "-o", out); err != nil {
		t.Fatalf("export: %v\n%s", err, stderr)
	}
	exported, _ := os.ReadFile(out)
	if n := strings.Count(string(exported), "cpu-clock:"); n != 3000 {
		t.Fatalf("exported %d samples, imported 3000", n)
	}
	for _, want := range []string{"Web Content 2 4242/", "java 777/", "vfs_read", "work_3", "(/usr/lib/libwork.so)", " 5000.0"} {
		if !strings.Contains(string(exported), want) {
			t.Errorf("export lacks %q", want)
		}
	}
	// A filter on the command and a time window.
	folded := filepath.Join(dir, "java.folded")
	if _, stderr, err := runHeatscope(bin, "export", "--data", data, "--source", "capture", "--comm", "java",
		"--from", "5000", "--to", "5001.5", "--format", "folded", "-o", folded); err != nil {
		t.Fatalf("export: %v\n%s", err, stderr)
	}
	b, _ := os.ReadFile(folded)
	var total int
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var n int
		fields := strings.Fields(line)
		fmt.Sscan(fields[len(fields)-1], &n)
		if !strings.HasPrefix(line, "java;main;") {
			t.Fatalf("folded line %q", line)
		}
		total += n
	}
	if total != 500 { // every third sample of the first half
		t.Fatalf("%d java samples in [5000, 5001.5), want 500", total)
	}
}

func TestImportGarbageNamesFileAndLine(t *testing.T) {
	bin, dir, data := importedDataDir(t, 10)
	bad := filepath.Join(dir, "bad.perf")
	os.WriteFile(bad, []byte("java 1 [000] 1.000000: cpu-clock:\n\tffff foo (bar)\n\njava 1 [000] 1.000100: cpu-clock:\nthis is not perf script\n"), 0o644)
	garbage := filepath.Join(dir, "garbage.bin")
	os.WriteFile(garbage, []byte{0x00, 0xff, 0x13, 0x37, 0x42}, 0o644)
	for _, file := range []string{bad, garbage} {
		_, stderr, err := runHeatscope(bin, "import", "--data", data, file)
		if err == nil || !strings.Contains(stderr, file) {
			t.Fatalf("import %s: %v\n%s", file, err, stderr)
		}
		if file == bad && !strings.Contains(stderr, "line 5") {
			t.Errorf("the error does not name line 5:\n%s", stderr)
		}
	}
	// What was stored before is intact, and nothing of the bad files.
	out := filepath.Join(dir, "out.folded")
	_, stderr, err := runHeatscope(bin, "export", "--data", data, "--format", "folded", "-o", out)
	if err != nil {
		t.Fatalf("export: %v\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "exported 10 samples") {
		t.Fatalf("after failed imports: %s", stderr)
	}
}

func TestExportBadFlags(t *testing.T) {
	bin, dir, data := importedDataDir(t, 10)
	for _, tc := range []struct{ args, want string }{
		{"--from yesterday", "--from"},
		{"--to x", "--to"},
		{"--from 5002 --to 5001", "--to"},
		{"--format svg", "--format"},
		{"--comm ~(", "--comm"},
		{"--cpu a-b", "--cpu"},
		{"--stack both", "--stack"},
		{"--idle maybe", "--idle"},
	} {
		args := append([]string{"export", "--data", data, "-o", filepath.Join(dir, "x")}, strings.Fields(tc.args)...)
		_, stderr, err := runHeatscope(bin, args...)
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("export %s: %v %q, want exit 2 naming %s", tc.args, err, stderr, tc.want)
		}
	}
}

func TestSecondRecorderRefused(t *testing.T) {
	bpftest.Require(t)
	dir := t.TempDir()
	bin := buildHeatscope(t, dir)
	data := filepath.Join(dir, "data")
	first := exec.Command(bin, "record", "--data", data, "--duration", "10s", "--progress", "0", "--top", "0")
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { first.Process.Kill(); first.Wait() }()
	time.Sleep(1500 * time.Millisecond)
	_, stderr, err := runHeatscope(bin, "record", "--data", data, "--duration", "1s")
	if err == nil || !strings.Contains(stderr, "locked by another heatscope") || !strings.Contains(stderr, fmt.Sprint(first.Process.Pid)) {
		t.Fatalf("second recorder: %v\n%s", err, stderr)
	}
}

// TestRecorderKilled SIGKILLs a recording `heatscope record` and checks
// that what it recorded up to a second before the kill is in the data
// directory, and that nothing there is corrupt.
func TestRecorderKilled(t *testing.T) {
	bpftest.Require(t)
	dir := t.TempDir()
	bin := buildHeatscope(t, dir)
	hotc, _ := buildFixtures(t, dir)
	busy := start(t, hotc) // samples flow all the time
	data := filepath.Join(dir, "data")
	rec := exec.Command(bin, "record", "--data", data, "--listen", "", "--progress", "0", "--top", "0", "--block-duration", "3s")
	cpuBefore := bpftest.ProcessCPU(t, busy.Process.Pid)
	if err := rec.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5*time.Second + time.Duration(time.Now().UnixNano()%1e9)) // across a block cut, anywhere between WAL syncs
	rec.Process.Kill()
	rec.Wait()
	killed := time.Now()
	// the samples the busy fixture earned while the recorder ran (some
	// of it starting up); at least half of them must have survived
	want := bpftest.ExpectedSamples(bpftest.ProcessCPU(t, busy.Process.Pid)-cpuBefore, 99)

	folded := filepath.Join(dir, "after.perf")
	_, stderr, err := runHeatscope(bin, "export", "--data", data, "--pid", fmt.Sprint(busy.Process.Pid), "--format", "perf-script", "-o", folded)
	if err != nil {
		t.Fatalf("export after SIGKILL: %v\n%s", err, stderr)
	}
	if strings.Contains(stderr, "unreadable block") {
		t.Fatalf("a block is corrupt after SIGKILL:\n%s", stderr)
	}
	b, _ := os.ReadFile(folded)
	var last float64
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if i := strings.Index(line, ": "); i > 0 && strings.Contains(line, "cpu-clock") {
			f := strings.Fields(line[:i])
			var ts float64
			fmt.Sscan(f[len(f)-1], &ts)
			last = max(last, ts)
			n++
		}
	}
	lost := killed.Sub(time.Unix(0, int64(last*1e9)))
	if want < 40 || int64(n) < want/2 || lost > 1100*time.Millisecond {
		t.Fatalf("%d samples survived of about %d; the newest is %v older than the SIGKILL (want <= 1 s)", n, want, lost)
	}
	t.Logf("%d samples survived the SIGKILL; the newest is %v older than the kill", n, lost)
}
