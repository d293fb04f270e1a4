package overhead

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/events"
)

// fixedSampler is a Sampler that only remembers its frequency: the guard's
// decisions are arithmetic on measured shares, tested here; the real
// frequency change is tested against the profiler (profiler and cmd tests).
type fixedSampler struct {
	hz  int
	err error
}

func (s *fixedSampler) Frequency() int { return s.hz }
func (s *fixedSampler) SetFrequency(hz int) error {
	if s.err != nil {
		return s.err
	}
	s.hz = hz
	return nil
}

// change is one "sampling frequency changed" log line.
type change struct {
	From   int    `json:"from_hz"`
	To     int    `json:"to_hz"`
	Reason string `json:"reason"`
}

// testGuard is a Guard on a fixedSampler whose log lines and episodes are
// kept.
type testGuard struct {
	*Guard
	s        *fixedSampler
	log      *bytes.Buffer
	episodes []Episode
}

func newTestGuard(t *testing.T, hz int, cfg Config) *testGuard {
	t.Helper()
	tg := &testGuard{s: &fixedSampler{hz: hz}, log: &bytes.Buffer{}}
	cfg.OnEpisode = func(e Episode) { tg.episodes = append(tg.episodes, e) }
	cfg.Logger = slog.New(slog.NewJSONHandler(tg.log, nil))
	g, err := New(cfg, tg.s, ProcessCPU)
	if err != nil {
		t.Fatal(err)
	}
	tg.Guard = g
	return tg
}

// changes returns the changes logged.
func (tg *testGuard) changes(t *testing.T) []change {
	t.Helper()
	var out []change
	for _, line := range strings.Split(strings.TrimSpace(tg.log.String()), "\n") {
		if line == "" {
			continue
		}
		var c struct {
			change
			Msg string `json:"msg"`
		}
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if c.Msg == "sampling frequency changed" {
			out = append(out, c.change)
		}
	}
	return out
}

func TestGuardSteps(t *testing.T) {
	// Budget 1%, target 99 Hz, floor 10 Hz, raise after 3 windows under 0.6%.
	tests := []struct {
		name   string
		shares []float64 // one per window
		want   []int     // frequency after each window
	}{
		{"under budget: no change", []float64{0.9, 0.5, 0.2, 0.7}, []int{99, 99, 99, 99}},
		{"over: halve to the floor", []float64{2, 2, 2, 2, 2}, []int{49, 24, 12, 10, 10}},
		{"raise only after three quiet windows", []float64{3, 0.1, 0.1, 0.1}, []int{49, 49, 49, 98}},
		{"a loud window restarts the count", []float64{3, 0.1, 0.1, 0.8, 0.1, 0.1, 0.1}, []int{49, 49, 49, 49, 49, 49, 98}},
		{"raise no further than the estimate allows", []float64{3, 3, 0.4, 0.4, 0.4}, []int{49, 24, 24, 24, 36}},
		{"raise at least one step, never past the target", []float64{3, 0.59, 0.59, 0.59, 0.01, 0.01, 0.01}, []int{49, 49, 49, 50, 50, 50, 99}},
		{"between the marks: hold", []float64{3, 0.7, 0.7, 0.7, 0.7}, []int{49, 49, 49, 49, 49}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newTestGuard(t, 99, Config{MaxCPU: 1})
			var got []int
			for _, share := range tt.shares {
				g.Observe(share)
				got = append(got, g.s.hz)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("frequencies %v, want %v", got, tt.want)
			}
			// Every change was counted and logged with its reason.
			n := 0
			prev := 99
			changes := g.changes(t)
			for _, hz := range got {
				if hz != prev {
					if n >= len(changes) {
						t.Fatalf("%d changes logged, want more: %v", len(changes), changes)
					}
					c := changes[n]
					if c.From != prev || c.To != hz || !strings.Contains(c.Reason, "budget") {
						t.Errorf("change %d = %+v, want %d -> %d with a reason naming the budget", n, c, prev, hz)
					}
					n++
					prev = hz
				}
			}
			if len(changes) != n || g.Changes() != uint64(n) {
				t.Errorf("%d changes logged, Changes() = %d, want %d", len(changes), g.Changes(), n)
			}
			if g.LastShare() != tt.shares[len(tt.shares)-1] {
				t.Errorf("LastShare() = %v, want %v", g.LastShare(), tt.shares[len(tt.shares)-1])
			}
		})
	}
}

func TestGuardFailedChangeIsNotCounted(t *testing.T) {
	g := newTestGuard(t, 99, Config{MaxCPU: 1})
	g.s.err = errors.New("ioctl failed")
	g.Observe(5)
	g.stopEpisode(time.Now())
	if g.s.hz != 99 || g.Changes() != 0 || len(g.changes(t)) != 0 || len(g.episodes) != 0 {
		t.Errorf("after a failed change: %d Hz, %d changes, %d logged, episodes %+v", g.s.hz, g.Changes(), len(g.changes(t)), g.episodes)
	}
}

func TestGuardConfig(t *testing.T) {
	if _, err := New(Config{MaxCPU: 0}, &fixedSampler{hz: 99}, ProcessCPU); err == nil {
		t.Error("a zero budget was accepted")
	}
	// A target under the default floor is its own floor.
	g := newTestGuard(t, 5, Config{MaxCPU: 1})
	g.Observe(50)
	if g.s.hz != 5 {
		t.Errorf("target 5 Hz was cut to %d Hz", g.s.hz)
	}
}

