package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/heatscope/heatscope/container"
	"github.com/heatscope/heatscope/events"
	"github.com/heatscope/heatscope/metrics"
	"github.com/heatscope/heatscope/otlpexport"
	"github.com/heatscope/heatscope/overview"
	"github.com/heatscope/heatscope/pipeline"
	"github.com/heatscope/heatscope/profileio"
	"github.com/heatscope/heatscope/profiler"
	"github.com/heatscope/heatscope/query"
	"github.com/heatscope/heatscope/recorder"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/saturation"
	"github.com/heatscope/heatscope/store"
	"github.com/heatscope/heatscope/symbolize"
	"github.com/heatscope/heatscope/web"
)

// defaultSymbolCache bounds the symbol tables of user-space binaries the
// agent keeps (--symbol-cache). In 12-minute soaks on a shared build
// machine (issue 14, docs/benchmarks.md) 32 MiB was full within 6 minutes
// (68 binaries, most of them test binaries built and run once) and made up
// 32 of the 54 MB of live heap; at 16 MiB the binary cache's hit rate at
// 6 minutes was 98.5% (99.5% at 32 MiB), the agent's CPU the same (2.64%
// against 2.62% of one CPU) and no frame of the churn processes unknown: a
// miss costs one reload of a table, not a frame. It is 8 MiB so that the
// steady RSS stays under 60 MB (issue 14): the binary's own pages are
// about 20 MB of it, and the memory limit below sets most of the rest.
const defaultSymbolCache = "8MiB"

// defaultRecordMemoryLimit is the agent's soft Go memory limit
// (--memory-limit). Past its live heap the collector keeps the Go heap
// near the limit, so the limit, not the live heap, sets most of the
// anonymous RSS: it must cover the symbol cache plus the rest of the live
// heap (about 22 MB in the soak: the head's tables, kernel symbols, the
// stack cache, the zstd encoder) with room to spare, which
// TestRecordMemoryDefaults asserts. 36 MiB (37.7 MB) keeps the anonymous
// RSS under 40 MB.
const defaultRecordMemoryLimit = "36MiB"

func runRecord(args []string, stdout, stderr io.Writer) (err error) {
	f, err := parseRecordFlags(args, stderr)
	if err != nil {
		return err
	}
	defer func() { err = f.config.explain(err) }()
	plan, err := f.plan()
	if err != nil {
		return err
	}
	r := &recording{flags: f, plan: plan}
	defer r.cleanUp()
	if err := r.openOutputs(); err != nil {
		return err
	}
	if err := r.openSampler(); err != nil {
		return err
	}
	if err := r.serve(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *f.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *f.duration)
		defer cancel()
	}
	if err := r.run(ctx, stderr); err != nil {
		return err
	}
	return r.report(stdout, stderr)
}

// recordFlags are record's flags.
type recordFlags struct {
	duration, blockDuration, progress                                      *time.Duration
	data, source, retention, retentionSize, output, format                 *string
	pids, cgroup, stacks, unwindMode, unwindTables, btfPath                *string
	hostRoot, cacheDir, cacheSize, symCache, memLimit, cpuProfile, heapDir *string
	frequency, top, procs                                                  *int
	containers, bpfStats                                                   *bool
	maxCPU                                                                 *float64
	web                                                                    webFlags
	events                                                                 eventFlags
	saturation                                                             saturationFlags
	ship                                                                   *shipFlags
	otlp                                                                   *otlpFlags
	listenSet, blockDurationSet, nodeSet                                   bool
	// config says where the --config file set a flag, for its errors.
	config configOrigins
}

