package store

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/sample"
)

const (
	period99 = int64(time.Second) / 99
	period49 = int64(time.Second) / 49
)

// appendBurn appends a process that keeps CPU 0 busy for seconds s from
// start: one sample every periodNs. It returns the time after the last.
func appendBurn(t *testing.T, db *DB, start int64, seconds, periodNs int64) int64 {
	t.Helper()
	stack := []sample.Frame{{Function: "burn", Module: "/usr/bin/burn", Kind: sample.KindUser}}
	end := start + seconds*int64(time.Second)
	ts := start
	for ; ts < end; ts += periodNs {
		s := sample.Sample{Time: ts / 1000 * 1000, CPU: 0, PID: 7, TID: 7, Comm: "burn", Stack: stack}
		if err := db.Append(&s); err != nil {
			t.Fatal(err)
		}
	}
	return ts
}

// checkPeriods checks that every sample db selects weighs the period it
// was taken at: period99 before change, period49 from it.
func checkPeriods(t *testing.T, what string, db *DB, change int64, want int) {
	t.Helper()
	n := 0
	if _, err := db.Select(context.Background(), everything, &Filter{}, func(b *Batch) error {
		for _, i := range b.Rows {
			n++
			wantPeriod := period49
			if b.T.Time[i] < change/1000*1000 { // times are kept in µs
				wantPeriod = period99
			}
			if b.PeriodNs != wantPeriod || b.Weight() != wantPeriod {
				t.Fatalf("%s: a sample at %d (change at %d) weighs %d (batch period %d), want %d",
					what, b.T.Time[i], change, b.Weight(), b.PeriodNs, wantPeriod)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n != want {
		t.Fatalf("%s: %d samples, want %d", what, n, want)
	}
}

// TestEverySampleWeighsItsOwnPeriod changes the period in the middle of a
// recording and checks what every sample weighs: in the head, in sealed
// blocks, replayed from the WAL by a reader that was told no period, and
// after compaction, which must not merge blocks of different periods.
func TestEverySampleWeighsItsOwnPeriod(t *testing.T) {
	dir := t.TempDir()
	// CallerTicks: no background tick may cut the 3-hour-old head between
	// the Flush and the reader's Open below, which would leave the reader
	// no WAL segment to replay.
	db, err := Open(dir, Options{Source: "host", PeriodNs: period99, BlockDuration: 10 * time.Second, CallerTicks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	start := time.Now().Add(-3 * time.Hour).Truncate(time.Hour).UnixNano()
	change := appendBurn(t, db, start, 30, period99)
	db.SetPeriod(period49)
	appendBurn(t, db, change, 32, period49)
	total := len(all(t, db, Filter{}))
	if want := 30*99 + 32*49; total < want-2 || total > want+2 {
		t.Fatalf("%d samples, want about %d", total, want)
	}
	db.Flush()
	checkPeriods(t, "recording", db, change, total)
	waitSealed(t, db)

	// A reader replays the head from the WAL: the segment states its period.
	reader, err := Open(dir, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(reader.sealing) == 0 {
		t.Fatal("the reader replayed no WAL segment: the test proves nothing about the WAL")
	}
	checkPeriods(t, "replayed", reader, change, total)
	reader.Close()

	db.mu.Lock()
	db.cutLocked()
	db.mu.Unlock()
	waitSealed(t, db)
	blocks := db.Stats().Blocks
	db.Maintain()
	if st := db.Stats(); st.Compactions == 0 || st.Blocks >= blocks {
		t.Fatalf("compaction: %d blocks before, %d after, %d compactions", blocks, st.Blocks, st.Compactions)
	}
	checkPeriods(t, "compacted", db, change, total)
	periods := map[int64]int{}
	for _, b := range db.blocks {
		periods[b.Meta.PeriodNs] += b.Meta.Samples
	}
	if periods[period99]+periods[period49] != total || periods[period99] == 0 || periods[period49] == 0 {
		t.Fatalf("blocks per period %v, want the samples at %d and %d only", periods, period99, period49)
	}
}

// TestPeriodOfAnEmptyHead changes the period before any sample: the head
// and its WAL segment take the new period without a cut.
func TestPeriodOfAnEmptyHead(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{Source: "host", PeriodNs: period99})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetPeriod(period49)
	start := time.Now().Add(-time.Minute).UnixNano()
	appendBurn(t, db, start, 2, period49)
	db.Flush()
	if st := db.Stats(); st.Cuts != 0 {
		t.Errorf("%d cuts for a change of period with an empty head", st.Cuts)
	}
	reader, err := Open(dir, Options{ReadOnly: true, PeriodNs: period99})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	checkPeriods(t, "replayed", reader, start, 2*49+1)
}

// TestStatsAfterClose checks that Stats after Close still counts the
// blocks the directory holds (the recorder prints them when it is done).
func TestStatsAfterClose(t *testing.T) {
	db, err := Open(t.TempDir(), Options{Source: "host", PeriodNs: period99})
	if err != nil {
		t.Fatal(err)
	}
	appendBurn(t, db, time.Now().Add(-time.Minute).UnixNano(), 3, period99)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if st := db.Stats(); st.Blocks != 1 || st.BlockBytes <= 0 {
		t.Fatalf("after Close: %d blocks, %d bytes; want the 1 block written", st.Blocks, st.BlockBytes)
	}
}

// TestMergeBlocksKeepsPeriodsApart merges blocks of one source taken at
// 99 Hz and at 49 Hz, as a fleet's compactor might be asked to: the merge
// is refused, naming both periods, since one block states one period and
// either would weigh half of the samples wrong; blocks of one period merge.
func TestMergeBlocksKeepsPeriodsApart(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{Source: "host", PeriodNs: period99, BlockDuration: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-3 * time.Hour).Truncate(time.Hour).UnixNano()
	next := appendBurn(t, db, start, 10, period99)
	db.SetPeriod(period49) // cuts the head: a block at 99 Hz
	next = appendBurn(t, db, next, 10, period49)
	db.SetPeriod(period99) // a block at 49 Hz
	appendBurn(t, db, next+int64(time.Second), 10, period99)
	if err := db.Close(); err != nil { // the last block, at 99 Hz
		t.Fatal(err)
	}
	reader, err := Open(dir, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	byPeriod := map[int64][]string{}
	for _, b := range reader.blocks {
		byPeriod[b.Meta.PeriodNs] = append(byPeriod[b.Meta.PeriodNs], b.Meta.ID)
	}
	if len(byPeriod[period99]) < 2 || len(byPeriod[period49]) < 1 {
		t.Fatalf("blocks by period: %v, want two or more at 99 Hz and one or more at 49 Hz", byPeriod)
	}
	src := DirSource(dir)
	mixed := []string{byPeriod[period99][0], byPeriod[period49][0]}
	if _, err := MergeBlocks(context.Background(), src, mixed, t.TempDir()); err == nil ||
		!strings.Contains(err.Error(), fmt.Sprint(period99)) || !strings.Contains(err.Error(), fmt.Sprint(period49)) {
		t.Fatalf("merge of a 99 Hz and a 49 Hz block: %v, want an error naming both periods", err)
	}
	m, err := MergeBlocks(context.Background(), src, byPeriod[period99], t.TempDir())
	if err != nil || m.PeriodNs != period99 {
		t.Fatalf("merge of two 99 Hz blocks: period %d, %v", m.PeriodNs, err)
	}
}

// TestMergeBlocksKeepsClockShiftsApart: two imports into one source placed
// at wall time by different whole-second shifts do not merge (a block
// states one shift, by which the heatmap finds each sample's capture
// time); two of one shift do, and keep it.
func TestMergeBlocksKeepsClockShiftsApart(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{Source: "host"})
	if err != nil {
		t.Fatal(err)
	}
	base := time.Now().Add(-3 * time.Hour).Truncate(time.Hour).UnixNano()
	for i, shift := range []int64{1_795_237_000e9, 1_795_237_000e9, 1_795_237_001e9} {
		_, err := db.ImportWith("capture", ImportOptions{PeriodNs: period99, File: fmt.Sprint("file", i), ClockShift: shift},
			func(fn func(*sample.Sample) error) error {
				return fn(&sample.Sample{Time: base + int64(i)*int64(time.Minute), CPU: 0, PID: 7, TID: 7, Comm: "x"})
			})
		if err != nil {
			t.Fatal(err)
		}
	}
	byShift := map[int64][]string{}
	for _, b := range db.blocks {
		byShift[b.Meta.ClockShift] = append(byShift[b.Meta.ClockShift], b.Meta.ID)
	}
	db.Close()
	if len(byShift[1_795_237_000e9]) != 2 || len(byShift[1_795_237_001e9]) != 1 {
		t.Fatalf("blocks by clock shift: %v", byShift)
	}
	src := DirSource(dir)
	mixed := []string{byShift[1_795_237_000e9][0], byShift[1_795_237_001e9][0]}
	if _, err := MergeBlocks(context.Background(), src, mixed, t.TempDir()); err == nil || !strings.Contains(err.Error(), "clock shifts stay apart") {
		t.Fatalf("merge of two shifts: %v, want a refusal", err)
	}
	m, err := MergeBlocks(context.Background(), src, byShift[1_795_237_000e9], t.TempDir())
	if err != nil || m.ClockShift != 1_795_237_000e9 {
		t.Fatalf("merge of one shift: %+v, %v", m, err)
	}
}
