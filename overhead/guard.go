// Package overhead keeps the agent's own CPU cost under a budget: a Guard
// measures the agent's CPU time (its process plus the BPF program's run
// time, which the kernel charges to the sampled tasks, not to the agent)
// over a window, halves the sampling frequency when the cost is over the
// budget and raises it again, step by step, once the cost has stayed well
// under it.
//
// Hysteresis keeps it from flapping: a raise needs RaiseAfter windows in a
// row under LowWater of the budget (with the cost's parts known: in which
// the cost predicted at a higher rate stays under HighWater), and only goes
// as far as that prediction allows. Without the cost's parts a cut happens
// at once: being over the budget is what operators complain about. With
// them the Guard acts on evidence (evidence.go): not on the first windows
// (start-up), not on one window over the budget unless the samples alone
// are over it, and a cut that did not buy what it was made for is undone
// and not made again for that reason. It predicts the cost at another
// rate by what it has learned from its windows of each part's cost per Hz
// (slope.go), and does not try again a rate it cut from until its windows
// show that rate to fit (ceiling.go).
//
// Every change is logged (and counted in Changes); a run of changes, from
// the first away from the target until the rate is back, is one Episode,
// reported once (Config.OnEpisode), so that a busy machine's many changes
// make one event rather than dozens.
package overhead

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Sampler is what the Guard adjusts: the recorder.
type Sampler interface {
	Frequency() int
	SetFrequency(hz int) error
}

// CPUMeter returns the agent's cumulative CPU time so far.
type CPUMeter func() (time.Duration, error)

// Config configures a Guard. Zero fields take their defaults.
type Config struct {
	// MaxCPU is the budget in percent of one CPU (1 = 1%). It must be
	// positive.
	MaxCPU float64
	// TargetFrequency is the frequency the Guard raises back to, never
	// beyond (the --frequency asked for).
	TargetFrequency int
	// MinFrequency is the floor of a cut (default: MinFrequencyDefault or
	// TargetFrequency, whichever is lower).
	MinFrequency int
	// Window is how long the cost is measured over before each decision
	// (default 10 s).
	Window time.Duration
	// LowWater is the share of the budget under which the cost must stay
	// for a raise (default 0.6).
	LowWater float64
	// RaiseAfter is how many windows in a row must be under LowWater
	// before a raise (default 3).
	RaiseAfter int
	// Busy, when not nil, measures the time spent serving queries: the
	// Guard judges the rest of the time, the sampling path's cost, and
	// decides only once it has seen a whole Window of that rest (however
	// many windows of browsing it takes), so that a second of sampling
	// work between two queries is never judged as if it were a window.
	Busy *Busy
	// Warmup is how long after Run starts the first window begins
	// (default 10 s): start-up work (symbols read for the first
	// processes, caches filled) is not what the agent costs.
	Warmup time.Duration
	// OnEpisode, when not nil, is called with each episode of changes
	// when it ends: when the rate is back at TargetFrequency, when it has
	// lasted MaxEpisode (it goes on as a continued episode), or when Run
	// returns (e.g. to record it as an event).
	OnEpisode func(Episode)
	// MaxEpisode bounds an episode's length, so that a rate lowered for
	// hours shows while it is (default DefaultMaxEpisode).
	MaxEpisode time.Duration
	// Logger receives every change (default slog.Default()).
	Logger *slog.Logger
	// Shedder, when not nil, is work the Guard gives up the first time
	// the cost is over the budget, instead of halving the frequency (it
	// halves it at the next window over the budget), and takes up again
	// once the cost has stayed low at the target frequency (shed.go).
	Shedder Shedder
	// OnShed, when not nil, is called each time the Guard gives the
	// Shedder's work up or takes it up again (e.g. to record it as an
	// event).
	OnShed func(Shedding)
	// Parts, when not nil, returns the CPU time so far of the agent's
	// work, by part (parts.go): the samples' own path, which falls with
	// the sampling rate, and work that does not; work done in bursts is
	// judged spread over the time it serves (Part.Spreads):
	// every decision then says what the cost was made of, and a cost
	// over the budget that is mostly work a lower rate does not reduce
	// keeps the rate (Kept).
	Parts func() []Part
	// OnKept, when not nil, is called at the first window of each run of
	// windows over the budget in which the rate was kept (e.g. to record
	// it as an event).
	OnKept func(Kept)
	// OneOffSpread is how long the Guard judges work done once and kept
	// (Part.OneOff) spread over (default DefaultOneOffSpread).
	OneOffSpread time.Duration
	// StartupWindows is how many of the first judged windows are taken
	// as start-up (default DefaultStartupWindows): over the budget, the
	// Guard neither gives up work nor lowers the rate in them, unless
	// what falls with the rate is over the budget by itself
	// (evidence.go).
	StartupWindows int
	// HighWater is the share of the budget under which the cost predicted
	// at a higher rate (its parts known: what falls with the rate scaled,
	// the rest as measured) must stay for a raise (default 0.9).
	HighWater float64
}

