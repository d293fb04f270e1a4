package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/sample"
)

// selectWarned returns the samples f selects in db, idle included and
// sorted, and the query's warnings.
func selectWarned(t testing.TB, db *DB, f Filter) ([]sample.Sample, Warnings) {
	t.Helper()
	f.IncludeIdle = true
	var out []sample.Sample
	warnings, err := db.Select(context.Background(), everything, &f, func(b *Batch) error {
		for _, i := range b.Rows {
			out = append(out, b.T.Sample(int(i)))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sortSamples(out)
	return out, warnings
}

// pathWarnings returns the CgroupPathsUnknown warnings among w, and fails
// the test on any other.
func pathWarnings(t *testing.T, w Warnings) []*CgroupPathsUnknown {
	t.Helper()
	var out []*CgroupPathsUnknown
	for _, e := range w {
		var p *CgroupPathsUnknown
		if !errors.As(e, &p) {
			t.Fatalf("warning %v, want only cgroup path warnings", e)
		}
		out = append(out, p)
	}
	return out
}

// TestCgroupPathFilter filters by the cgroup paths the recorder kept for
// the samples' cgroups, in the head and in a block: by one path, two, a
// path or an id, a path that no cgroup had, and through the timeline's
// per-thread summaries. The threads of the cgroup whose path was not kept
// (synth's cgroup 5006) are named in one warning per table, not silently
// left out, unless another condition keeps them out anyway.
func TestCgroupPathFilter(t *testing.T) {
	dir := t.TempDir()
	// CallerTicks: no background tick cuts the head while the head is checked.
	db, err := Open(dir, Options{Source: "host", Node: "node-a", CallerTicks: true})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-time.Hour).Truncate(10 * time.Second).UnixNano()
	want := appendSynth(t, db, synth.Config{CPUs: 4, Hz: 99, Start: start, Seconds: 60, Stacks: 100, Containers: true})
	cs := synth.Containers()
	ssh, cart := cs[4].Cgroup, cs[0].Cgroup
	pathless := map[[2]uint32]bool{} // the threads of cgroup 5006, which has no path
	var sshPID uint32
	for _, s := range want {
		switch {
		case s.CgroupID == 5006:
			pathless[[2]uint32{s.PID, s.TID}] = true
		case s.Container != nil && s.Container.Cgroup == ssh:
			sshPID = s.PID
		}
	}
	if len(pathless) == 0 || sshPID == 0 {
		t.Fatalf("the test data has %d threads in the cgroup without a path, ssh pid %d: not a test", len(pathless), sshPID)
	}
	inPath := func(paths ...string) func(s sample.Sample) bool {
		return func(s sample.Sample) bool {
			for _, p := range paths {
				if s.Container != nil && s.Container.Cgroup == p {
					return true
				}
			}
			return false
		}
	}
	cases := []struct {
		name     string
		f        Filter
		keep     func(s sample.Sample) bool
		warnings bool
	}{
		{"one path", Filter{CgroupPaths: []string{ssh}}, inPath(ssh), true},
		{"two paths", Filter{CgroupPaths: []string{ssh, cart}}, inPath(ssh, cart), true},
		{"a path or an id", Filter{CgroupPaths: []string{ssh}, Cgroups: []uint64{5002}},
			func(s sample.Sample) bool { return inPath(ssh)(s) || s.CgroupID == 5002 }, true},
		{"the pathless cgroup by id", Filter{CgroupPaths: []string{ssh}, Cgroups: []uint64{5006}},
			func(s sample.Sample) bool { return inPath(ssh)(s) || s.CgroupID == 5006 }, false},
		{"a path and a pid", Filter{CgroupPaths: []string{ssh}, PIDs: []uint32{sshPID}},
			func(s sample.Sample) bool { return inPath(ssh)(s) && s.PID == sshPID }, false},
		{"no such path", Filter{CgroupPaths: []string{"/system.slice/nosuch.service"}}, func(sample.Sample) bool { return false }, true},
	}
	check := func(where, block string) {
		t.Helper()
		for _, tc := range cases {
			var expect []sample.Sample
			for _, s := range want {
				if tc.keep(s) {
					expect = append(expect, s)
				}
			}
			if tc.name != "no such path" && (len(expect) == 0 || len(expect) == len(want)) {
				t.Fatalf("%s: the test data selects %d of %d samples: not a test", tc.name, len(expect), len(want))
			}
			got, warnings := selectWarned(t, db, tc.f)
			if len(got) != len(expect) {
				t.Errorf("%s, %s: %d samples, want %d", where, tc.name, len(got), len(expect))
			} else {
				for i := range got {
					if !equalSamples(got[i], expect[i]) {
						t.Errorf("%s, %s: sample %d is %+v, want %+v", where, tc.name, i, got[i], expect[i])
						break
					}
				}
			}
			pw := pathWarnings(t, warnings)
			switch {
			case !tc.warnings && len(pw) != 0:
				t.Errorf("%s, %s: warnings %v, want none (the pathless cgroup's threads are kept out by another condition)", where, tc.name, warnings)
			case tc.warnings && (len(pw) != 1 || pw[0].Node != "node-a" || pw[0].Block != block || pw[0].Threads != len(pathless)):
				t.Errorf("%s, %s: warnings %v, want one naming node-a, block %q and %d threads", where, tc.name, warnings, block, len(pathless))
			}
		}
	}
	check("head", "")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open(dir, Options{Source: "host", Node: "node-a", ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if len(db.blocks) != 1 {
		t.Fatalf("%d blocks, want the head cut into one", len(db.blocks))
	}
	check("block", db.blocks[0].Meta.ID)

	// A path is a thread attribute: the timeline's summaries answer, and
	// warn as a scan does.
	f := Filter{CgroupPaths: []string{ssh}, IncludeIdle: true}
	r := Range{From: start, To: start + 70e9}
	tl, warnings, err := db.Timeline(context.Background(), r, 10e9, &f)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, c := range tl.Samples {
		total += c
	}
	scanned, _ := selectWarned(t, db, f)
	if total != int64(len(scanned)) || total == 0 {
		t.Errorf("timeline of %s counts %d samples, a scan %d", ssh, total, len(scanned))
	}
	if pw := pathWarnings(t, warnings); len(pw) != 1 || pw[0].Block != db.blocks[0].Meta.ID {
		t.Errorf("timeline warnings %v, want one naming the block", warnings)
	}
}

// TestCgroupPathFilterOnVersion1Block: a block of the format's first
// version keeps no cgroup paths. A filter by path selects none of its
// samples and says so, naming the block; a filter by id still selects.
func TestCgroupPathFilterOnVersion1Block(t *testing.T) {
	dir := t.TempDir()
	copyDir(t, "testdata/v1", dir)
	db, err := Open(dir, Options{Source: "host", ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if len(db.blocks) != 1 || db.blocks[0].Meta.Version != 1 {
		t.Fatalf("want the one version 1 block of testdata/v1")
	}
	every := all(t, db, Filter{})
	threads := map[[2]uint32]bool{}
	var id uint64
	for _, s := range every {
		if s.CgroupID != 0 {
			threads[[2]uint32{s.PID, s.TID}] = true
			id = s.CgroupID
		}
	}
	if len(threads) == 0 {
		t.Fatal("the version 1 block has no thread of a known cgroup: not a test")
	}
	got, warnings := selectWarned(t, db, Filter{CgroupPaths: []string{"/system.slice/ssh.service"}})
	if len(got) != 0 {
		t.Errorf("a path filter selected %d samples of a block that keeps no paths", len(got))
	}
	pw := pathWarnings(t, warnings)
	if len(pw) != 1 || pw[0].Block != db.blocks[0].Meta.ID || pw[0].Threads != len(threads) {
		t.Fatalf("warnings %v, want one naming block %s and its %d threads", warnings, db.blocks[0].Meta.ID, len(threads))
	}
	msg := pw[0].Error()
	for _, part := range []string{db.blocks[0].Meta.ID, "no recorded cgroup path", "cgroup id filter can"} {
		if !strings.Contains(msg, part) {
			t.Errorf("warning %q does not say %q", msg, part)
		}
	}
	if byID, _ := selectWarned(t, db, Filter{Cgroups: []uint64{id}}); len(byID) == 0 {
		t.Errorf("a filter by cgroup id %d selected nothing of the version 1 block", id)
	}
}