func TestProcessCPU(t *testing.T) {
	before, err := ProcessCPU()
	if err != nil {
		t.Fatal(err)
	}
	x := 0
	for i := range 50_000_000 {
		x += i ^ x
	}
	after, err := ProcessCPU()
	if err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Errorf("CPU time did not grow over a busy loop (%v -> %v, %d)", before, after, x)
	}
}

// TestGuardEpisodes: a busy machine's run of changes (cut, cut, then
// raised back in three steps) is one episode, reported once the rate is
// back at the target, with its rates, changes, lowest rate and duration;
// every change is still logged and counted. An episode that outlasts
// MaxEpisode is reported then and goes on as a continued one; the one
// open when the Guard stops is reported as stopped.
func TestGuardEpisodes(t *testing.T) {
	start := time.Date(2026, 11, 27, 16, 0, 0, 0, time.UTC)
	clock := func(g *testGuard) *time.Time {
		now := start
		g.now = func() time.Time { now = now.Add(10 * time.Second); return now }
		return &now
	}
	g := newTestGuard(t, 99, Config{MaxCPU: 1})
	clock(g)
	shares := []float64{2, 2, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.5, 0.5}
	for i, share := range shares {
		g.Observe(share)
		if i < 10 && len(g.episodes) != 0 {
			t.Fatalf("window %d (%d Hz): an episode was reported before the rate was back: %+v", i, g.s.hz, g.episodes)
		}
	}
	if n := len(g.changes(t)); n != 5 || g.Changes() != 5 || g.s.hz != 99 {
		t.Fatalf("%d changes logged, %d counted, %d Hz at the end; want 5, 5, 99 Hz", n, g.Changes(), g.s.hz)
	}
	if g.Lowest() != 24 {
		t.Errorf("Lowest() = %d after 99 -> 49 -> 24 -> ... -> 99 Hz, want 24 (record's summary prints it)", g.Lowest())
	}
	if len(g.episodes) != 1 {
		t.Fatalf("%d episodes, want 1: %+v", len(g.episodes), g.episodes)
	}
	ep := g.episodes[0]
	if ep.FromHz != 99 || ep.ToHz != 99 || ep.LowestHz != 24 || ep.Changes != 5 || !ep.Restored || ep.Stopped || ep.Continued ||
		!ep.Start.Equal(start.Add(10*time.Second)) || ep.End.Sub(ep.Start) != 100*time.Second || !strings.Contains(ep.Reason, "over the 1% budget") {
		t.Errorf("episode %+v: want 99 Hz -> 99 Hz, lowest 24, 5 changes over 100 s from the first window, restored", ep)
	}
	e := ep.Event()
	if err := e.Validate(); err != nil {
		t.Fatalf("event %+v: %v", e, err)
	}
	want := map[string]string{"kind": "overhead-guard", "from_hz": "99", "to_hz": "99", "lowest_hz": "24", "changes": "5", "duration_seconds": "100.000"}
	for k, v := range want {
		if e.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, e.Labels[k], v)
		}
	}
	if e.Time != ep.Start.UnixNano() || e.Severity != events.Warning || e.Source != "heatscope" || e.Kind() != events.KindOverheadGuard ||
		!strings.Contains(e.Text, "sampling frequency 99 Hz -> 99 Hz: 5 changes in 1m40s, lowest 24 Hz, back at the target; first change: agent CPU 2.000% of one CPU is over the 1% budget") {
		t.Errorf("event %+v", e)
	}

	// Held at 49 Hz (between the marks) for longer than MaxEpisode.
	g = newTestGuard(t, 99, Config{MaxCPU: 1, MaxEpisode: time.Minute})
	now := clock(g)
	for range 14 {
		g.Observe(map[bool]float64{true: 2, false: 0.7}[len(g.changes(t)) == 0])
	}
	g.stopEpisode(now.Add(5 * time.Second))
	if len(g.episodes) != 3 {
		t.Fatalf("held at 49 Hz for 140 s with episodes of at most 60 s: %d episodes, want 3: %+v", len(g.episodes), g.episodes)
	}
	first, second, last := g.episodes[0], g.episodes[1], g.episodes[2]
	if first.Changes != 1 || first.FromHz != 99 || first.ToHz != 49 || first.Restored || first.Continued || first.End.Sub(first.Start) != time.Minute {
		t.Errorf("first piece %+v", first)
	}
	if second.Changes != 0 || second.FromHz != 49 || second.ToHz != 49 || second.LowestHz != 49 || !second.Continued || !second.Start.Equal(first.End) ||
		second.End.Sub(second.Start) != time.Minute {
		t.Errorf("second piece %+v", second)
	}
	if !last.Stopped || !last.Continued || last.End.Sub(last.Start) != 15*time.Second {
		t.Errorf("last piece %+v", last)
	}
	if e := first.Event(); !strings.Contains(e.Text, "99 Hz -> 49 Hz: 1 change in 1m0s, lowest 49 Hz, still lowered") || e.Labels["continued"] != "" {
		t.Errorf("first piece's event %+v", e)
	}
	if e := second.Event(); e.Labels["continued"] != "true" || e.Severity != events.Notice || e.Validate() != nil ||
		!strings.Contains(e.Text, "49 Hz -> 49 Hz: 0 changes in 1m0s") {
		t.Errorf("second piece's event %+v", e)
	}
	if e := last.Event(); !strings.Contains(e.Text, "until the recording stopped") {
		t.Errorf("last piece's event %+v", e)
	}
}
