package store

import (
	"testing"

	"github.com/heatscope/heatscope/sample"
)

// TestInternFrameRuns: frames whose module or build id is the last
// frame's, or differs from it in one of the two only, keep their own
// module and build id: in the head, in the WAL's replay and in a block.
func TestInternFrameRuns(t *testing.T) {
	stack := []sample.Frame{
		{Function: "a", Module: "/lib/one.so", BuildID: "b1", Address: 0x10, Kind: sample.KindUser},
		{Function: "b", Module: "/lib/one.so", BuildID: "b1", Address: 0x20, Kind: sample.KindUser},
		{Function: "c", Module: "/lib/one.so", BuildID: "b2", Address: 0x30, Kind: sample.KindUser},
		{Function: "d", Module: "/lib/two.so", BuildID: "b2", Address: 0x40, Kind: sample.KindUser},
		{Function: "e", Address: 0x50, Kind: sample.KindUser},
		{Function: "f", Module: "/lib/two.so", Address: 0x60, Kind: sample.KindUser},
		{Function: "g", Module: "/lib/one.so", BuildID: "b1", Address: 0x70, Kind: sample.KindUser},
	}
	rev := make([]sample.Frame, len(stack))
	for i := range stack {
		rev[i] = stack[len(stack)-1-i]
	}
	dir := t.TempDir()
	db, err := Open(dir, Options{Source: "host"})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var want []sample.Sample
	for i, st := range [][]sample.Frame{stack, rev, stack} {
		s := sample.Sample{Time: int64(i+1) * 1e9, CPU: 0, PID: 1, TID: 1, Comm: "x", Stack: st, PeriodNs: sample.PeriodOf(99)}
		if err := db.Append(&s); err != nil {
			t.Fatal(err)
		}
		want = append(want, s)
	}
	sameSamples(t, all(t, db, Filter{}), want)
	replayed := crashCopy(t, db, dir)
	sameSamples(t, all(t, replayed, Filter{}), want)
	replayed.Close()
	db.mu.Lock()
	db.cutLocked()
	db.mu.Unlock()
	waitSealed(t, db)
	sameSamples(t, all(t, db, Filter{}), want)
}
