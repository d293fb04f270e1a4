package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/cilium/ebpf"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/heatscope/heatscope/events"
	"github.com/heatscope/heatscope/metrics"
	"github.com/heatscope/heatscope/overhead"
	"github.com/heatscope/heatscope/recorder"
	"github.com/heatscope/heatscope/store"
)

// aliveWithin is how recently the recorder must have read its ring for
// /healthz to say it is healthy: many poll intervals, so that a busy
// machine does not make it flap.
const aliveWithin = 10 * time.Second

// guarded is an overhead guard with what it needs released at the end.
type guarded struct {
	*overhead.Guard
	bpfStats io.Closer // nil when --bpf-stats or nobody turned them on
	// busy hears of the requests record's own server serves: their CPU
	// is not the sampling path's.
	busy *overhead.Busy
}

// guardWarmup is how long after recording starts the guard's first window
// begins: the first processes' binaries are read then.
const guardWarmup = 5 * time.Second

// newGuard returns the overhead guard of --max-cpu. It counts the BPF
// program's run time, which the kernel charges to the sampled tasks, when
// the kernel keeps it: it turns kernel.bpf_stats_enabled on for as long as
// heatscope runs if it may (CAP_SYS_ADMIN), and otherwise counts the agent's
// own CPU only, saying so.
//
// Each episode of frequency changes (from the first change away from
// --frequency until the rate is back) is also one system event in db
// (when recording to one), so the timeline shows where the sampling rate
// was lowered without a mark per change.
func newGuard(rec *recorder.Recorder, db *store.DB, maxCPU float64, statsOn bool) (*guarded, error) {
	g := &guarded{}
	if !statsOn {
		closer, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
		if err != nil {
			slog.Warn("--max-cpu counts the agent's own CPU but not its BPF program's run time: "+
				"turning on kernel.bpf_stats_enabled needs CAP_SYS_ADMIN (or set it with sysctl)", "err", err)
		} else {
			g.bpfStats = closer
		}
	}
	meter := func() (time.Duration, error) {
		cpu, err := overhead.ProcessCPU()
		if err != nil {
			return 0, err
		}
		st, err := rec.Stats()
		if err != nil {
			return 0, err
		}
		return cpu + st.BPFRunTime + st.ExitRunTime, nil
	}
	g.busy = overhead.NewBusy(meter)
	guard, err := overhead.New(overhead.Config{MaxCPU: maxCPU, OnEpisode: storedEvents[overhead.Episode](db, "the overhead guard's episode of frequency changes"), Busy: g.busy, Warmup: guardWarmup,
		Shedder: rec, OnShed: storedEvents[overhead.Shedding](db, "the overhead guard's shedding of work"),
		Parts: rec.Parts, OnKept: storedEvents[overhead.Kept](db, "the overhead guard's keeping of the rate")}, rec, meter)
	if err != nil {
		g.close()
		return nil, fmt.Errorf("--max-cpu: %w", err)
	}
	g.Guard = guard
	return g, nil
}

// storedEvents returns a guard's callback that records each report (an
// episode of frequency changes, work given up, the rate kept) as a system
// event in db, or nil without a db.
func storedEvents[T interface{ Event() events.Event }](db *store.DB, what string) func(T) {
	if db == nil {
		return nil
	}
	return func(r T) {
		if err := db.AppendEvent(r.Event()); err != nil {
			slog.Warn("store "+what+" as an event", "err", err)
		}
	}
}

// close turns the BPF statistics back off; calling it again does nothing.
func (g *guarded) close() {
	if g.bpfStats != nil {
		g.bpfStats.Close()
		g.bpfStats = nil
	}
}

// runGuard runs the guard until ctx is done or the returned function is
// called.
func runGuard(ctx context.Context, g *guarded) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := g.Run(ctx); err != nil {
			slog.Error("overhead guard stopped", "err", err)
		}
	}()
	return func() { cancel(); <-done }
}