// parseRecordFlags defines record's flags and parses args (and the
// --config file) into them.
func parseRecordFlags(args []string, stderr io.Writer) (*recordFlags, error) {
	fs := newFlagSet("record", "record [flags]", stderr)
	f := &recordFlags{}
	f.duration = fs.Duration("duration", 0, "how long to record; 0 records until SIGINT or SIGTERM")
	f.data = fs.String("data", "./heatscope-data", "data directory to record into ('' for none)")
	f.source = fs.String("source", "", "source name of the recorded samples (default: the node's name, --node)")
	f.retention = fs.String("retention", "7d", "drop data older than this (0 keeps everything)")
	f.retentionSize = fs.String("retention-size", "10GB", "drop the oldest data while the blocks take more than this (0: no limit)")
	f.blockDuration = fs.Duration("block-duration", 2*time.Minute, "how much time the in-memory head covers before it is written as a block")
	f.output = fs.String("output", "", "also write this run's samples to this file")
	f.format = fs.String("format", "pprof", "format of --output: pprof or folded")
	f.frequency = fs.Int("frequency", 99, fmt.Sprintf("samples per second per CPU (1 to %d)", profiler.MaxFrequency))
	f.pids = fs.String("pid", "", "only sample these processes (comma-separated pids)")
	f.cgroup = fs.String("cgroup", "", "only sample this cgroup v2: a path under /sys/fs/cgroup or a cgroup id")
	f.stacks = fs.String("stacks", "all", "which stacks to walk: all, kernel or user")
	f.unwindMode = fs.String("unwind", "auto", "how user stacks are walked: auto (dwarf where the kernel can, else fp), fp (frame pointers) or dwarf (unwind tables from each binary's .eh_frame, frame pointers where there are none; Linux 5.17)")
	f.unwindTables = fs.String("unwind-tables", "64MiB", "memory bound of the unwind tables loaded into BPF maps (--unwind dwarf): the least recently used are evicted beyond it")
	f.btfPath = fs.String("btf", "", "BTF file for kernels without /sys/kernel/btf/vmlinux")
	f.top = fs.Int("top", 0, "when done, print this many top functions by self CPU time (keeps the run's profile in memory: for bounded runs)")
	f.progress = fs.Duration("progress", time.Second, "how often to print progress on stderr (0: never)")
	f.containers = fs.Bool("containers", true, "label samples with their container, pod and Kubernetes names, read from their cgroup (cgroup v2)")
	f.hostRoot = fs.String("host-root", "/", "where the host's /var/log/pods, /var/log/containers and /var/lib/kubelet/pods are mounted (for --containers; e.g. /host in a container)")
	f.bpfStats = fs.Bool("bpf-stats", false, "measure the BPF program's own run time (kernel.bpf_stats_enabled) and report it")
	f.cacheDir = fs.String("cache-dir", defaultCacheDir(), "where kernel symbols and unwind tables are cached between runs ('' for no cache)")
	f.cacheSize = fs.String("cache-size", "256MiB", "disk bound of the unwind tables, and apart of the symbol tables, cached in --cache-dir: the least recently used are removed beyond it")
	f.procs = fs.Int("gomaxprocs", 1, "CPUs the agent's Go code may use at once (GOMAXPROCS); 1 wakes the fewest threads, queries served while recording then run on one CPU")
	f.symCache = fs.String("symbol-cache", defaultSymbolCache, "memory bound of the cached symbol tables of user-space binaries: the least recently used are dropped beyond it")
	f.memLimit = fs.String("memory-limit", defaultRecordMemoryLimit, "soft limit of the agent's Go memory (runtime/debug.SetMemoryLimit): the garbage collector works harder near it; what the OTLP export's queue holds (at most --otlp-queue-size) comes on top ('0' for none; the GOMEMLIMIT environment variable overrides it)")
	f.maxCPU = fs.Float64("max-cpu", 1, "overhead budget in percent of one CPU (agent plus BPF program): above it the sampling frequency is halved, "+
		"and raised back when the cost allows (0: no guard)")
	f.cpuProfile = fs.String("cpu-profile", "", "write the agent's own Go CPU profile of the whole run to this file (go tool pprof reads it; '' for none)")
	f.heapDir = fs.String("heap-profile-dir", "", "on SIGUSR1, write the agent's own Go heap profile into this existing directory (to compare with go tool pprof -diff_base; '' for none)")
	config := addConfigFlag(fs)
	f.web = addWebFlags(fs, "serve the UI and API on this address while recording, host:port ('' for none; a non-loopback host needs --auth-token or --insecure-listen)")
	f.events = addEventFlags(fs)
	f.saturation = addSaturationFlags(fs)
	f.ship = addShipFlags(fs)
	f.otlp = addOTLPFlags(fs)
	var err error
	if f.config, err = parseFlagsWithConfig(fs, config, args); err != nil {
		return nil, err
	}
	fs.Visit(func(fl *flag.Flag) {
		f.listenSet = f.listenSet || fl.Name == "listen"
		f.blockDurationSet = f.blockDurationSet || fl.Name == "block-duration"
		f.nodeSet = f.nodeSet || fl.Name == "node"
	})
	return f, nil
}