// DefaultOneOffSpread is how long work done once and kept is judged
// spread over (Config.OneOffSpread): the 2 minutes a block of the store
// holds, over which its write is judged too. A new binary's unwind table,
// compiled in 30 ms (python3's, 65 000 rows) in a 10 s window beside an
// agent steady at 0.7% of one CPU, was a window over the 1% budget that
// gave up young processes' tables for the rest of a 10-minute run; spread
// over 2 minutes it is 0.025%. A table compiled in 1 s (a 150 MB Go
// binary's) is still 0.8% over them.
const DefaultOneOffSpread = 2 * time.Minute

// Defaults.
const (
	MinFrequencyDefault = 10
	defaultWindow       = 10 * time.Second
	defaultWarmup       = 10 * time.Second
	// judgedShare is the share of a Window of time spent not serving
	// queries that the Guard must have seen to decide (a little under 1:
	// a late tick shortens the next window).
	judgedShare       = 0.9
	defaultLowWater   = 0.6
	defaultHighWater  = 0.9
	defaultRaiseAfter = 3
	// DefaultStartupWindows is Config.StartupWindows' default: with
	// record's 5 s warm-up and 10 s windows, the first 35 s. Case b of
	// the churn benchmark (quiet machine, 99 Hz) cost 1.30% of one CPU
	// in its first two windows (the BPF programs' load, the first
	// processes' symbols and tables, the collections their garbage
	// brings) and 0.74% from then on.
	DefaultStartupWindows = 3
)

// Guard adjusts a Sampler's frequency to keep the agent's CPU under the
// budget. Its counters are safe to read while Run runs.
type Guard struct {
	cfg     Config
	sampler Sampler
	meter   CPUMeter
	quiet   int // windows in a row under LowWater
	// episode is the open episode of changes, nil when the rate is at
	// the target; now is the clock episodes are timed by.
	episode *Episode
	now     func() time.Time

	changes atomic.Uint64
	judged  atomic.Uint64
	// lowest is the lowest frequency the Guard set (0 before a change).
	lowest atomic.Int64
	// shed is whether the Shedder's work is given up now (shedNow for
	// other goroutines), shedWhat what it is, sheds how many times it
	// was given up.
	shed     bool
	shedNow  atomic.Bool
	shedWhat string
	sheds    atomic.Uint64 // windows judged
	// lastShare is the last window's cost in percent of one CPU (as
	// float64 bits).
	lastShare atomic.Uint64
	// keeping is set while windows over the budget keep the rate (Kept);
	// kept counts the runs of them.
	keeping bool
	kept    atomic.Uint64
	// oneOffs spreads the parts of work done once and kept, by name
	// (Part.OneOff); only Run's goroutine uses it.
	oneOffs map[string]*oneOff
	// evidence is what the Guard has seen of its windows and cuts
	// (evidence.go).
	evidence
	// model is what the Guard has learned of each part's cost per Hz
	// (slope.go); learned is its last slopes for Slopes, under slopesMu.
	model    rateModel
	slopesMu sync.Mutex
	learned  []PartSlope
	// recent are the last RaiseAfter windows' costs: a raise goes only
	// as far as the dearest of them allows.
	recent []recentCost
	// ceilings are the rates cut from (ceiling.go).
	ceilings
}

