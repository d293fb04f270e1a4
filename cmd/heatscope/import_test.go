package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/store"
)

// sourcesIn returns the sources of the data directory at dir, by name.
func sourcesIn(t *testing.T, dir string) map[string]store.SourceInfo {
	t.Helper()
	db, err := store.Open(dir, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	out := map[string]store.SourceInfo{}
	for _, s := range db.Sources() {
		out[s.Name] = s
	}
	return out
}

// TestImportSameFileTwice imports a file twice into one source: refused,
// nothing added, unless --replace, which replaces rather than doubles.
func TestImportSameFileTwice(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	script := filepath.Join(dir, "capture.perf")
	writePerfScript(t, script, 575)
	if code, _, stderr := runIn("import", "--data", data, script); code != 0 {
		t.Fatalf("import: %d %s", code, stderr)
	}
	code, _, stderr := runIn("import", "--data", data, script)
	if code != 1 || !strings.Contains(stderr, `source "capture" already holds this file`) || !strings.Contains(stderr, "--replace") {
		t.Fatalf("second import: exit %d, %q; want a refusal naming the source and --replace", code, stderr)
	}
	if n := sourcesIn(t, data)["capture"].Samples; n != 575 {
		t.Fatalf("after the refused import the source holds %d samples, want 575", n)
	}
	// Into another source it is welcome.
	if code, _, stderr := runIn("import", "--data", data, "--source", "again", script); code != 0 {
		t.Fatalf("import as another source: %d %s", code, stderr)
	}
	if code, _, stderr := runIn("import", "--data", data, "--replace", script); code != 0 {
		t.Fatalf("import --replace: %d %s", code, stderr)
	}
	src := sourcesIn(t, data)
	if src["capture"].Samples != 575 || src["again"].Samples != 575 {
		t.Fatalf("after --replace: capture %d, again %d samples; want 575 each", src["capture"].Samples, src["again"].Samples)
	}
}

// TestImportPerfScriptTimes checks where an imported perf script lands: a
// header-less one keeps perf's times and is marked relative, with the
// period of its samples' spacing; --time-offset shifts it to wall time;
// a real capture's header places it at its wall time with its period.
func TestImportPerfScriptTimes(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	script := filepath.Join(dir, "bare.perf")
	writePerfScript(t, script, 300) // 5000 s to 5003 s, 2 CPUs in turn
	code, _, stderr := runIn("import", "--data", data, script)
	if code != 0 || !strings.Contains(stderr, "seconds from its first sample") || strings.Contains(stderr, "1970") {
		t.Fatalf("import: %d %q", code, stderr)
	}
	code, _, stderr = runIn("import", "--data", data, "--source", "shifted", "--time-offset", "1795237000", script)
	if code != 0 {
		t.Fatalf("import --time-offset: %d %q", code, stderr)
	}
	if code, _, stderr = runIn("import", "--data", data, "--time-offset", "yesterday", script); code != 2 || !strings.Contains(stderr, "time-offset") {
		t.Fatalf("--time-offset yesterday: %d %q", code, stderr)
	}
	fixture, err := filepath.Abs("../../profileio/testdata/perf-record-header.perf")
	if err != nil {
		t.Fatal(err)
	}
	if code, _, stderr = runIn("import", "--data", data, "--source", "real", fixture); code != 0 || !strings.Contains(stderr, "captured on") {
		t.Fatalf("import of a real capture: %d %q", code, stderr)
	}
	src := sourcesIn(t, data)
	bare, shifted, real := src["bare"], src["shifted"], src["real"]
	if !bare.Relative || bare.First != 5000e9 || bare.PeriodNs != 20e6 { // 300 samples 10 ms apart, each CPU every other
		t.Errorf("header-less: %+v; want relative, first 5000 s, period 20 ms from the spacing", bare)
	}
	if shifted.Relative || shifted.First != (1795237000+5000)*1e9 {
		t.Errorf("--time-offset 1795237000: %+v; want first at 1795242000 s, not relative", shifted)
	}
	// The capture finished (captured on, local time) at 21:41:23 on
	// 2026-11-24: its last sample (3272.521358 on perf's clock) is placed
	// within half a second of it, by whole seconds: 21:41:22.521358.
	captured := time.Date(2026, 11, 24, 21, 41, 23, 0, time.Local).UnixNano()
	if real.Relative || real.Last != captured-478_642000 || real.First != real.Last-(3272_521358000-3269_555182000) || real.PeriodNs != int64(time.Second)/99 {
		t.Errorf("real capture: %+v; want last at %d (captured on less 0.478642 s), period 1/99 s", real, captured-478_642000)
	}
}

// TestImportLivePerfRecord records a workload with perf, prints it with
// perf script --header and imports it: it lands at the wall time it was
// recorded, within the few seconds perf takes to finish writing.
func TestImportLivePerfRecord(t *testing.T) {
	if _, err := exec.LookPath("perf"); err != nil {
		t.Skip("perf is not installed (Debian: linux-perf): no live capture to import")
	}
	dir := t.TempDir()
	raw := filepath.Join(dir, "perf.data")
	before := time.Now()
	out, err := exec.Command("perf", "record", "-F", "99", "-g", "-o", raw, "--", "/bin/sh", "-c",
		"i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done").CombinedOutput()
	if err != nil {
		t.Skipf("perf record cannot sample here (%v): %s", err, out)
	}
	after := time.Now()
	text, err := exec.Command("perf", "script", "--header", "-i", raw).Output()
	if err != nil {
		t.Fatalf("perf script --header: %v", err)
	}
	script := filepath.Join(dir, "live.perf")
	if err := os.WriteFile(script, text, 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	if code, _, stderr := runIn("import", "--data", data, script); code != 0 {
		t.Fatalf("import: %d %s", code, stderr)
	}
	live := sourcesIn(t, data)["live"]
	if live.Relative || live.PeriodNs != int64(time.Second)/99 || live.Samples == 0 {
		t.Fatalf("live capture: %+v; want wall times and the 99 Hz period", live)
	}
	// "captured on" has whole seconds and comes after perf finished.
	if live.First < before.Add(-2*time.Second).UnixNano() || live.Last > after.Add(time.Second).UnixNano() {
		t.Errorf("live capture placed at %s to %s; it was recorded from %s to %s", time.Unix(0, live.First), time.Unix(0, live.Last), before, after)
	}
	// Placed by whole seconds: its heatmap is FlameScope's, cell for cell.
	start, end, offsets := flameScopeOffsets(t, script)
	db, err := store.Open(data, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, rows := range []int{50, 1000} {
		if differ, first := cellsApart(t, db, live, rows, flameScopeHeatmap(start, end, offsets, rows)); differ > 0 {
			t.Errorf("live capture, %d rows: %d cells differ from FlameScope's (first: %s)", rows, differ, first)
		}
	}
}
