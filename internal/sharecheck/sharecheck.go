// Package sharecheck checks, for tests, the fleet overview's busy shares
// of one node against /api/percpu over the same columns: at most 1, and
// the busiest CPU's CPU time over the wall time each column covers.
package sharecheck

import (
	"math"
	"net/url"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/apitest"
	"github.com/heatscope/heatscope/overview"
	"github.com/heatscope/heatscope/query"
)

// Steps are the steps the shares are checked at: steps that are not
// whole 10 s (the samples are scanned, from any phase) and steps that are
// (read from the blocks' per-CPU summaries).
var Steps = []time.Duration{time.Second, 7 * time.Second, 10 * time.Second, 13 * time.Second, 20 * time.Second}

// Trimmed says, per CPU and column of step from start, the CPU time in
// seconds that spreading trims from the samples in the column: a sample
// weighs its period but stands for no time before the same CPU's previous
// sample (store.Since).
type Trimmed func(start time.Time, step time.Duration, columns int) map[uint32][]float64

// Shares asks the overview of node over [from, to) (whole milliseconds)
// from the server at base at every step of Steps, and /api/percpu over
// the same columns, and checks each cell:
//   - the busiest CPU's share is at most 1;
//   - where the samples are scanned (steps not whole 10 s), it is that
//     CPU's CPU time in /api/percpu over the wall time the column covers
//     (the step, or the partial column's seconds), to the share's
//     rounding, and no CPU's share in /api/percpu is above it;
//   - where the summaries answer (whole 10 s steps: each sample whole in
//     its 10 s), it is no less than /api/percpu's share of any CPU less a
//     sampling period (maxPeriod) at the column's edges, and, when trimmed
//     is given, no more than /api/percpu's for that CPU plus that period
//     and the time trimmed says /api/percpu trims (a late timer interrupt
//     then one on time; the first samples after the rate is raised).
//
// It returns the highest share seen.
func Shares(t testing.TB, base, node string, from, to time.Time, maxPeriod time.Duration, trimmed Trimmed) float64 {
	t.Helper()
	highest := 0.0
	for _, step := range Steps {
		q := url.Values{"node": {node}, "step": {step.String()}, "from": {from.Format(time.RFC3339Nano)}, "to": {to.Format(time.RFC3339Nano)}}
		var ov overview.Overview
		apitest.GetJSON(t, base+"/api/fleet/overview?"+q.Encode(), &ov)
		if len(ov.Nodes) != 1 {
			t.Fatalf("step %v: %d nodes, want %s alone", step, len(ov.Nodes), node)
		}
		n := ov.Nodes[0]
		start := time.UnixMilli(int64(math.Round(ov.Start * 1e3)))
		end := start.Add(time.Duration(ov.Columns) * step)
		q.Set("from", start.Format(time.RFC3339Nano))
		q.Set("to", end.Format(time.RFC3339Nano))
		var pc query.PerCPU
		apitest.GetJSON(t, base+"/api/percpu?"+q.Encode(), &pc)
		covers := map[int]float64{}
		for _, p := range n.Partial {
			covers[p.Column] = p.Seconds
		}
		summary := step%(10*time.Second) == 0
		var trims map[uint32][]float64
		if summary && trimmed != nil {
			trims = trimmed(start, step, ov.Columns)
		}
		for i := range ov.Columns {
			secs, partial := covers[i]
			if !partial {
				secs = step.Seconds()
			}
			const rounding = 1e-4 + 1e-9
			edge := 0.0
			if summary {
				edge = maxPeriod.Seconds() / secs
			}
			highest = max(highest, n.Busiest[i])
			if n.Busiest[i] > 1 {
				t.Errorf("%s step %v column %d (%s): busiest CPU %d %.4f busy, more than the whole column (%.3f s of %v covered)",
					node, step, i, start.Add(time.Duration(i)*step).UTC().Format(time.RFC3339), n.BusiestCPU[i], n.Busiest[i], secs, step)
			}
			for j, cpu := range pc.CPUs {
				share := pc.CPU[j][i] / secs
				if share > n.Busiest[i]+rounding+edge {
					t.Errorf("%s step %v column %d: /api/percpu has CPU %d %.5f busy (%.6f s over %.3f s), above the overview's busiest %.4f (CPU %d)",
						node, step, i, cpu, share, pc.CPU[j][i], secs, n.Busiest[i], n.BusiestCPU[i])
				}
				if int32(cpu) != n.BusiestCPU[i] || summary && trimmed == nil {
					continue
				}
				tol := rounding
				if summary {
					tol += edge + trims[cpu][i]/secs
				}
				if math.Abs(share-n.Busiest[i]) > tol {
					t.Errorf("%s step %v column %d: busiest CPU %d %.4f busy in the overview, %.5f in /api/percpu (%.6f s over %.3f s; tolerance %.5f)",
						node, step, i, cpu, n.Busiest[i], share, pc.CPU[j][i], secs, tol)
				}
			}
		}
	}
	return highest
}