// New returns a Guard for sampler, measuring with meter.
func New(cfg Config, sampler Sampler, meter CPUMeter) (*Guard, error) {
	if !(cfg.MaxCPU > 0) {
		return nil, fmt.Errorf("overhead budget %v%%: must be positive", cfg.MaxCPU)
	}
	if cfg.TargetFrequency <= 0 {
		cfg.TargetFrequency = sampler.Frequency()
	}
	if cfg.MinFrequency <= 0 {
		cfg.MinFrequency = min(MinFrequencyDefault, cfg.TargetFrequency)
	}
	if cfg.Window <= 0 {
		cfg.Window = defaultWindow
	}
	if cfg.Warmup < 0 {
		cfg.Warmup = 0
	} else if cfg.Warmup == 0 {
		cfg.Warmup = defaultWarmup
	}
	if cfg.LowWater <= 0 || cfg.LowWater >= 1 {
		cfg.LowWater = defaultLowWater
	}
	if cfg.HighWater <= 0 || cfg.HighWater > 1 {
		cfg.HighWater = defaultHighWater
	}
	if cfg.StartupWindows < 0 {
		cfg.StartupWindows = 0
	} else if cfg.StartupWindows == 0 {
		cfg.StartupWindows = DefaultStartupWindows
	}
	if cfg.RaiseAfter <= 0 {
		cfg.RaiseAfter = defaultRaiseAfter
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxEpisode <= 0 {
		cfg.MaxEpisode = DefaultMaxEpisode
	}
	if cfg.OneOffSpread <= 0 {
		cfg.OneOffSpread = DefaultOneOffSpread
	}
	return &Guard{cfg: cfg, sampler: sampler, meter: meter, now: time.Now, oneOffs: map[string]*oneOff{}}, nil
}

// Run measures every Window until ctx is done. The first window starts
// Warmup after Run does, so start-up (loading kernel symbols, reading the
// first processes' binaries) is not counted. When it returns, the open
// episode, if any, is reported.
func (g *Guard) Run(ctx context.Context) error {
	if _, err := g.meter(); err != nil {
		return fmt.Errorf("overhead guard: %w", err)
	}
	defer func() { g.stopEpisode(g.now()) }()
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(g.cfg.Warmup):
	}
	prev, err := g.meter()
	if err != nil {
		return fmt.Errorf("overhead guard: %w", err)
	}
	prevAt := time.Now()
	prevParts := g.spreadOneOffs(g.parts(), prevAt)
	var judgedParts []Part
	prevBusyWall, prevBusyCPU := g.busy(prevAt, prev)
	// The time outside queries, and the CPU spent in it, since the last
	// decision.
	var judgedWall, judgedCPU time.Duration
	t := time.NewTicker(g.cfg.Window)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			cpu, err := g.meter()
			if err != nil {
				g.cfg.Logger.Warn("overhead guard: cannot measure the agent's CPU", "err", err)
				continue
			}
			// The time the meter was read, not the tick's: on a busy
			// machine this goroutine may run well after its tick.
			now := time.Now()
			busyWall, busyCPU := g.busy(now, cpu)
			servingWall, servingCPU := busyWall-prevBusyWall, busyCPU-prevBusyCPU
			outsideWall, outsideCPU := now.Sub(prevAt)-servingWall, cpu-prev-servingCPU
			judgedWall += outsideWall
			judgedCPU += outsideCPU
			nowParts := g.spreadOneOffs(g.parts(), now)
			judgedParts = addParts(judgedParts, prevParts, nowParts)
			prev, prevAt, prevBusyWall, prevBusyCPU, prevParts = cpu, now, busyWall, busyCPU, nowParts
			judging := judgedWall >= time.Duration(judgedShare*float64(g.cfg.Window))
			g.cfg.Logger.Debug("overhead guard: window", "outside_queries", outsideWall, "cpu_outside_queries", outsideCPU,
				"serving", servingWall, "serving_cpu", servingCPU, "judged", judging)
			if !judging {
				continue // the next window adds to it
			}
			// Work done in bursts is judged spread over the time it
			// serves (Part.Spreads), and work done once and kept over
			// OneOffSpread (Part.OneOff), not in the window it fell in.
			share := 100 * max(0, judgedCPU+spreadAdjustment(judgedParts)).Seconds() / judgedWall.Seconds()
			cost := Cost{Share: share, Parts: partShares(judgedParts, judgedWall)}
			g.cfg.Logger.Debug("overhead guard: judged", "share_pct", share, "outside_queries", judgedWall, "cpu_outside_queries", judgedCPU,
				"parts", cost.split())
			judgedWall, judgedCPU, judgedParts = 0, 0, judgedParts[:0]
			g.observe(cost)
		}
	}
}

