package store

import (
	"testing"
	"time"

	"github.com/heatscope/heatscope/sample"
)

// TestUpkeepIsTimedAndSpread: a head cut and written as a block is the
// store's upkeep, timed in CPU time, and spread over the time of its
// samples (2 minutes here) from the write on, so that the overhead guard
// judges a block written every 2 minutes at the share of a CPU it costs
// over them, not as a burst in the window it fell in.
func TestUpkeepIsTimedAndSpread(t *testing.T) {
	db, err := Open(t.TempDir(), Options{Source: "local", PeriodNs: period99, CallerTicks: true, BlockDuration: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if cpu, spread := db.Upkeep(); cpu != 0 || spread != 0 {
		t.Fatalf("upkeep before any work: %v, spread %v", cpu, spread)
	}
	// Two minutes of samples, 10 to 8 minutes ago: the next tick cuts
	// the head and writes it as a block.
	start := time.Now().Add(-10 * time.Minute).UnixNano()
	for cpu := range 4 {
		s := start
		for ; s < start+int64(2*time.Minute)-period99; s += period99 {
			appendSample(t, db, s, uint32(cpu))
		}
	}
	db.lastTick = time.Time{} // a tick due now
	db.Tick()
	deadline := time.Now().Add(time.Minute)
	// Two units: the tick's, and the block's write, timed until seal
	// returns (after the block is listed).
	for (db.Stats().Sealing > 0 || db.upkeep.Units() < 2) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if st := db.Stats(); st.Sealing > 0 || st.Blocks != 1 || st.Cuts != 1 {
		t.Fatalf("after the tick: %d heads sealing, %d blocks, %d cuts; want the head written as one block", st.Sealing, st.Blocks, st.Cuts)
	}
	cpu, spread := db.Upkeep()
	if cpu <= 0 {
		t.Fatalf("a block of %d samples written: upkeep %v", 4*12000, cpu)
	}
	if spread >= cpu {
		t.Errorf("upkeep %v, spread %v: the block just written must count only for the time passed since", cpu, spread)
	}
	if later := db.upkeepSpread.Total(time.Now().Add(2 * time.Minute)); later != cpu {
		t.Errorf("upkeep %v, spread 2 minutes later %v: want all of it", cpu, later)
	}
	t.Logf("upkeep %v, spread so far %v", cpu, spread)
}

// appendSample appends one sample of a process on cpu at ts.
func appendSample(t *testing.T, db *DB, ts int64, cpu uint32) {
	t.Helper()
	stack := []sample.Frame{{Function: "burn", Module: "/usr/bin/burn", Kind: sample.KindUser}}
	s := sample.Sample{Time: ts / 1000 * 1000, CPU: cpu, PID: 7 + cpu, TID: 7 + cpu, Comm: "burn", Stack: stack, PeriodNs: period99}
	if err := db.Append(&s); err != nil {
		t.Fatal(err)
	}
}
