package store

import (
	"testing"

	"github.com/heatscope/heatscope/events"
)

// TestSeparateEventInstances: where a node's blocks are shown apart, each
// instance's events follow its blocks (even when the events alone do not
// overlap); where they are not, events that overlap are shown apart by
// their own spans, and events of one instance, or of instances one after
// the other, keep the node's name. The source's labels are not changed.
func TestSeparateEventInstances(t *testing.T) {
	ev := func(node, inst string, at int64) events.Event {
		labels := map[string]string{NodeLabel: node}
		if inst != "" {
			labels[InstanceLabel] = inst
		}
		return events.Event{Time: at, Text: node + "/" + inst, Labels: labels}
	}
	const x, y = "00000000000000aa", "00000000000000bb"
	evs := []events.Event{
		ev("a", x, 1), ev("b", x, 1), ev("c", "", 1), ev("c", x, 2),
		ev("a", x, 3), ev("b", y, 4), ev("c", "", 5), ev("a", y, 10), ev("b", x, 11),
	}
	shared := evs[7].Labels
	blocks := []*InstanceNotice{{Node: "a", Shown: map[string]string{x: "a", y: InstanceNodeName("a", y)}}}
	notices := separateEventInstances(evs, blocks)
	want := []string{"a", "b", "c", InstanceNodeName("c", x), "a", InstanceNodeName("b", y), "c", InstanceNodeName("a", y), "b"}
	for i, e := range evs {
		if got := e.Labels[NodeLabel]; got != want[i] {
			t.Errorf("event %d (%s at %d): node %q, want %q", i, e.Text, e.Time, got, want[i])
		}
	}
	if shared[NodeLabel] != "a" {
		t.Errorf("the source's labels were changed: %v", shared)
	}
	if len(notices) != 2 || notices[0].Node != "b" || notices[1].Node != "c" ||
		notices[0].From != 4 || notices[0].To != 4 || notices[1].Shown[""] != "c" {
		t.Errorf("notices %+v, want one for b (at 4) and one for c, none for a (its blocks' notice says it)", notices)
	}
	// A reinstalled machine: one instance's events after the other's.
	evs = []events.Event{ev("a", x, 1), ev("a", x, 2), ev("a", y, 3), ev("a", y, 4)}
	if notices := separateEventInstances(evs, nil); len(notices) != 0 || evs[2].Labels[NodeLabel] != "a" {
		t.Errorf("instances one after the other: notices %v, node %q", notices, evs[2].Labels[NodeLabel])
	}
}