// recordPlan is what record's flags ask for, checked.
type recordPlan struct {
	sampler       profiler.Config
	store         store.Options
	patterns      []events.Pattern
	saturation    saturation.Config
	saturationOff bool
	symCacheBytes int64
	memoryLimit   int64
	// otlp is the OTLP export's configuration when exportOTLP.
	otlp       otlpexport.Config
	exportOTLP bool
}

// plan checks the flags: a wrong one is a usage error that names it.
func (f *recordFlags) plan() (recordPlan, error) {
	var p recordPlan
	var err error
	if p.sampler, err = f.samplerConfig(); err != nil {
		return p, err
	}
	if p.store, err = f.storeOptions(); err != nil {
		return p, err
	}
	if p.patterns, err = f.events.compile(); err != nil {
		return p, err
	}
	if p.saturation, p.saturationOff, err = f.saturation.config(); err != nil {
		return p, err
	}
	if *f.procs < 1 {
		return p, usageError{fmt.Errorf("--gomaxprocs %d: want at least 1", *f.procs)}
	}
	if p.symCacheBytes, err = parseSize(*f.symCache); err != nil || p.symCacheBytes < 1 {
		return p, usageError{fmt.Errorf("--symbol-cache %q: want a size like %s", *f.symCache, defaultSymbolCache)}
	}
	if p.memoryLimit, err = parseSize(*f.memLimit); err != nil {
		return p, usageError{fmt.Errorf("--memory-limit: %w", err)}
	}
	if p.otlp, p.exportOTLP, err = f.otlp.config(p.store.Node); err != nil {
		return p, err
	}
	if *f.data == "" && *f.output == "" && !p.exportOTLP {
		return p, usageError{errors.New("nothing to write: give --data, --output or --otlp-endpoint")}
	}
	if *f.data == "" && f.listenSet && *f.web.listen != "" {
		return p, usageError{errors.New("--listen serves the data directory: give --data too")}
	}
	if *f.data != "" {
		if _, err := f.web.authToken(); err != nil {
			return p, err
		}
	}
	return p, nil
}

// samplerConfig checks the flags that configure the sampler.
func (f *recordFlags) samplerConfig() (profiler.Config, error) {
	cfg := profiler.Config{Frequency: *f.frequency, BTFPath: *f.btfPath, UnwindCacheDir: *f.cacheDir, BPFStats: *f.bpfStats}
	var err error
	if *f.frequency < 1 || *f.frequency > profiler.MaxFrequency {
		return cfg, usageError{fmt.Errorf("--frequency %d: want 1 to %d", *f.frequency, profiler.MaxFrequency)}
	}
	if *f.maxCPU < 0 || *f.maxCPU > 100*float64(runtime.NumCPU()) {
		return cfg, usageError{fmt.Errorf("--max-cpu %v: want 0 (off) to %d percent", *f.maxCPU, 100*runtime.NumCPU())}
	}
	if *f.duration < 0 {
		return cfg, usageError{fmt.Errorf("--duration %v: must not be negative", *f.duration)}
	}
	if *f.format != "pprof" && *f.format != "folded" {
		return cfg, usageError{fmt.Errorf("--format %q: want pprof or folded", *f.format)}
	}
	if cfg.Stacks, err = profiler.ParseStacks(*f.stacks); err != nil {
		return cfg, usageError{fmt.Errorf("--stacks: %w", err)}
	}
	if cfg.Unwind, err = profiler.ParseUnwind(*f.unwindMode); err != nil {
		return cfg, usageError{fmt.Errorf("--unwind: %w", err)}
	}
	if cfg.UnwindMaxBytes, err = parseSize(*f.unwindTables); err != nil || cfg.UnwindMaxBytes <= 0 {
		return cfg, usageError{fmt.Errorf("--unwind-tables %q: want a size such as 64MiB", *f.unwindTables)}
	}
	if cfg.PIDs, err = parsePIDs(*f.pids); err != nil {
		return cfg, usageError{fmt.Errorf("--pid: %w", err)}
	}
	if cfg.CgroupID, err = profiler.ParseCgroup(*f.cgroup); err != nil {
		return cfg, usageError{fmt.Errorf("--cgroup: %w", err)}
	}
	if cfg.UnwindCacheMaxBytes, err = parseSize(*f.cacheSize); err != nil || cfg.UnwindCacheMaxBytes <= 0 {
		return cfg, usageError{fmt.Errorf("--cache-size %q: want a size such as 256MiB", *f.cacheSize)}
	}
	return cfg, nil
}