// busy returns the wall and CPU time spent serving queries so far (0
// without Config.Busy).
func (g *Guard) busy(now time.Time, cpu time.Duration) (wall, busyCPU time.Duration) {
	if g.cfg.Busy == nil {
		return 0, 0
	}
	return g.cfg.Busy.totals(now, cpu)
}

// parts returns Config.Parts' CPU times so far (nil without it).
func (g *Guard) parts() []Part {
	if g.cfg.Parts == nil {
		return nil
	}
	return g.cfg.Parts()
}

// Observe takes one window's cost, in percent of one CPU, and changes the
// frequency if the cost calls for it.
func (g *Guard) Observe(share float64) { g.observe(Cost{Share: share}) }

// observe takes one window's cost and what it was made of, and gives up
// work, keeps the rate or changes it, as the cost calls for.
func (g *Guard) observe(cost Cost) {
	share := cost.Share
	g.lastShare.Store(math.Float64bits(share))
	g.judged.Add(1)
	now := g.now()
	g.cutEpisode(now)
	cur := g.sampler.Frequency()
	if share <= g.cfg.MaxCPU {
		g.keeping = false // a run of windows that kept the rate ends
	}
	if len(cost.Parts) > 0 {
		cost = g.learn(cur, cost)
	}
	overLast := g.overLast
	g.overLast = share > g.cfg.MaxCPU
	if g.judgeTrial(now, cur, cost) || g.waits(cost, overLast) {
		return
	}
	acted := g.shedFirst(now, cur, cost)
	g.shedNow.Store(g.shed)
	if acted {
		return
	}
	if g.keepRate(now, cur, cost) {
		return
	}
	next, reason := g.decide(now, cur, cost)
	if next == cur {
		return
	}
	if err := g.sampler.SetFrequency(next); err != nil {
		g.cfg.Logger.Error("overhead guard: cannot change the sampling frequency", "from_hz", cur, "to_hz", next, "err", err)
		return
	}
	g.changes.Add(1)
	if low := g.lowest.Load(); low == 0 || int64(next) < low {
		g.lowest.Store(int64(next))
	}
	if len(cost.Parts) > 0 {
		g.ceilings.noteRate(now, cur, next, share)
	}
	if next < cur && len(cost.Parts) > 0 {
		// A trial, judged on the next window (judgeTrial).
		g.trial = &trial{from: cur, to: next, before: cost, promised: cost.Share - cost.at(cur, next)}
	}
	g.cfg.Logger.Info("sampling frequency changed", "from_hz", cur, "to_hz", next, "reason", reason)
	g.noteChange(now, cur, next, reason)
}

// keepRate reports whether a window over the budget keeps the rate: what a
// lower rate does not reduce is over the budget alone and most of the cost
// (Cost.rateBound), or a cut was undone for buying nothing (evidence.go)
// and what falls with the rate has not grown since. The first such window
// of a run is logged and reported (Config.OnKept).
func (g *Guard) keepRate(now time.Time, cur int, cost Cost) bool {
	if cost.Share <= g.cfg.MaxCPU {
		return false
	}
	held := g.holds(now, cur, cost)
	if !held && cost.rateBound(cur, g.cfg.MinFrequency, g.cfg.MaxCPU) {
		return false
	}
	g.quiet = 0
	if !g.keeping {
		g.keeping = true
		g.kept.Add(1)
		k := Kept{At: now, Hz: cur, Cost: cost, Budget: g.cfg.MaxCPU}
		msg := "overhead guard: over the budget, most of it work a lower sampling rate does not reduce: the rate stays"
		if held {
			k.Why = g.held.why
			msg = "overhead guard: over the budget, but a lower sampling rate did not reduce it: the rate stays"
		}
		g.cfg.Logger.Warn(msg, "hz", cur, "reason", cost.over(g.cfg.MaxCPU))
		if g.cfg.OnKept != nil {
			g.cfg.OnKept(k)
		}
	}
	return true
}

