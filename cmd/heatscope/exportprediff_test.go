package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heatscope/heatscope/internal/fleetfixture"
	"github.com/heatscope/heatscope/internal/miniotest"
)

// TestExportBeforeEvents: export --before-events over a fleet in MinIO
// writes the windows before the resets (A) and those before them (B) as
// two pprof files, which the real go tool pprof -diff_base reads: the
// culprit grew 8 cpu-seconds, the steady load not at all; the label
// filter keeps one zone's events; a kind without events, a bad window
// and missing files are errors that name them, and write nothing.
func TestExportBeforeEvents(t *testing.T) {
	m := miniotest.Start(t)
	bkt := m.Open("fleet")
	fleetfixture.WriteFleet(t, bkt, t.TempDir(), fleetfixture.Fleet())
	cfg := m.WriteConfig("fleet")
	bin := buildHeatscope(t, t.TempDir())
	dir := t.TempDir()
	a, b := filepath.Join(dir, "before.pb.gz"), filepath.Join(dir, "baseline.pb.gz")

	_, stderr, err := runHeatscope(bin, "export", "--objstore-config", cfg, "--before-events", "ena-reset", "--window", "2s", "-o", a, "--baseline-output", b)
	if err != nil {
		t.Fatalf("export --before-events: %v\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "the 2s before each of 4 ena-reset events on 2 nodes: 16.000 cpu-seconds in "+a+" (A); the 2s before those: 8.000 cpu-seconds in "+b) ||
		!strings.Contains(stderr, "go tool pprof -diff_base "+b+" "+a) {
		t.Errorf("export said:\n%s", stderr)
	}
	out, err := exec.Command("go", "tool", "pprof", "-top", "-diff_base", b, a).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof -diff_base: %v\n%s", err, out)
	}
	if line := pprofLine(string(out), fleetfixture.Culprit); !strings.HasPrefix(line, "8s ") || pprofLine(string(out), fleetfixture.Steady) != "" {
		t.Errorf("go tool pprof -top -diff_base: culprit %q (want 8s flat), steady %q (want no change)\n%s", line, pprofLine(string(out), fleetfixture.Steady), out)
	}
	t.Logf("go tool pprof -top -diff_base:\n%s", out)

	// One zone: n2's two resets only, each 2 s of the culprit.
	if _, stderr, err := runHeatscope(bin, "export", "--objstore-config", cfg, "--label", "zone=b", "--before-events", "ena-reset", "--window", "2", "-o", a, "--baseline-output", b); err != nil ||
		!strings.Contains(stderr, "2 ena-reset events on 1 node: 8.000 cpu-seconds") {
		t.Errorf("zone b: %v\n%s", err, stderr)
	}
	out, _ = exec.Command("go", "tool", "pprof", "-top", "-diff_base", b, a).CombinedOutput()
	if line := pprofLine(string(out), fleetfixture.Culprit); !strings.HasPrefix(line, "4s ") {
		t.Errorf("zone b: culprit %q, want 4s\n%s", line, out)
	}

	// Errors name what is wrong and write nothing.
	c, d := filepath.Join(dir, "c.pb.gz"), filepath.Join(dir, "d.pb.gz")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--before-events", "oom-kill", "--window", "2s"}, "no oom-kill event on the selected nodes; their events are of kinds cpu-saturation (1), ena-reset (4)"},
		{[]string{"--before-events", "ena-reset", "--window", "2h"}, "--window: \"2h\" is out of range"},
		{[]string{"--before-events", "ena-reset"}, "--window: required"},
		{[]string{"--before-events", "ena-reset", "--window", "2s", "--comm", "nothing-runs-this"}, "none of the 4 ena-reset events has a sample"},
		{[]string{"--before-events", "ena-reset", "--window", "2s", "--format", "folded"}, "--before-events writes pprof only"},
	} {
		_, stderr, err := runHeatscope(bin, append(append([]string{"export", "--objstore-config", cfg}, tc.args...), "-o", c, "--baseline-output", d)...)
		if err == nil || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: %v, stderr %q; want an error saying %q", tc.args, err, stderr, tc.want)
		}
		for _, f := range []string{c, d} {
			if _, err := os.Stat(f); err == nil {
				t.Errorf("%v wrote %s", tc.args, f)
			}
		}
	}
	if _, stderr, err := runHeatscope(bin, "export", "--objstore-config", cfg, "--before-events", "ena-reset", "--window", "2s", "-o", c); err == nil || !strings.Contains(stderr, "--baseline-output") {
		t.Errorf("without --baseline-output: %v %q", err, stderr)
	}
}

// pprofLine is the line of go tool pprof -top's output for function fn,
// trimmed; "" when there is none.
func pprofLine(out, fn string) string {
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) > 0 && f[len(f)-1] == fn {
			return strings.TrimSpace(line)
		}
	}
	return ""
}