// storeOptions checks the flags that configure the data directory.
func (f *recordFlags) storeOptions() (store.Options, error) {
	// The store's periodic work runs on the sampler's poll goroutine
	// (rec.OnPoll), so the agent has no timer of its own to wake for.
	opts := store.Options{Source: *f.source, BlockDuration: *f.blockDuration, PeriodNs: sample.PeriodOf(int64(*f.frequency)),
		Logger: slog.Default(), CallerTicks: true}
	var err error
	if opts.Retention, err = parseDays(*f.retention); err != nil {
		return opts, usageError{fmt.Errorf("--retention: %w", err)}
	}
	if opts.RetentionSize, err = parseSize(*f.retentionSize); err != nil {
		return opts, usageError{fmt.Errorf("--retention-size: %w", err)}
	}
	if *f.blockDuration < time.Second {
		return opts, usageError{fmt.Errorf("--block-duration %v: at least 1s", *f.blockDuration)}
	}
	if opts.Node, err = f.ship.nodeName(f.nodeSet); err != nil {
		return opts, err
	}
	if opts.NodeLabels, err = f.ship.nodeLabels(); err != nil {
		return opts, err
	}
	if *f.ship.objstore != "" {
		if *f.data == "" {
			return opts, usageError{errors.New("--objstore-config ships the data directory's blocks: give --data too")}
		}
		// Blocks are what is shipped: a sample is in the bucket within
		// about a block's duration (docs/design.md).
		if !f.blockDurationSet {
			opts.BlockDuration = shipBlockDuration
		} else if *f.blockDuration > time.Minute {
			slog.Warn("samples reach the bucket up to --block-duration after they are taken", "block-duration", *f.blockDuration)
		}
	}
	return opts, nil
}

// recording is a run of record: what it opened, in order, and the sinks
// its samples go to.
type recording struct {
	flags *recordFlags
	plan  recordPlan
	// cleanups run in reverse order when the run ends, whatever happened.
	cleanups []func()

	out     *os.File
	ship    *shipping
	db      *store.DB
	rec     *recorder.Recorder
	guard   *guarded
	kmsg    *events.KmsgSource
	metrics *metrics.Metrics
	// stopServer stops record's own server; it waits for the requests
	// under way, so that none outlives the store.
	stopServer func()

	stored    *pipeline.Store
	counter   pipeline.Counter
	profile   *pipeline.Profile
	folded    *pipeline.Folded
	saturated *pipeline.Saturation
	otlp      *otlpexport.Exporter
	// memLimit is the Go memory limit: --memory-limit, and the OTLP
	// queue's bytes on top of it.
	memLimit memoryLimit
	start    time.Time
	// stopped is when the recorder stopped sampling, its ring drained:
	// the sinks' closing after it (the OTLP queue's last sends, up to
	// --otlp-timeout) is no recording time.
	stopped time.Time
}

// Run runs the recorder as the pipeline's source and notes when it
// stopped, before the pipeline closes its sinks.
func (r *recording) Run(ctx context.Context, sink func(*sample.Sample)) error {
	err := r.rec.Run(ctx, sink)
	r.stopped = time.Now()
	return err
}

// deferred adds fn to what cleanUp runs.
func (r *recording) deferred(fn func()) { r.cleanups = append(r.cleanups, fn) }

// cleanUp releases what the run opened, the last opened first.
func (r *recording) cleanUp() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
	r.cleanups = nil
}

