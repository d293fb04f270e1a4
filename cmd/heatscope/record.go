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
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/pprof/profile"

	"github.com/heatscope/heatscope/container"
	"github.com/heatscope/heatscope/events"
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

func runRecord(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("record", "record [flags]", stderr)
	duration := fs.Duration("duration", 0, "how long to record; 0 records until SIGINT or SIGTERM")
	data := fs.String("data", "./heatscope-data", "data directory to record into ('' for none)")
	source := fs.String("source", "", "source name of the recorded samples (default: the node's name, --node)")
	retention := fs.String("retention", "7d", "drop data older than this (0 keeps everything)")
	retentionSize := fs.String("retention-size", "10GB", "drop the oldest data while the blocks take more than this (0: no limit)")
	blockDuration := fs.Duration("block-duration", 2*time.Minute, "how much time the in-memory head covers before it is written as a block")
	output := fs.String("output", "", "also write this run's samples to this file")
	format := fs.String("format", "pprof", "format of --output: pprof or folded")
	frequency := fs.Int("frequency", 99, fmt.Sprintf("samples per second per CPU (1 to %d)", profiler.MaxFrequency))
	pids := fs.String("pid", "", "only sample these processes (comma-separated pids)")
	cgroup := fs.String("cgroup", "", "only sample this cgroup v2: a path under /sys/fs/cgroup or a cgroup id")
	stacks := fs.String("stacks", "all", "which stacks to walk: all, kernel or user")
	unwindMode := fs.String("unwind", "auto", "how user stacks are walked: auto (dwarf where the kernel can, else fp), fp (frame pointers) or dwarf (unwind tables from each binary's .eh_frame, frame pointers where there are none; Linux 5.17)")
	unwindTables := fs.String("unwind-tables", "64MiB", "memory bound of the unwind tables loaded into BPF maps (--unwind dwarf): the least recently used are evicted beyond it")
	btfPath := fs.String("btf", "", "BTF file for kernels without /sys/kernel/btf/vmlinux")
	top := fs.Int("top", 0, "when done, print this many top functions by self CPU time (keeps the run's profile in memory: for bounded runs)")
	progress := fs.Duration("progress", time.Second, "how often to print progress on stderr (0: never)")
	containers := fs.Bool("containers", true, "label samples with their container, pod and Kubernetes names, read from their cgroup (cgroup v2)")
	hostRoot := fs.String("host-root", "/", "where the host's /var/log/pods, /var/log/containers and /var/lib/kubelet/pods are mounted (for --containers; e.g. /host in a container)")
	bpfStats := fs.Bool("bpf-stats", false, "measure the BPF program's own run time (kernel.bpf_stats_enabled) and report it")
	cacheDir := fs.String("cache-dir", defaultCacheDir(), "where kernel symbols and unwind tables are cached between runs ('' for no cache)")
	cacheSize := fs.String("cache-size", "256MiB", "disk bound of the unwind tables, and apart of the symbol tables, cached in --cache-dir: the least recently used are removed beyond it")
	procs := fs.Int("gomaxprocs", 1, "CPUs the agent's Go code may use at once (GOMAXPROCS); 1 wakes the fewest threads, queries served while recording then run on one CPU")
	symCache := fs.String("symbol-cache", defaultSymbolCache, "memory bound of the cached symbol tables of user-space binaries: the least recently used are dropped beyond it")
	memLimit := fs.String("memory-limit", defaultRecordMemoryLimit, "soft limit of the agent's Go memory (runtime/debug.SetMemoryLimit): the garbage collector works harder near it ('0' for none; the GOMEMLIMIT environment variable overrides it)")
	maxCPU := fs.Float64("max-cpu", 1, "overhead budget in percent of one CPU (agent plus BPF program): above it the sampling frequency is halved, "+
		"and raised back when the cost allows (0: no guard)")
	cpuProfile := fs.String("cpu-profile", "", "write the agent's own Go CPU profile of the whole run to this file (go tool pprof reads it; '' for none)")
	heapDir := fs.String("heap-profile-dir", "", "on SIGUSR1, write the agent's own Go heap profile into this existing directory (to compare with go tool pprof -diff_base; '' for none)")
	config := addConfigFlag(fs)
	wf := addWebFlags(fs, "serve the UI and API on this address while recording, host:port ('' for none; a non-loopback host needs --auth-token or --insecure-listen)")
	ef := addEventFlags(fs)
	sf := addSaturationFlags(fs)
	shf := addShipFlags(fs)
	if err := parseFlagsWithConfig(fs, config, args); err != nil {
		return err
	}
	listenSet, blockDurationSet, nodeSet := false, false, false
	fs.Visit(func(f *flag.Flag) {
		listenSet = listenSet || f.Name == "listen"
		blockDurationSet = blockDurationSet || f.Name == "block-duration"
		nodeSet = nodeSet || f.Name == "node"
	})

	cfg := profiler.Config{Frequency: *frequency}
	var err error
	if *frequency < 1 || *frequency > profiler.MaxFrequency {
		return usageError{fmt.Errorf("--frequency %d: want 1 to %d", *frequency, profiler.MaxFrequency)}
	}
	if *maxCPU < 0 || *maxCPU > 100*float64(runtime.NumCPU()) {
		return usageError{fmt.Errorf("--max-cpu %v: want 0 (off) to %d percent", *maxCPU, 100*runtime.NumCPU())}
	}
	if *duration < 0 {
		return usageError{fmt.Errorf("--duration %v: must not be negative", *duration)}
	}
	if *format != "pprof" && *format != "folded" {
		return usageError{fmt.Errorf("--format %q: want pprof or folded", *format)}
	}
	if cfg.Stacks, err = profiler.ParseStacks(*stacks); err != nil {
		return usageError{fmt.Errorf("--stacks: %w", err)}
	}
	if cfg.Unwind, err = profiler.ParseUnwind(*unwindMode); err != nil {
		return usageError{fmt.Errorf("--unwind: %w", err)}
	}
	if cfg.UnwindMaxBytes, err = parseSize(*unwindTables); err != nil || cfg.UnwindMaxBytes <= 0 {
		return usageError{fmt.Errorf("--unwind-tables %q: want a size such as 64MiB", *unwindTables)}
	}
	if cfg.PIDs, err = parsePIDs(*pids); err != nil {
		return usageError{fmt.Errorf("--pid: %w", err)}
	}
	if cfg.CgroupID, err = profiler.ParseCgroup(*cgroup); err != nil {
		return usageError{fmt.Errorf("--cgroup: %w", err)}
	}
	cfg.BTFPath = *btfPath
	cfg.UnwindCacheDir = *cacheDir
	if cfg.UnwindCacheMaxBytes, err = parseSize(*cacheSize); err != nil || cfg.UnwindCacheMaxBytes <= 0 {
		return usageError{fmt.Errorf("--cache-size %q: want a size such as 256MiB", *cacheSize)}
	}
	cfg.BPFStats = *bpfStats
	// The store's periodic work runs on the sampler's poll goroutine
	// (rec.OnPoll below), so the agent has no timer of its own to wake for.
	storeOpts := store.Options{Source: *source, BlockDuration: *blockDuration, PeriodNs: sample.PeriodOf(int64(*frequency)),
		Logger: slog.Default(), CallerTicks: true}
	if storeOpts.Retention, err = parseDays(*retention); err != nil {
		return usageError{fmt.Errorf("--retention: %w", err)}
	}
	if storeOpts.RetentionSize, err = parseSize(*retentionSize); err != nil {
		return usageError{fmt.Errorf("--retention-size: %w", err)}
	}
	if *blockDuration < time.Second {
		return usageError{fmt.Errorf("--block-duration %v: at least 1s", *blockDuration)}
	}
	if storeOpts.Node, err = shf.nodeName(nodeSet); err != nil {
		return err
	}
	if storeOpts.NodeLabels, err = shf.nodeLabels(); err != nil {
		return err
	}
	if *shf.objstore != "" {
		if *data == "" {
			return usageError{errors.New("--objstore-config ships the data directory's blocks: give --data too")}
		}
		// Blocks are what is shipped: a sample is in the bucket within
		// about a block's duration (docs/design.md).
		if !blockDurationSet {
			storeOpts.BlockDuration = shipBlockDuration
		} else if *blockDuration > time.Minute {
			slog.Warn("samples reach the bucket up to --block-duration after they are taken", "block-duration", *blockDuration)
		}
	}
	patterns, err := ef.compile()
	if err != nil {
		return err
	}
	satCfg, satOff, err := sf.config()
	if err != nil {
		return err
	}
	if *procs < 1 {
		return usageError{fmt.Errorf("--gomaxprocs %d: want at least 1", *procs)}
	}
	symCacheBytes, err := parseSize(*symCache)
	if err != nil || symCacheBytes < 1 {
		return usageError{fmt.Errorf("--symbol-cache %q: want a size like %s", *symCache, defaultSymbolCache)}
	}
	memoryLimit, err := parseSize(*memLimit)
	if err != nil {
		return usageError{fmt.Errorf("--memory-limit: %w", err)}
	}
	if *data == "" && *output == "" {
		return usageError{errors.New("nothing to write: give --data or --output")}
	}
	if *data == "" && listenSet && *wf.listen != "" {
		return usageError{errors.New("--listen serves the data directory: give --data too")}
	}
	if *data != "" {
		if _, err := wf.authToken(); err != nil {
			return err
		}
	}

	if *heapDir != "" {
		hp, err := startHeapProfiler(*heapDir)
		if err != nil {
			return usageError{err}
		}
		defer hp.stop()
	}

	if *cpuProfile != "" {
		stopProfile, err := startCPUProfile(*cpuProfile)
		if err != nil {
			return usageError{err}
		}
		defer stopProfile()
	}

	var out *os.File
	if *output != "" {
		if out, err = os.Create(*output); err != nil {
			return fmt.Errorf("create output: %w", err)
		}
		defer out.Close()
	}
	var ship *shipping
	if *shf.objstore != "" {
		if ship, err = openShipping(*shf.objstore, *data, storeOpts.Node); err != nil {
			return err
		}
		defer ship.close()
		ship.hook(&storeOpts)
	}
	var db *store.DB
	if *data != "" {
		if db, err = store.Open(*data, storeOpts); err != nil {
			return err
		}
		defer db.Close()
	}
	if ship != nil {
		if err := ship.start(db); err != nil {
			return err
		}
	}

	// With one P the runtime never wakes a second thread to look for work
	// when the poll loop's timer fires (docs/design.md).
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(*procs))
	if memoryLimit > 0 && os.Getenv("GOMEMLIMIT") == "" {
		defer debug.SetMemoryLimit(debug.SetMemoryLimit(memoryLimit))
	}
	rec, err := recorder.Open(cfg, symbolize.Options{KernelCacheDir: *cacheDir, MaxBinaryBytes: symCacheBytes,
		SymbolCacheDir: *cacheDir, SymbolCacheMaxBytes: cfg.UnwindCacheMaxBytes}, slog.Default())
	if err != nil {
		return err
	}
	defer rec.Close()
	if *containers {
		res, err := openContainerResolver(*hostRoot)
		if err != nil {
			slog.Warn("samples will have no container labels", "err", err)
		} else {
			defer res.Close()
			rec.LabelContainers(res)
		}
	}
	var sat *saturation.Detector
	if db != nil && !satOff {
		if sat, err = detectSaturation(db, satCfg, cfg); err != nil {
			return err
		}
	}
	var guard *guarded
	if *maxCPU > 0 {
		if guard, err = newGuard(rec, db, *maxCPU, *bpfStats); err != nil {
			return err
		}
		defer guard.close()
	}
	// kmsg's Status tells whether kernel log events are being recorded.
	kmsg := events.NewKmsgSource(*ef.kmsg, patterns, slog.Default())
	m, err := recorderMetrics(rec, db, guard, kmsg)
	if err != nil {
		return err
	}
	if ship != nil {
		if err := m.Register(ship.collector(db)); err != nil {
			return err
		}
	}
	health := func() error {
		if err := rec.Alive(aliveWithin); err != nil {
			return err
		}
		if db != nil {
			return db.Health()
		}
		return nil
	}
	// Deferred after db.Close, so it runs first: no request outlives the DB.
	webOpts := web.Options{Metrics: m.Handler(), Health: health, ObserveQuery: m.ObserveQuery}
	if guard != nil {
		webOpts.Busy = guard.busy
	}
	stopServer, err := serveWhileRecording(db, wf, listenSet, webOpts)
	if err != nil {
		return err
	}
	defer stopServer()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	start := time.Now()
	progressDue := reportProgress(rec, start, *progress, stderr)
	var pidsLeft *pidWatch
	if len(cfg.PIDs) > 0 {
		pidsLeft = newPIDWatch(cfg.PIDs, pidCheckInterval, slog.Default())
	}
	rec.OnPoll(func() {
		if db != nil {
			db.Tick()
		}
		progressDue()
		if pidsLeft != nil {
			pidsLeft.check(time.Now())
		}
	})
	stopEvents := func() {}
	if db != nil && *ef.kmsg != "" {
		stopEvents = recordKernelEvents(db, kmsg, start)
	}
	stopGuard := func() {}
	if guard != nil {
		stopGuard = runGuard(ctx, guard)
	}

	// The run's own profile is kept when it is written out or summarised.
	var pprofOut *profileio.PprofBuilder
	if *output != "" || *top > 0 {
		pprofOut = profileio.NewPprofBuilder(rec.PeriodNs())
	}
	var foldedOut *profileio.FoldedBuilder
	if *output != "" && *format == "folded" {
		foldedOut = profileio.NewFoldedBuilder()
		foldedOut.SetPeriod(rec.PeriodNs())
	}
	period := rec.PeriodNs()
	err = rec.Run(ctx, func(s *sample.Sample) {
		// The overhead guard changed the frequency: the store cuts its
		// head, so that each block states its samples' period.
		if s.PeriodNs != period {
			period = s.PeriodNs
			if db != nil {
				db.SetPeriod(period)
			}
		}
		if sat != nil {
			sat.Add(s)
		}
		if db != nil {
			db.Append(s)
		}
		if pprofOut != nil {
			pprofOut.Add(s)
		}
		if foldedOut != nil {
			foldedOut.Add(query.GroupAddresses.Sample(s)) // as export does by default
		}
	})
	if sat != nil {
		sat.Flush()
	}
	stopEvents()
	stopGuard()
	stopServer()
	if err != nil {
		return err
	}
	printSummary(rec, time.Since(start), stderr)
	if db != nil && *ef.kmsg != "" {
		printEventSummary(kmsg.Status(), stderr)
	}
	if db != nil {
		if err := db.Close(); err != nil {
			return fmt.Errorf("close data directory: %w", err)
		}
		st := db.Stats()
		fmt.Fprintf(stderr, "data directory %s: %d blocks, %d bytes, %d samples lost\n", *data, st.Blocks, st.BlockBytes, st.Lost)
		serveCmd, addr := "heatscope serve --data "+shellQuote(*data), defaultListen
		if *wf.listen != "" && *wf.listen != defaultListen {
			serveCmd, addr = serveCmd+" --listen "+shellQuote(*wf.listen), *wf.listen
		}
		fmt.Fprintf(stderr, "look at it: %s   (then open http://%s/)\n", serveCmd, addr)
	}
	if ship != nil {
		ship.finish(stderr)
	}
	var prof *profile.Profile
	if pprofOut != nil {
		prof = pprofOut.Profile()
	}
	if out != nil {
		if *format == "folded" {
			_, err = foldedOut.WriteTo(out)
		} else {
			err = profileio.WritePprof(out, prof)
		}
		if err == nil {
			err = out.Close()
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", *output, err)
		}
		fmt.Fprintf(stderr, "wrote %s (%s)\n", *output, *format)
	}
	if *top > 0 {
		printRunTop(stdout, prof, *top)
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

// reportProgress returns a function that prints samples, drops and
// elapsed time when every has passed since it last did. The recorder calls
// it on every poll: a ticker of its own woke the agent once more a second.
func reportProgress(rec *recorder.Recorder, start time.Time, every time.Duration, w io.Writer) func() {
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
		fmt.Fprintf(w, "recording %5.0fs: %d samples, %d dropped, %d stack errors, %d Hz\n",
			now.Sub(start).Seconds(), st.Received, st.Lost, st.KernelStackErrors+st.UserStackErrors, rec.Frequency())
	}
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

// withoutIdle returns p without its CPU idle samples (store.IsIdle), and
// how many it left out.
func withoutIdle(p *profile.Profile) (*profile.Profile, int64) {
	busy := p.Copy()
	all := busy.Sample
	busy.Sample = nil
	var idle int64
	var names []string
	for _, s := range all {
		names = names[:0]
		for _, loc := range s.Location {
			for _, line := range loc.Line {
				if line.Function != nil {
					names = append(names, line.Function.Name)
				}
			}
		}
		if comm := s.Label["comm"]; len(comm) > 0 && store.IsIdle(comm[0], names) {
			idle += s.Value[0]
			continue
		}
		busy.Sample = append(busy.Sample, s)
	}
	return busy, idle
}

// printRunTop prints the run's top n functions as export and the UI
// count them: idle left out, unresolved frames counted per module.
func printRunTop(w io.Writer, prof *profile.Profile, n int) {
	busy, idle := withoutIdle(prof)
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
