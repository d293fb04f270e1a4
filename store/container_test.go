package store

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/sample"
)

// copyDir copies a directory tree of regular files.
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.Walk(from, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if fi.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestVersion1BlockStillReads opens a block written by the format's first
// version (testdata/v1, no cgroups section) beside new blocks with
// container metadata.
func TestVersion1BlockStillReads(t *testing.T) {
	dir := t.TempDir()
	copyDir(t, "testdata/v1", dir)
	// The config that wrote testdata/v1.
	_, old := synthTable(t, synth.Config{CPUs: 2, Hz: 99, Start: 1_700_000_000_000_000_000, Seconds: 3, Stacks: 20, Processes: 8})
	sortSamples(old)

	db, err := Open(dir, Options{Source: "host"})
	if err != nil {
		t.Fatal(err)
	}
	if st := db.Stats(); st.Blocks != 1 || st.CorruptSkips != 0 {
		t.Fatalf("the version 1 block did not open: %+v", st)
	}
	sameSamples(t, all(t, db, Filter{Sources: []string{"v1host"}}), old)
	start := time.Now().Add(-time.Minute).UnixNano()
	recent := appendSynth(t, db, synth.Config{CPUs: 2, Hz: 99, Start: start, Seconds: 5, Stacks: 20, Containers: true})
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db, err = Open(dir, Options{Source: "host", ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	versions := map[int]int{}
	for _, b := range db.blocks {
		versions[b.Meta.Version]++
	}
	if versions[1] != 1 || versions[FormatVersion] != 1 {
		t.Errorf("block versions %v, want one of version 1 and one of version %d", versions, FormatVersion)
	}
	sameSamples(t, all(t, db, Filter{Sources: []string{"v1host"}}), old)
	sameSamples(t, all(t, db, Filter{Sources: []string{"host"}}), recent)
	// A container filter finds nothing in a block without metadata.
	if got := all(t, db, Filter{Sources: []string{"v1host"}, Namespaces: []string{"shop"}}); len(got) != 0 {
		t.Errorf("a namespace filter selected %d samples of a block without container metadata", len(got))
	}
}

// TestContainerFilters checks each container filter against the samples'
// own metadata, in the head and in blocks, and the timeline's per-thread
// summaries against a scan.
func TestContainerFilters(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{Source: "host"})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-time.Hour).Truncate(10 * time.Second).UnixNano()
	want := appendSynth(t, db, synth.Config{CPUs: 4, Hz: 99, Start: start, Seconds: 60, Stacks: 100, Containers: true})
	docker := synth.Containers()[3].ID
	cases := []struct {
		name string
		f    Filter
		keep func(c *sample.Container) bool
	}{
		{"container name", Filter{Containers: []string{"cart"}}, func(c *sample.Container) bool { return c.Name == "cart" }},
		{"short container id", Filter{Containers: []string{docker[:12]}}, func(c *sample.Container) bool { return c.ID == docker }},
		{"two containers", Filter{Containers: []string{"etl", docker}},
			func(c *sample.Container) bool { return c.Name == "etl" || c.ID == docker }},
		{"pod name", Filter{Pods: []string{"cart-7d9f"}}, func(c *sample.Container) bool { return c.Pod == "cart-7d9f" }},
		{"pod uid", Filter{Pods: []string{"aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"}}, func(c *sample.Container) bool { return c.Pod == "etl-1" }},
		{"namespace", Filter{Namespaces: []string{"batch"}}, func(c *sample.Container) bool { return c.Namespace == "batch" }},
		{"qos", Filter{QoS: []string{"burstable"}}, func(c *sample.Container) bool { return c.QoS == "burstable" }},
		{"namespace and container", Filter{Namespaces: []string{"shop"}, Containers: []string{"istio-proxy"}},
			func(c *sample.Container) bool { return c.Namespace == "shop" && c.Name == "istio-proxy" }},
	}
	check := func(where string) {
		for _, tc := range cases {
			var expect []sample.Sample
			for _, s := range want {
				if s.Container != nil && tc.keep(s.Container) {
					expect = append(expect, s)
				}
			}
			if len(expect) == 0 || len(expect) == len(want) {
				t.Fatalf("%s: the test data selects %d of %d samples: not a test", tc.name, len(expect), len(want))
			}
			got := all(t, db, tc.f)
			if len(got) != len(expect) {
				t.Errorf("%s, %s: %d samples, want %d", where, tc.name, len(got), len(expect))
				continue
			}
			for i := range got {
				if !equalSamples(got[i], expect[i]) {
					t.Errorf("%s, %s: sample %d is %+v, want %+v", where, tc.name, i, got[i], expect[i])
					break
				}
			}
		}
	}
	check("head")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open(dir, Options{Source: "host", ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	check("block")

	// Namespace filters are thread attributes: the summaries answer.
	f := Filter{Namespaces: []string{"shop"}, IncludeIdle: true}
	r := Range{From: start, To: start + 70e9} // 60 s of ticks, jitter past the last
	tl, _, err := db.Timeline(context.Background(), r, 10e9, &f)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, c := range tl.Samples {
		total += c
	}
	if n := len(all(t, db, f)); total != int64(n) {
		t.Errorf("timeline of namespace shop counts %d samples, a scan %d", total, n)
	}
}

// TestFirstMetadataWins: a table keeps the first metadata a cgroup id
// comes with; later samples of that cgroup without metadata share it.
func TestFirstMetadataWins(t *testing.T) {
	b := NewBuilder()
	c := &sample.Container{Cgroup: "/docker/x", ID: strings.Repeat("a", 64), Runtime: "docker"}
	b.Append(&sample.Sample{Time: 1000, PID: 1, TID: 1, CgroupID: 7, Container: c})
	b.Append(&sample.Sample{Time: 2000, PID: 1, TID: 1, CgroupID: 7})
	b.Append(&sample.Sample{Time: 3000, PID: 2, TID: 2, CgroupID: 7, Container: &sample.Container{Cgroup: "/other"}})
	b.Append(&sample.Sample{Time: 4000, PID: 3, TID: 3, CgroupID: 8})
	if len(b.T.Cgroups) != 1 {
		t.Fatalf("%d cgroups in the table, want 1", len(b.T.Cgroups))
	}
	for i := range 3 {
		if got := b.T.Sample(i).Container; got == nil || *got != *c {
			t.Errorf("sample %d: container %+v, want %+v", i, got, c)
		}
	}
	if got := b.T.Sample(3).Container; got != nil {
		t.Errorf("a cgroup without metadata has %+v", got)
	}
}

// FuzzDecodeCgroups decodes arbitrary bytes as the cgroups section of a
// real table: an error, or metadata every thread can use.
// Seeds: testdata/fuzz/FuzzDecodeCgroups.
func FuzzDecodeCgroups(f *testing.F) {
	tab, _ := synthTable(f, synth.Config{CPUs: 2, Hz: 99, Start: 1e18, Seconds: 2, Stacks: 20, Containers: true})
	f.Add(encodeCgroups(tab))
	f.Add([]byte{0})
	f.Fuzz(func(t *testing.T, raw []byte) {
		var sections [numSections + 1][]byte
		sections[sectionStrings] = encodeStrings(tab)
		sections[sectionFrames] = encodeFrames(tab)
		sections[sectionStacks] = encodeStacks(tab)
		sections[sectionThreads] = encodeThreads(tab)
		sections[sectionCgroups] = raw
		got, err := decodeTables(sections, FormatVersion)
		if err != nil {
			return
		}
		ids := map[uint64]bool{}
		for _, c := range got.Cgroups {
			if ids[c.ID] {
				t.Fatalf("cgroup %d decoded twice", c.ID)
			}
			ids[c.ID] = true
		}
		for _, th := range got.Threads {
			if th.Meta > uint32(len(got.Cgroups)) || th.Meta > 0 && got.Cgroups[th.Meta-1].ID != th.Cgroup {
				t.Fatalf("thread %+v points at the wrong metadata", th)
			}
			got.ContainerOf(th)
		}
		if !slices.Equal(got.Strings, tab.Strings) {
			t.Fatal("the strings changed")
		}
	})
}