// openOutputs starts the agent's own profiles and opens what the samples
// are written to: --output, the OTLP endpoint, the bucket, the data
// directory.
func (r *recording) openOutputs() error {
	f := r.flags
	if *f.heapDir != "" {
		hp, err := startHeapProfiler(*f.heapDir)
		if err != nil {
			return usageError{err}
		}
		r.deferred(hp.stop)
	}
	if *f.cpuProfile != "" {
		stopProfile, err := startCPUProfile(*f.cpuProfile)
		if err != nil {
			return usageError{err}
		}
		r.deferred(stopProfile)
	}
	var err error
	if *f.output != "" {
		if r.out, err = os.Create(*f.output); err != nil {
			return fmt.Errorf("create output: %w", err)
		}
		r.deferred(func() { r.out.Close() })
	}
	if r.plan.exportOTLP {
		r.plan.otlp.QueueChanged = r.memLimit.queueChanged
		if r.otlp, err = otlpexport.New(r.plan.otlp); err != nil {
			return usageError{err}
		}
		x := r.otlp
		r.deferred(func() { x.Close() }) // the pipeline closes it; this, on a failed start
	}
	if *f.ship.objstore != "" {
		if r.ship, err = openShipping(*f.ship.objstore, *f.data, r.plan.store.Node); err != nil {
			return err
		}
		r.deferred(r.ship.close)
		r.ship.hook(&r.plan.store)
	}
	if *f.data != "" {
		if r.db, err = store.Open(*f.data, r.plan.store); err != nil {
			return err
		}
		r.deferred(func() { r.db.Close() })
		if r.otlp != nil {
			r.otlp.SetHostID(r.db.Identity().Instance)
		}
	}
	if r.ship != nil {
		return r.ship.start(r.db)
	}
	return nil
}

// openSampler sets the agent's Go runtime limits and starts the sampler,
// with container labels and the overhead guard.
func (r *recording) openSampler() error {
	f := r.flags
	// With one P the runtime never wakes a second thread to look for work
	// when the poll loop's timer fires (docs/design.md).
	procs := runtime.GOMAXPROCS(*f.procs)
	r.deferred(func() { runtime.GOMAXPROCS(procs) })
	if r.plan.memoryLimit > 0 && os.Getenv("GOMEMLIMIT") == "" {
		r.memLimit.start(r.plan.memoryLimit)
		r.deferred(r.memLimit.stop)
	}
	cfg := r.plan.sampler
	rec, err := recorder.Open(cfg, symbolize.Options{KernelCacheDir: *f.cacheDir, MaxBinaryBytes: r.plan.symCacheBytes,
		SymbolCacheDir: *f.cacheDir, SymbolCacheMaxBytes: cfg.UnwindCacheMaxBytes}, slog.Default())
	if err != nil {
		return err
	}
	r.rec = rec
	r.deferred(func() { rec.Close() })
	if *f.containers {
		res, err := openContainerResolver(*f.hostRoot)
		if err != nil {
			slog.Warn("samples will have no container labels", "err", err)
		} else {
			r.deferred(func() { res.Close() })
			rec.LabelContainers(res)
		}
	}
	if r.db != nil {
		rec.TimeUpkeep(r.db) // the store's periodic work is a part of the agent's cost
	}
	if *f.maxCPU > 0 {
		if r.guard, err = newGuard(rec, r.db, *f.maxCPU, *f.bpfStats); err != nil {
			return err
		}
		r.deferred(r.guard.close)
	}
	return r.openSinks()
}

// openSinks chooses where the samples go: the store (and saturation
// detection on its node), the run's own profile, the counters.
func (r *recording) openSinks() error {
	period := r.rec.PeriodNs()
	if r.db != nil {
		r.stored = pipeline.NewStore(r.db, period, slog.Default())
		if !r.plan.saturationOff {
			d, err := detectSaturation(r.db, r.plan.saturation, r.plan.sampler)
			if err != nil {
				return err
			}
			if d != nil {
				r.saturated = pipeline.NewSaturation(d)
			}
		}
	}
	// The run's own profile is kept when it is written out or summarised.
	if *r.flags.output != "" || *r.flags.top > 0 {
		r.profile = pipeline.NewProfile(period)
	}
	if *r.flags.output != "" && *r.flags.format == "folded" {
		r.folded = pipeline.NewFolded(period)
	}
	return nil
}

// sinks lists the sinks in the order each sample reaches them.
func (r *recording) sinks() []pipeline.Sink {
	var sinks []pipeline.Sink
	if r.saturated != nil {
		sinks = append(sinks, r.saturated)
	}
	if r.stored != nil {
		sinks = append(sinks, r.stored)
	}
	if r.profile != nil {
		sinks = append(sinks, r.profile)
	}
	if r.folded != nil {
		sinks = append(sinks, r.folded)
	}
	if r.otlp != nil {
		sinks = append(sinks, r.otlp)
	}
	return append(sinks, &r.counter)
}

