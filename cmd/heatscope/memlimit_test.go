package main

import (
	"runtime/debug"
	"testing"
)

// TestMemoryLimitAddsTheQueue: the Go memory limit record sets is
// --memory-limit plus the bytes the OTLP queue holds, as they change; at
// stop the limit found at start is back, and a late change of the queue
// (its last batches dropped as the exporter closes) does not touch it.
func TestMemoryLimitAddsTheQueue(t *testing.T) {
	const base = 36 << 20
	before := debug.SetMemoryLimit(-1)
	var m memoryLimit
	m.queueChanged(1 << 20) // the exporter starts before the sampler
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Fatalf("limit %d before start, want the process's %d", got, before)
	}
	m.start(base)
	if got := debug.SetMemoryLimit(-1); got != base+1<<20 {
		t.Errorf("limit %d at start with 1 MiB queued, want %d", got, base+1<<20)
	}
	m.queueChanged(4 << 20)
	if got := debug.SetMemoryLimit(-1); got != base+4<<20 {
		t.Errorf("limit %d with 4 MiB queued, want %d", got, base+4<<20)
	}
	m.queueChanged(0)
	if got := debug.SetMemoryLimit(-1); got != base {
		t.Errorf("limit %d with the queue empty, want %d", got, base)
	}
	m.stop()
	m.queueChanged(2 << 20)
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Errorf("limit %d after stop, want the process's %d back", got, before)
	}
}
