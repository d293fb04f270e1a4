package store

import (
	"fmt"
	"strconv"
)

// The names of a data directory's event segments (FORMAT.md, "Event
// log") are built and parsed here alone: DIR/events/<16-digit segment>,
// numbered from 1. Their objects in a bucket are package bucketlayout's.
const eventSegmentDigits = 16

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

// InstanceLabel is the event label a bucket's reader sets to the instance
// id an event segment object's name holds (the recorder that shipped it).
// It is not "instance", which events POSTed by automation often carry
// (Prometheus' label of that name) and which it would replace.
const InstanceLabel = "recorder_instance"