// serve registers the recording's metrics and serves the UI and API
// while it records (--listen).
func (r *recording) serve() error {
	// kmsg's Status tells whether kernel log events are being recorded.
	r.kmsg = events.NewKmsgSource(*r.flags.events.kmsg, r.plan.patterns, slog.Default())
	m, err := recorderMetrics(r.rec, r.db, r.guard, r.kmsg)
	if err != nil {
		return err
	}
	r.metrics = m
	var appends metrics.AppendErrors
	if r.stored != nil {
		appends = r.stored
	}
	if err := m.RegisterPipeline(&r.counter, appends); err != nil {
		return err
	}
	if r.ship != nil {
		if err := m.Register(r.ship.collector(r.db)); err != nil {
			return err
		}
	}
	if r.otlp != nil {
		if err := m.RegisterOTLPExport(r.otlp); err != nil {
			return err
		}
	}
	health := func() error {
		if err := r.rec.Alive(aliveWithin); err != nil {
			return err
		}
		if r.db != nil {
			return r.db.Health()
		}
		return nil
	}
	webOpts := web.Options{Metrics: m.Handler(), Health: health, ObserveQuery: m.ObserveQuery}
	if r.db != nil {
		// The fleet overview's cells of the recorder's own store: its
		// API's, in /metrics, and one budget with its timelines' steps.
		cells := overview.NewCells(0, 0)
		r.db.KeepStepsIn(cells.Timelines())
		if err := m.RegisterOverview(func() overview.Stats { return cells.Stats(r.db) }); err != nil {
			return err
		}
		webOpts.Overview = cells
	}
	if r.guard != nil {
		webOpts.Busy = r.guard.busy
	}
	if r.stopServer, err = serveWhileRecording(r.db, r.flags.web, r.flags.listenSet, webOpts); err != nil {
		return err
	}
	r.deferred(r.stopServer)
	return nil
}

// run records until ctx is done, with the periodic work on the sampler's
// polls, the kernel log's events and the overhead guard beside it.
func (r *recording) run(ctx context.Context, stderr io.Writer) error {
	r.start = time.Now()
	progressDue := reportProgress(r.rec, r.stored, r.start, *r.flags.progress, stderr)
	var pidsLeft *pidWatch
	if pids := r.plan.sampler.PIDs; len(pids) > 0 {
		pidsLeft = newPIDWatch(pids, pidCheckInterval, slog.Default())
	}
	r.rec.OnPoll(func() {
		if r.db != nil {
			r.db.Tick()
		}
		progressDue()
		if pidsLeft != nil {
			pidsLeft.check(time.Now())
		}
	})
	stopEvents := func() {}
	if r.db != nil && *r.flags.events.kmsg != "" {
		stopEvents = r.kmsg.RecordInto(r.db, r.start)
	}
	stopGuard := func() {}
	if r.guard != nil {
		stopGuard = runGuard(ctx, r.guard)
	}
	err := pipeline.New(r.sinks()...).Run(ctx, r)
	stopEvents()
	stopGuard()
	r.stopServer()
	return err
}

// report prints what was recorded, closes the data directory, finishes
// shipping and writes --output and --top.
func (r *recording) report(stdout, stderr io.Writer) error {
	f := r.flags
	if r.stopped.IsZero() {
		r.stopped = time.Now()
	}
	printSummary(r.rec, r.stopped.Sub(r.start), stderr)
	if r.guard != nil && r.guard.Changes() > 0 {
		fmt.Fprintf(stderr, "sampling frequency: %d Hz asked; the overhead guard (--max-cpu %g) changed it %d times, lowest %d Hz, %d Hz at the stop: "+
			"fewer samples were taken, each weighing its own period (why: the log's \"sampling frequency changed\" lines and the overhead-guard events)\n",
			*f.frequency, *f.maxCPU, r.guard.Changes(), r.guard.Lowest(), r.rec.Frequency())
	}
	if r.db != nil && *f.events.kmsg != "" {
		printEventSummary(r.kmsg.Status(), stderr)
	}
	if r.db != nil {
		if err := r.db.Close(); err != nil {
			return fmt.Errorf("close data directory: %w", err)
		}
		st := r.db.Stats()
		fmt.Fprintf(stderr, "data directory %s: %d blocks, %d bytes, %d samples lost\n", *f.data, st.Blocks, st.BlockBytes, st.Lost)
		serveCmd, addr := "heatscope serve --data "+shellQuote(*f.data), defaultListen
		if *f.web.listen != "" && *f.web.listen != defaultListen {
			serveCmd, addr = serveCmd+" --listen "+shellQuote(*f.web.listen), *f.web.listen
		}
		fmt.Fprintf(stderr, "look at it: %s   (then open http://%s/)\n", serveCmd, addr)
	}
	if r.ship != nil {
		r.ship.finish(stderr)
	}
	if r.otlp != nil {
		st := r.otlp.Stats()
		fmt.Fprintf(stderr, "otlp %s: exported %d samples; not exported: %d dropped from a full queue, %d refused, %d left at stop\n",
			*f.otlp.endpoint, st.ExportedSamples, st.DroppedQueueFull, st.DroppedRejected, st.DroppedShutdown)
	}
	if r.out != nil {
		var err error
		if r.folded != nil {
			_, err = r.folded.WriteTo(r.out)
		} else {
			err = profileio.WritePprof(r.out, r.profile.Profile())
		}
		if err == nil {
			err = r.out.Close()
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", *f.output, err)
		}
		fmt.Fprintf(stderr, "wrote %s (%s)\n", *f.output, *f.format)
	}
	if *f.top > 0 {
		printRunTop(stdout, r.profile, *f.top)
	}
	return nil
}

