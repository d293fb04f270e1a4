package main

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/heatscope/heatscope/query"
	"github.com/heatscope/heatscope/store"
)

// flameScopeOffsets reads a perf script as FlameScope does
// (app/perf/heatmap.py, written here from its rules): lines starting with
// '#' are skipped; an event line is one matching ` +([0-9.]+): .+?:`, its
// time parsed as a float; a stack is its event line and the lines after
// it, each right-trimmed, joined; a stack matching "swapper" followed by an
// idle function is idle. start is the smallest time of any event (idle or
// not), end the last event's time; offsets are the times of the stacks
// that are not idle. One departure: a time printed in ns (perf script
// --ns) is read to the µs, as the store keeps it (store/FORMAT.md), so
// that what is compared is the placement, not the store's resolution.
func flameScopeOffsets(t *testing.T, path string) (start, end float64, offsets []float64) {
	t.Helper()
	event := regexp.MustCompile(` +([0-9.]+): .+?:`)
	idle := regexp.MustCompile(`swapper.*(cpuidle|cpu_idle|cpu_bringup_and_idle|native_safe_halt|xen_hypercall_sched_op|xen_hypercall_vcpu_op)`)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	start, end = math.Inf(1), math.Inf(-1)
	var stack string
	ts := -1.0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		if m := event.FindStringSubmatch(line); m != nil {
			if stack != "" && !idle.MatchString(stack) {
				offsets = append(offsets, ts)
			}
			text := m[1]
			if dot := strings.IndexByte(text, '.'); dot >= 0 && len(text) > dot+7 {
				text = text[:dot+7]
			}
			if ts, err = strconv.ParseFloat(text, 64); err != nil {
				t.Fatalf("%s: %q: %v", path, line, err)
			}
			start = math.Min(start, ts)
			stack = strings.TrimRight(line, " \t")
		} else {
			stack += strings.TrimRight(line, " \t")
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if !idle.MatchString(stack) {
		offsets = append(offsets, ts)
	}
	return start, math.Max(end, ts), offsets
}

// flameScopeHeatmap is FlameScope's heatmap of a perf script
// (app/controllers/heatmap.py): ceil(end) - floor(start) columns, a
// sample at ts in column floor(ts - floor(start)) and row rows -
// floor(rows * (ts % 1)) - 1, in float64 as Python computes them.
func flameScopeHeatmap(start, end float64, offsets []float64, rows int) [][]int {
	cols := int(math.Ceil(end) - math.Floor(start))
	values := make([][]int, cols)
	for c := range values {
		values[c] = make([]int, rows)
	}
	for _, ts := range offsets {
		col := int(math.Floor(ts - math.Floor(start)))
		row := rows - int(math.Floor(float64(rows)*math.Mod(ts, 1))) - 1
		values[col][row]++
	}
	return values
}

// withSampleTimes writes a copy of the perf script at path with the header
// lines perf script --header prints about the samples' times ("time of
// first sample", "time of last sample") and a "captured on", when it has
// none: what a header-placed import needs. FlameScope skips them.
func withSampleTimes(t *testing.T, path, dir string, start, end float64) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	var head strings.Builder
	if !strings.Contains(text, "# captured on") {
		head.WriteString("# captured on    : Fri Nov 27 10:15:42 2026\n")
	}
	if !strings.Contains(text, "# time of last sample") {
		fmt.Fprintf(&head, "# time of first sample : %.6f\n# time of last sample : %.6f\n", start, end)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, filepath.Base(path))
	if err := os.WriteFile(out, []byte(head.String()+text), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// withoutHeader writes a copy of the perf script at path without its
// comment lines into dir.
func withoutHeader(t *testing.T, path, dir string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if !strings.HasPrefix(line, "#") {
			kept = append(kept, line)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, filepath.Base(path))
	if err := os.WriteFile(out, []byte(strings.Join(kept, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestImportKeepsFlameScopeHeatmap imports the perf captures of the tests
// placed at wall time, from their header and with a --time-offset that has
// a fraction of a second, and checks that the heatmap of each import is
// FlameScope's of the same file, cell for cell, at several row counts:
// placement moves a capture by whole seconds, keeping every sample's
// offset within its second.
func TestImportKeepsFlameScopeHeatmap(t *testing.T) {
	dir := t.TempDir()
	synthetic := filepath.Join(dir, "synthetic.perf")
	writePerfScript(t, synthetic, 300) // every 10 ms: on the 20 ms and 10 ms rows' edges
	captures := []string{"../../profileio/testdata/perf-record-header.perf", "../../profileio/testdata/perfscript.txt",
		"../../query/testdata/flamescope/perf.test01.excerpt", synthetic}
	data := filepath.Join(dir, "data")
	type imported struct {
		source, file string
		relative     bool
		heatmap      func(rows int) [][]int
	}
	var sources []imported
	for i, capture := range captures {
		start, end, offsets := flameScopeOffsets(t, capture)
		if len(offsets) == 0 {
			t.Fatalf("%s: no sample FlameScope counts", capture)
		}
		fs := func(rows int) [][]int { return flameScopeHeatmap(start, end, offsets, rows) }
		placed := withSampleTimes(t, capture, filepath.Join(dir, strconv.Itoa(i)), start, end)
		name := fmt.Sprintf("header-%d", i)
		if code, _, stderr := runIn("import", "--data", data, "--source", name, placed); code != 0 || !strings.Contains(stderr, "captured on") {
			t.Fatalf("import %s: %d %s", placed, code, stderr)
		}
		sources = append(sources, imported{name, capture, false, fs})
		name = fmt.Sprintf("offset-%d", i)
		code, _, stderr := runIn("import", "--data", data, "--source", name, "--time-offset", "1795237380.637", capture)
		if code != 0 {
			t.Fatalf("import --time-offset %s: %d %s", capture, code, stderr)
		}
		if !strings.Contains(stderr, "rounded to 1795237381 whole seconds") {
			t.Errorf("import --time-offset 1795237380.637 %s does not say it rounded the offset: %s", capture, stderr)
		}
		sources = append(sources, imported{name, capture, false, fs})
		// Without a header nor --time-offset: perf's own clock, as
		// FlameScope shows it (this checks the FlameScope above).
		name = fmt.Sprintf("relative-%d", i)
		if code, _, stderr := runIn("import", "--data", data, "--source", name, withoutHeader(t, capture, filepath.Join(dir, name))); code != 0 {
			t.Fatalf("import %s without its header: %d %s", capture, code, stderr)
		}
		sources = append(sources, imported{name, capture, true, fs})
	}
	db, err := store.Open(data, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	info := map[string]store.SourceInfo{}
	for _, s := range db.Sources() {
		info[s.Name] = s
	}
	for _, src := range sources {
		s := info[src.source]
		if s.Relative != src.relative || s.Samples == 0 {
			t.Fatalf("%s (%s): %+v, want relative %v", src.source, src.file, s, src.relative)
		}
		for _, rows := range []int{50, 10, 7, 100, 1000} {
			if differ, first := cellsApart(t, db, s, rows, src.heatmap(rows)); differ > 0 {
				t.Errorf("%s (%s), %d rows: %d cells differ from FlameScope's (first: %s)", src.source, src.file, rows, differ, first)
			}
		}
	}
}

// cellsApart compares the heatmap of source s over its whole span (rows
// rows) with want, FlameScope's: how many cells differ, and the first.
func cellsApart(t *testing.T, db *store.DB, s store.SourceInfo, rows int, want [][]int) (differ int, first string) {
	t.Helper()
	h, _, err := query.HeatmapOf(context.Background(), db, store.Range{From: s.First, To: s.Last + 1}, &store.Filter{Sources: []string{s.Name}}, rows)
	if err != nil {
		t.Fatal(err)
	}
	for c := range max(len(want), len(h.Values)) {
		for r := range rows {
			var got, w int
			if c < len(h.Values) {
				got = h.Values[c][r]
			}
			if c < len(want) {
				w = want[c][r]
			}
			if got != w {
				if differ == 0 {
					first = fmt.Sprintf("column %d row %d: %d, FlameScope %d", c, r, got, w)
				}
				differ++
			}
		}
	}
	return differ, first
}
