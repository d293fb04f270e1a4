package overview

import (
	"slices"
	"testing"
	"time"

	"github.com/heatscope/heatscope/store"
)

// TestLadder: the steps asked in columns come from the ladder; every
// ladder step at or above an overview's warm step is a whole multiple of
// it; a day at 362 columns (the UI at 1300 px) is 4 min a column, warm at
// 2 min, and 100 px narrower 6 min, served by the same warm cells.
func TestLadder(t *testing.T) {
	day := int64(24 * time.Hour)
	r := store.Range{From: 20000 * day, To: 20001 * day}
	for _, c := range []struct {
		cols       int
		step, warm time.Duration
	}{
		{362, 4 * time.Minute, 2 * time.Minute},
		{329, 6 * time.Minute, 2 * time.Minute},
		{720, 2 * time.Minute, 2 * time.Minute},
		{200, 10 * time.Minute, 10 * time.Minute},
		{100, 20 * time.Minute, 10 * time.Minute},
		{1, 24 * time.Hour, 24 * time.Hour},
	} {
		step := Step(r, c.cols)
		if step != int64(c.step) || WarmStep(step) != int64(c.warm) {
			t.Errorf("a day in %d columns: step %v, warm %v; want %v, %v", c.cols, time.Duration(step),
				time.Duration(WarmStep(step)), c.step, c.warm)
		}
	}
	for _, d := range Ladder {
		warm := WarmStep(int64(d))
		if warm%int64(10*time.Second) != 0 || warm > int64(d) {
			t.Errorf("step %v: warm step %v", d, time.Duration(warm))
		}
		for _, coarser := range append(slices.Clone(Ladder), 48*time.Hour, 7*24*time.Hour) {
			if coarser >= d && int64(coarser)%warm != 0 {
				t.Errorf("step %v is not a multiple of %v, the warm step of %v", coarser, time.Duration(warm), d)
			}
		}
	}
	// A week in 3 columns: whole days, and no more columns than asked
	// once aligned; a range across a day's end in one column.
	for _, c := range []struct {
		r    store.Range
		cols int
	}{{store.Range{From: 20000*day + 1, To: 20007 * day}, 3}, {store.Range{From: 20001*day - 60e9, To: 20001*day + 60e9}, 1}} {
		step := Step(c.r, c.cols)
		if step%day != 0 || Columns(Align(c.r, step), step) > int64(c.cols) {
			t.Errorf("%v in %d columns: step %v", c.r, c.cols, time.Duration(step))
		}
	}
}