// RateKept returns how many runs of windows over the budget kept the rate
// (Kept).
func (g *Guard) RateKept() uint64 { return g.kept.Load() }

// decide returns the frequency for the next window and why.
func (g *Guard) decide(now time.Time, cur int, cost Cost) (int, string) {
	budget := g.cfg.MaxCPU
	share := cost.Share
	switch {
	case share > budget:
		// Half the rate, never under the floor: one step a window, as
		// the cost's split is an estimate (a window after the start or
		// a burst of new binaries cut straight to the floor on it).
		// With the parts known, no further than the rate at which the
		// cost predicted stays under HighWater of the budget, where a
		// raise stops too: case b at 99 Hz, 1.09% of one CPU of which
		// 0.67% falls with the rate, fits at 70 Hz, where a halving
		// lost 30% of the samples more and stayed at 49 Hz.
		g.quiet = 0
		next := cur / 2
		if fit, ok := cost.fitRate(cur, g.cfg.HighWater*budget); ok && len(cost.Parts) > 0 {
			next = max(next, min(fit, cur-1))
		}
		next = max(next, g.cfg.MinFrequency)
		reason := cost.over(budget)
		if len(cost.Parts) > 0 {
			reason += fmt.Sprintf("; %.3f%% predicted at %d Hz (%s)", cost.at(cur, next), next, g.model.saySlopes(cost.slopes))
		}
		return next, reason
	case len(cost.Parts) > 0 && share <= budget && cur < g.cfg.TargetFrequency:
		// The cost's parts known: raise while the cost predicted at a
		// higher rate (what falls with the rate by the slopes learned,
		// scaled to it; the rest as measured) stays under HighWater of
		// the budget, at most doubling. A cut whose cost ended by itself
		// (a start-up, a burst) comes back so, even where the cost stays
		// over the low-water mark (case b at 49 Hz: 0.74% of one CPU).
		fit, ok := cost.fitRate(cur, g.cfg.HighWater*budget)
		if !ok || fit <= cur {
			g.quiet = 0
			return cur, ""
		}
		g.quiet++
		if g.quiet < g.cfg.RaiseAfter {
			return cur, ""
		}
		return g.raise(now, cur, cost)
	case share < g.cfg.LowWater*budget && cur < g.cfg.TargetFrequency:
		g.quiet++
		if g.quiet < g.cfg.RaiseAfter {
			return cur, ""
		}
		g.quiet = 0
		// Raise as far as the cost, scaled to the new rate (its parts
		// not known: it grows at most in proportion to the rate), stays
		// under the low-water mark, at most doubling, and at least by
		// one step.
		next := 2 * cur
		if share > 0 {
			next = min(next, int(math.Floor(float64(cur)*g.cfg.LowWater*budget/share+1e-9)))
		}
		next = min(max(next, cur+1), g.cfg.TargetFrequency)
		return next, fmt.Sprintf("agent CPU %.3f%% of one CPU has stayed under %.0f%% of the %.3g%% budget",
			share, 100*g.cfg.LowWater, budget)
	default:
		g.quiet = 0
		return cur, ""
	}
}

// Changes returns how many times the Guard has changed the frequency.
func (g *Guard) Changes() uint64 { return g.changes.Load() }

// Lowest returns the lowest frequency the Guard has set, 0 before its
// first change.
func (g *Guard) Lowest() int { return int(g.lowest.Load()) }

// Judged returns how many windows the Guard has judged.
func (g *Guard) Judged() uint64 { return g.judged.Load() }

// LastShare returns the last window's cost in percent of one CPU (0
// before the first window).
func (g *Guard) LastShare() float64 { return math.Float64frombits(g.lastShare.Load()) }

// ProcessCPU returns this process's user and system CPU time.
func ProcessCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