// pidCheckInterval is how often record checks that a --pid process is left.
const pidCheckInterval = 2 * time.Second

// defaultCacheDir is the user's cache directory for heatscope, or "" when
// there is none (no $HOME or $XDG_CACHE_HOME).
func defaultCacheDir() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "heatscope")
}

// openContainerResolver resolves cgroups to containers, reading the
// kubelet's directories under hostRoot.
func openContainerResolver(hostRoot string) (*container.Resolver, error) {
	dirs := container.DefaultDirs()
	for _, d := range []*string{&dirs.LogPods, &dirs.LogContainers, &dirs.KubeletPods} {
		*d = filepath.Join(hostRoot, *d)
	}
	res, err := container.NewResolver(container.Options{Dirs: dirs})
	if err != nil {
		return nil, err
	}
	if !res.UsesHandles() {
		slog.Info("cgroups are found by walking the cgroup tree (open_by_handle_at needs CAP_DAC_READ_SEARCH)")
	}
	return res, nil
}

func parsePIDs(s string) ([]uint32, error) {
	if s == "" {
		return nil, nil
	}
	var pids []uint32
	for _, f := range strings.Split(s, ",") {
		pid, err := strconv.ParseUint(strings.TrimSpace(f), 10, 32)
		if err != nil || pid == 0 {
			return nil, fmt.Errorf("%q is not a process id", f)
		}
		pids = append(pids, uint32(pid))
	}
	return pids, nil
}

// reportProgress returns a function that prints samples, drops, failed
// appends (when there are) and elapsed time when every has passed since it
// last did. The recorder calls it on every poll: a ticker of its own woke
// the agent once more a second.
func reportProgress(rec *recorder.Recorder, stored *pipeline.Store, start time.Time, every time.Duration, w io.Writer) func() {
	if every <= 0 {
		return func() {}
	}
	last := start
	return func() {
		now := time.Now()
		if now.Sub(last) < every {
			return
		}
		last = now
		st, err := rec.Counters()
		if err != nil {
			return
		}
		fmt.Fprintf(w, "recording %5.0fs: %d samples, %d dropped, %d stack errors, %d Hz%s\n",
			now.Sub(start).Seconds(), st.Received, st.Lost, st.KernelStackErrors+st.UserStackErrors, rec.Frequency(), appendErrors(stored))
	}
}

// appendErrors is the progress line's note of failed appends: "" while
// there are none.
func appendErrors(stored *pipeline.Store) string {
	if stored == nil || stored.AppendErrors() == 0 {
		return ""
	}
	return fmt.Sprintf(", %d appends to the data directory failed (see the log)", stored.AppendErrors())
}