// recorderMetrics returns the metrics of a recording: the sampler's,
// symbolizer's and store's counters, the guard's changes, the process's.
func recorderMetrics(rec *recorder.Recorder, db *store.DB, g *guarded, kmsg *events.KmsgSource) (*metrics.Metrics, error) {
	m := metrics.New()
	var changes func() uint64
	if g != nil {
		changes = g.Changes
	}
	if err := m.RegisterRecorder(rec, changes); err != nil {
		return nil, err
	}
	if err := m.Register(workCollector{rec}); err != nil {
		return nil, err
	}
	if g != nil {
		collections := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "heatscope_guard_query_collections_total",
			Help: "Bursts of queries whose garbage was collected before the overhead guard measured the sampling path again."},
			func() float64 { return float64(g.busy.Collections()) })
		judged := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "heatscope_guard_windows_judged_total",
			Help: "Windows of the agent's CPU the overhead guard has judged (a window is a --max-cpu decision's worth of time outside queries)."},
			func() float64 { return float64(g.Judged()) })
		share := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "heatscope_guard_agent_cpu_percent",
			Help: "The agent's CPU in the overhead guard's last judged window, queries left out, in percent of one CPU (the BPF program's run time included when the kernel keeps it)."},
			g.LastShare)
		shedding := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "heatscope_guard_work_shed",
			Help: "1 while the overhead guard has given up work to stay within --max-cpu before lowering the sampling rate (unwind tables not loaded yet: their processes' stacks walked with frame pointers), else 0."},
			func() float64 { return map[bool]float64{true: 1}[g.Shedding()] })
		sheds := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "heatscope_guard_work_sheds_total",
			Help: "Times the overhead guard gave up work to stay within --max-cpu before lowering the sampling rate."},
			func() float64 { return float64(g.Sheds()) })
		kept := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "heatscope_guard_rate_kept_total",
			Help: "Runs of windows over --max-cpu in which the overhead guard kept the sampling rate: most of the cost was work a lower rate does not reduce (new processes, symbol and unwind tables, the Go runtime), or a cut of the rate had bought nothing and was undone."},
			func() float64 { return float64(g.RateKept()) })
		undone := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "heatscope_guard_cuts_undone_total",
			Help: "Cuts of the sampling rate the overhead guard undid at the next window: still over --max-cpu, they had bought less than half the saving they were made for (the rate is then kept while what falls with it does not grow)."},
			func() float64 { return float64(g.Undones()) })
		ceiling := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "heatscope_guard_rate_ceiling_hertz",
			Help: "The lowest sampling rate the overhead guard cut from and will not raise to again until its windows predict that rate within --max-cpu's margin, less what the raise to it missed by (0 when none)."},
			func() float64 { return float64(g.Ceiling()) })
		for _, c := range []prometheus.Collector{collections, judged, share, shedding, sheds, kept, undone, ceiling, slopeCollector{g.Guard}} {
			if err := m.Register(c); err != nil {
				return nil, err
			}
		}
	}
	if db != nil {
		if err := m.RegisterStore(db); err != nil {
			return nil, err
		}
		if err := m.RegisterEvents(metrics.EventStats{Kmsg: kmsg.Status, Store: db}); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// workDesc describes heatscope_agent_work_cpu_seconds_total.
var workDesc = prometheus.NewDesc("heatscope_agent_work_cpu_seconds_total",
	"The agent's CPU time by part: samples (the ring read, each sample symbolized and stored: falls with the sampling rate), BPF sampler (the sampling BPF program's run time, counted while kernel.bpf_stats_enabled is on: falls with the rate), new processes (mappings read, unwind entries, exit snapshots), symbol tables, unwind tables, the store (its WAL, head cuts, block writes, compaction and retention: falls with the rate, in bursts).",
	[]string{"part"}, nil)

// workCollector exports the recorder's parts (Recorder.Parts), read once
// per scrape: each reading asks the kernel for the BPF programs' run times.
type workCollector struct{ rec *recorder.Recorder }

func (workCollector) Describe(ch chan<- *prometheus.Desc) { ch <- workDesc }

func (c workCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.rec.Parts() {
		ch <- prometheus.MustNewConstMetric(workDesc, prometheus.CounterValue, p.CPU.Seconds(), p.Name)
	}
}

// slopeDesc describes heatscope_guard_cost_per_hertz.
var slopeDesc = prometheus.NewDesc("heatscope_guard_cost_per_hertz",
	"What the overhead guard has learned each part of the agent's cost grows by per Hz of the sampling rate, in percent of one CPU, from its windows at different rates (the part \"the rest\" is the CPU outside every timed part); a part not yet seen at two rates a quarter apart is absent.",
	[]string{"part"}, nil)

// slopeCollector exports the overhead guard's learned slopes
// (overhead.Guard.Slopes).
type slopeCollector struct{ g *overhead.Guard }

func (slopeCollector) Describe(ch chan<- *prometheus.Desc) { ch <- slopeDesc }

func (c slopeCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.g.Slopes() {
		ch <- prometheus.MustNewConstMetric(slopeDesc, prometheus.GaugeValue, s.PerHz, s.Name)
	}
}
