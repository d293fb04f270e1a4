package web

import (
	"encoding/json"
	"fmt"
	"net/url"
	"testing"
	"time"
)

// TestTimelineAtMostTheCPUs: the timeline of a 2-CPU node whose CPUs never
// idle holds at most 2 CPU-seconds per second in every step, the way the
// overview and /api/percpu count it, also with a filter on threads that
// keeps them all (comm=~.), and its total is the CPU time sampled in the
// steps. At 10 s steps the timeline answered from the blocks' 10 s
// summaries gave each sample its whole period in the step holding it, so
// a step whose first sample's period began in the step before (timer
// jitter, a rate change) held more than 20 CPU-seconds.
func TestTimelineAtMostTheCPUs(t *testing.T) {
	start := time.Unix(fleetStart/1e9, 0).Add(3300 * time.Millisecond)
	db := pinnedSynth(t, "node-a", start, 90)
	fx := newFixture(t, db, Options{})
	from, to := start.Add(-3300*time.Millisecond), start.Add(100*time.Second-3300*time.Millisecond)
	for _, step := range []string{"10s", "20s", "1s", "7s"} {
		for _, filter := range []string{"", "&comm=" + url.QueryEscape("~.")} {
			q := fmt.Sprintf("/api/timeline?node=node-a&from=%d&to=%d&step=%s%s", from.Unix(), to.Unix(), step, filter)
			resp, body := fx.get(t, q)
			mustOK(t, q, resp, body)
			var tl timelineJSON
			if err := json.Unmarshal(body, &tl); err != nil {
				t.Fatal(err)
			}
			var total float64
			for i, cpu := range tl.CPU {
				total += cpu
				if cpu > 2*tl.Step+1e-9 {
					t.Errorf("%s: step %d (%.3f): %.6f CPU-seconds in %g s on 2 CPUs", q, i, tl.Start+float64(i)*tl.Step, cpu, tl.Step)
				}
			}
			// 90 s of two CPUs never idle (less the idle share's
			// few samples), each CPU's first sample's period before start.
			if total < 2*90*0.99 || total > 2*90.1 {
				t.Errorf("%s: %.4f CPU-seconds in all, want about 180", q, total)
			}
		}
	}
}