// printSummary prints what was recorded and what it cost the agent: its own
// CPU time, the BPF program's run time (with --bpf-stats) and peak RSS.
func printSummary(rec *recorder.Recorder, elapsed time.Duration, w io.Writer) {
	st, err := rec.Stats()
	if err != nil {
		fmt.Fprintf(w, "read counters: %v\n", err)
		return
	}
	fmt.Fprintf(w, "recorded %.1fs: %d samples on %d CPUs, %d dropped, %d kernel and %d user stack errors\n",
		elapsed.Seconds(), st.Received, len(st.PerCPU), st.Lost, st.KernelStackErrors, st.UserStackErrors)
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return
	}
	agent := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	fmt.Fprintf(w, "agent: %.3fs CPU (%.3f%% of one CPU), peak RSS %.1f MB", agent.Seconds(),
		100*agent.Seconds()/elapsed.Seconds(), float64(ru.Maxrss)/1024)
	if st.BPFRunCount > 0 {
		fmt.Fprintf(w, "; BPF program: %d runs, %.3fs (%.1f µs/run, %.3f%% of one CPU)", st.BPFRunCount,
			st.BPFRunTime.Seconds(), float64(st.BPFRunTime.Microseconds())/float64(st.BPFRunCount),
			100*st.BPFRunTime.Seconds()/elapsed.Seconds())
	}
	if st.ExitRunCount > 0 {
		fmt.Fprintf(w, "; exit snapshots: %d runs, %.3fs (%.3f%% of one CPU)", st.ExitRunCount,
			st.ExitRunTime.Seconds(), 100*st.ExitRunTime.Seconds()/elapsed.Seconds())
	}
	fmt.Fprintln(w)
	if f := st.Unwind.Fallback; f.Check != "" {
		fmt.Fprintf(w, "unwind: the table walk is off, user stacks were walked with frame pointers: check %s failed: %s\n", f.Check, f.Reason)
	}
	if u := st.Unwind; u.Enabled {
		fmt.Fprintf(w, "unwind: %d stacks walked with tables, %d with frame pointers (tables not in yet); user frames found with tables %d, with frame pointers %d; "+
			"%d tables loaded (%.1f MB of %.1f), %d built, %d from the cache, %d evicted, %d deferred, %d binaries without CFI, %d errors, %d refused by the kernel; %d processes' mappings taken, %d of them from the symbolizer's read\n",
			st.DWARFWalks, st.FPWalks, u.TableFrames, u.FPFrames, u.Tables, float64(u.TableBytes)/1e6, float64(u.MaxBytes)/1e6,
			u.Built, u.CacheHits, u.Evictions, u.Deferred, u.NoCFI, u.BuildErrors, u.LoadErrors, u.MapsReads, u.MapsShared)
		if u.Ready > 0 {
			fmt.Fprintf(w, "unwind: the tables of %d processes reached the BPF maps %.0f ms after their first sample on average, %.0f ms at most\n",
				u.Ready, float64(u.ReadyWaitSum.Milliseconds())/float64(u.Ready), float64(u.ReadyWaitMax.Milliseconds()))
		}
	}
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./+,:=@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// printRunTop prints the run's top n functions as export and the UI
// count them: idle left out, unresolved frames counted per module.
func printRunTop(w io.Writer, prof *pipeline.Profile, n int) {
	busy, idle := prof.Busy()
	printTop(w, profileio.TopFunctions(busy, query.GroupAddresses.Name), n, idle)
}

// printTop prints the first n functions of top by self CPU time, with
// their share of all the self CPU time, their total CPU time and their
// self samples, under a line that says what the share is of: the CPU time
// sampled, without the idle samples (idle of them) left out before.
func printTop(w io.Writer, top []profileio.FunctionCount, n int, idle int64) {
	var total int64
	for _, fc := range top {
		total += fc.SelfNs
	}
	if total == 0 {
		fmt.Fprintln(w, "no samples")
		return
	}
	secs := func(ns int64) string { return fmt.Sprintf("%.3fs", float64(ns)/1e9) }
	left := "no idle samples"
	if idle > 0 {
		left = fmt.Sprintf("%d idle samples left out, as export and the UI do", idle)
	}
	fmt.Fprintf(w, "self%% is each function's share of the %s of CPU time sampled, CPU idle excluded (%s)\n", secs(total), left)
	fmt.Fprintf(w, "%9s %7s %9s %8s  %s\n", "self CPU", "self%", "total CPU", "samples", "function")
	for _, fc := range top[:min(n, len(top))] {
		fmt.Fprintf(w, "%9s %6.2f%% %9s %8d  %s\n", secs(fc.SelfNs), 100*float64(fc.SelfNs)/float64(total), secs(fc.TotalNs), fc.Self, fc.Name)
	}
}
