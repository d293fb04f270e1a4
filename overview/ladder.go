package overview

import (
	"time"

	"github.com/heatscope/heatscope/store"
)

// MaxColumns bounds the columns of an overview.
const MaxColumns = 2000

// Ladder is the steps an overview asked in columns is drawn at; past its
// last, whole days. Each is a whole multiple of the steps below it down to
// the warm step of any overview using it (WarmStep), so cells warm at that
// step serve every coarser one: a narrower window, a longer range.
var Ladder = []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute,
	4 * time.Minute, 6 * time.Minute, 10 * time.Minute, 20 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour,
	3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour}

// Step is the step of an overview of r in at most cols columns (once r is
// aligned to it, Align): the shortest of Ladder, else whole days.
func Step(r store.Range, cols int) int64 {
	fits := func(step int64) bool { return Columns(Align(r, step), step) <= int64(cols) }
	for _, d := range Ladder {
		if step := int64(d); fits(step) {
			return step
		}
	}
	day := int64(24 * time.Hour)
	step := (r.To - r.From + int64(cols)*day - 1) / (int64(cols) * day) * day
	for !fits(step) {
		// Aligning added a step at an end.
		step += day
	}
	return step
}

// Align widens r to whole steps of step from time 0: the ranges whose
// cells the warming keeps (phase 0).
func Align(r store.Range, step int64) store.Range {
	return store.Range{From: r.From / step * step, To: (r.To + step - 1) / step * step}
}

// Columns is how many steps of step cover r, the last maybe partial.
func Columns(r store.Range, step int64) int64 { return (r.To - r.From + step - 1) / step }

// WarmStep is the step to keep warm for overviews at step (from Step) and
// coarser: the greatest common divisor of step and every longer step of
// Ladder, which divides them all. 4 min, 6 min, 10 min, … have 2 min.
func WarmStep(step int64) int64 {
	day := int64(24 * time.Hour)
	if step >= day {
		return day
	}
	warm := step
	for _, d := range Ladder {
		if int64(d) > step {
			warm = gcd(warm, int64(d))
		}
	}
	return warm
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
