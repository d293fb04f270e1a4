package query

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// wantLabel is the group label of a sample, written out per grouping.
func wantLabel(g Group, c *sample.Container) string {
	if c == nil {
		c = &sample.Container{}
	}
	switch g {
	case GroupContainer:
		switch {
		case c.Name != "":
			return c.Namespace + "/" + c.Pod + "/" + c.Name
		case c.ID != "":
			return c.Runtime + " " + c.ID[:12]
		}
		return "[no container]"
	case GroupPod:
		if c.Pod != "" {
			return c.Namespace + "/" + c.Pod
		}
		return "[no pod]"
	case GroupNamespace:
		if c.Namespace != "" {
			return c.Namespace
		}
		return "[no namespace]"
	case GroupQoS:
		if c.QoS != "" {
			return c.QoS
		}
		return "[no pod]"
	case GroupCgroup:
		if c.Cgroup != "" {
			return c.Cgroup
		}
		return "[unknown cgroup]"
	}
	return ""
}

// TestGroupedFlameGraph checks the group level of flame graphs against the
// samples' own metadata.
func TestGroupedFlameGraph(t *testing.T) {
	start := time.Now().Add(-time.Hour).UnixNano()
	db, samples := testStore(t, synth.Config{CPUs: 4, Hz: 99, Start: start, Seconds: 40, Stacks: 200, Containers: true})
	r := store.Range{From: start, To: start + 50e9}
	for _, g := range []Group{GroupContainer, GroupPod, GroupNamespace, GroupQoS, GroupCgroup} {
		want := map[string]int64{}
		for i := range samples {
			if !isIdle(&samples[i]) {
				want[wantLabel(g, samples[i].Container)]++
			}
		}
		if len(want) < 3 {
			t.Fatalf("%s: only %d groups in the test data", g, len(want))
		}
		root, _, err := GroupedFlameGraphOf(context.Background(), db, r, &store.Filter{}, g, GroupAddresses)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for _, c := range root.Children {
			if c.Kind != "group" {
				t.Errorf("%s: a %q node %q under the root", g, c.Kind, c.Name)
			}
			got[c.Name] = c.Value
			var sum int64
			for _, p := range c.Children {
				if p.Kind != "process" {
					t.Errorf("%s: a %q node %q under group %q", g, p.Kind, p.Name, c.Name)
				}
				sum += p.Value
			}
			if sum != c.Value || c.Self != 0 {
				t.Errorf("%s: group %q counts %d (self %d), its commands %d", g, c.Name, c.Value, c.Self, sum)
			}
		}
		if !maps.Equal(got, want) {
			t.Errorf("%s: groups %v\nwant %v", g, got, want)
		}
	}
	plain, _, _ := FlameGraphOf(context.Background(), db, r, &store.Filter{})
	for _, c := range plain.Children {
		if c.Kind != "process" {
			t.Errorf("ungrouped: a %q node %q under the root", c.Kind, c.Name)
		}
	}
}

func TestParseGroup(t *testing.T) {
	for _, v := range []string{"", "container", "pod", "namespace", "qos", "cgroup"} {
		if g, err := ParseGroup(v); err != nil || string(g) != v {
			t.Errorf("ParseGroup(%q) = %q, %v", v, g, err)
		}
	}
	for _, v := range []string{"Container", "node", " pod"} {
		var pe *ParamError
		if _, err := ParseGroup(v); !errors.As(err, &pe) || pe.Param != "group" {
			t.Errorf("ParseGroup(%q): %v, want an error naming group", v, err)
		}
	}
}
