package store

import (
	"fmt"
	"strconv"
	"strings"
)

// The names of event segments, in a data directory and in a bucket
// (FORMAT.md, "Event log" and "Bucket layout"), are built and parsed here
// alone:
//
//	DIR/events/<16-digit segment>                      a data directory's segment
//	<node>/events/<instance>-<16-digit segment>        its object in a bucket
//	<node>/events/<16-digit segment>                   an object shipped before instances named them (read, never written)
//
// A data directory numbers its segments from 1, so two data directories
// shipping under one node name (a reinstalled machine) have segments of
// the same numbers: the instance id in the object's name keeps each one's
// objects apart.
const (
	eventSegmentDigits = 16
	// eventObjectSep joins an instance id and a segment number in an event
	// segment object's name: '-' is in neither.
	eventObjectSep = "-"
)

// EventSegmentName is the file name of a data directory's event segment seq.
func EventSegmentName(seq uint64) string { return fmt.Sprintf("%0*d", eventSegmentDigits, seq) }

// ParseEventSegmentName returns the number of the event segment file name
// (EventSegmentName); ok is false for any other name.
func ParseEventSegmentName(name string) (seq uint64, ok bool) {
	if len(name) != eventSegmentDigits {
		return 0, false
	}
	for _, c := range name {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	seq, err := strconv.ParseUint(name, 10, 64)
	return seq, err == nil
}

// EventObjectsPrefix is the prefix, in a bucket, of node's event segment
// objects of every instance.
func EventObjectsPrefix(node string) string { return node + "/" + eventsDir + "/" }

// EventObject is an event segment object in a bucket.
type EventObject struct {
	Node string
	// Instance is the data directory's instance id (Identity.Instance);
	// "" for an object named before instances named them.
	Instance string
	// Seq is the segment's number in its data directory.
	Seq uint64
}

// Key is the object's name relative to the bucket's prefix.
func (o EventObject) Key() string {
	if o.Instance == "" {
		return EventObjectsPrefix(o.Node) + EventSegmentName(o.Seq)
	}
	return EventObjectsPrefix(o.Node) + o.Instance + eventObjectSep + EventSegmentName(o.Seq)
}

// EventSegmentObject returns the name of the object the event segment file
// segment (EventSegmentName) of instance is shipped to under node.
func EventSegmentObject(node, instance, segment string) (string, error) {
	seq, ok := ParseEventSegmentName(segment)
	if !ok {
		return "", fmt.Errorf("event segment %q: not a %d-digit segment number", segment, eventSegmentDigits)
	}
	if node == "" || strings.Contains(node, "/") || !ValidInstance(instance) {
		return "", fmt.Errorf("event segment %s: node %q or instance %q is not valid", segment, node, instance)
	}
	return EventObject{Node: node, Instance: instance, Seq: seq}.Key(), nil
}

// ParseEventObject parses the name of an event segment object (relative
// to the bucket's prefix): <node>/events/<instance>-<segment>, or the
// older <node>/events/<segment>. Whether node is a valid node name is the
// caller's to check (bucketindex.ValidName).
func ParseEventObject(key string) (EventObject, error) {
	node, rest, ok := strings.Cut(key, "/")
	if !ok || node == "" || node == "." || node == ".." {
		return EventObject{}, fmt.Errorf("event segment object %q: no valid node name before its first '/'", key)
	}
	name, ok := strings.CutPrefix(rest, eventsDir+"/")
	if !ok {
		return EventObject{}, fmt.Errorf("event segment object %q: not under %s", key, EventObjectsPrefix(node))
	}
	o := EventObject{Node: node}
	seg := name
	if inst, s, found := strings.Cut(name, eventObjectSep); found {
		if !ValidInstance(inst) {
			return EventObject{}, fmt.Errorf("event segment object %q: %q is not an instance id (16 hex digits)", key, inst)
		}
		o.Instance, seg = inst, s
	}
	seq, ok := ParseEventSegmentName(seg)
	if !ok {
		return EventObject{}, fmt.Errorf("event segment object %q: %q is not a %d-digit segment number", key, seg, eventSegmentDigits)
	}
	o.Seq = seq
	return o, nil
}

// InstanceLabel is the event label a bucket's reader sets to the instance
// id an event segment object's name holds (the recorder that shipped it).
// It is not "instance", which events POSTed by automation often carry
// (Prometheus' label of that name) and which it would replace.
const InstanceLabel = "recorder_instance"
