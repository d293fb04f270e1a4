// Package recorder joins the sampler and the symbolizer: it turns the raw
// records of package profiler into symbolized sample.Sample values and hands
// them to a sink, one at a time, in the order they were read.
//
// Every 5 s the symbolizer forgets the processes that have exited
// (Symbolizer.ForgetExited), so that its process cache holds the live
// processes and those of the last seconds, not thousands of dead ones.
//
// A process's executable mappings come from /proc/PID/maps, read when its
// first record is handled, or, for a process that exited before that, from
// the snapshot the sampler took as it exited (profiler.Maps), handed to the
// symbolizer before the samples of each poll. On kernels that cannot take
// snapshots the sampler wakes the reader for each new process instead, so
// that /proc is read while the process lives. The sampler switches to
// snapshots when it sees many new processes, or as soon as one of them is
// missed: gone before its maps were read.
//
// Each sample carries its weight: the sampling period it was taken at
// (sample.Sample.PeriodNs), which every consumer reads from it.
package recorder

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/heatscope/heatscope/container"
	"github.com/heatscope/heatscope/overhead"
	"github.com/heatscope/heatscope/profiler"
	"github.com/heatscope/heatscope/pyinterp"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/symbolize"
)

// KallsymsPath is where kernel symbols are read from.
const KallsymsPath = "/proc/kallsyms"

// exitSweep is how often the symbolizer forgets the processes that have
// exited, and how long a process must have gone unsampled to be checked:
// under churn the process cache then holds a few seconds of processes.
const exitSweep = 5 * time.Second

// Recorder samples every CPU and symbolizes what it samples.
type Recorder struct {
	prof       *profiler.Profiler
	sym        *symbolize.Symbolizer
	containers *container.Resolver
	// interpreters is the one cache of which binaries hold a CPython,
	// shared by the sampler (setting its Python processes up) and the
	// symbolizer (naming their frames): each binary is read once.
	interpreters *pyinterp.Cache

	// upkeep is the sink's periodic work, for Parts (nil: none).
	upkeep Upkeep

	// change is the last frequency change, for PeriodAt.
	changeMu sync.Mutex
	change   periodChange
}

// periodChange is a change of sampling period at wall time at (Unix ns).
type periodChange struct {
	at, from, to int64
}

// interpreterCacheSize bounds the binaries whose CPython answer (an
// interpreter, or why not one) the recorder's cache remembers.
const interpreterCacheSize = 1024

// Open loads kernel symbols (from symOpts.KernelCacheDir when it holds
// them for this boot) and starts the sampler. Without kernel symbols (no
// CAP_SYSLOG, kptr_restrict) it still records, with kernel frames left as
// addresses, and logs why.
func Open(cfg profiler.Config, symOpts symbolize.Options, log *slog.Logger) (*Recorder, error) {
	cache := symbolize.DefaultKernelCache(symOpts.KernelCacheDir)
	cache.Kallsyms = KallsymsPath
	kernel, cached, err := cache.Load()
	if err != nil {
		log.Warn("kernel frames will not be symbolized", "err", err)
		kernel = nil
	} else {
		log.Debug("kernel symbols", "from cache", cached, "symbols", kernel.Len())
	}
	if cfg.Logger == nil {
		cfg.Logger = log
	}
	if symOpts.Logger == nil {
		symOpts.Logger = log
	}
	if kernel != nil && cfg.OnProgram == nil {
		// The exit snapshot program runs in every exiting task, other
		// BPF programs in the tasks they serve: their frames are named
		// from the kernel's account of them, not by reading kallsyms
		// again for them.
		cfg.OnProgram = kernel.AddProgram
		kernel.ListPrograms(profiler.ListPrograms)
	}
	interpreters := pyinterp.NewCache(interpreterCacheSize)
	if symOpts.Interpreters == nil {
		symOpts.Interpreters = interpreters
	}
	if cfg.Interpreters == nil {
		cfg.Interpreters = interpreters
	}
	sym := symbolize.New(kernel, symOpts)
	if cfg.RecentMaps == nil {
		// The symbolizer reads the maps of every process at its first
		// sample; the unwinder, which wants them of the processes sampled
		// more than once, need not read them a second time.
		cfg.RecentMaps = sym.RecentExecMappings
	}
	prof, err := profiler.Open(cfg)
	if err != nil {
		return nil, err
	}
	return &Recorder{prof: prof, sym: sym, interpreters: interpreters}, nil
}

// LabelContainers makes Run label each sample with its cgroup's container
// metadata from res (nil: no labels). Call it before Run; Run then owns res.
func (r *Recorder) LabelContainers(res *container.Resolver) { r.containers = res }

// OnPoll makes Run call fn on its goroutine after each read of the
// sampler's ring, about ten times a second (profiler.Profiler.OnPoll): the
// place for periodic work such as syncing a store's log, so that the agent
// wakes for it when it wakes anyway. Call it before Run.
func (r *Recorder) OnPoll(fn func()) { r.prof.OnPoll(fn) }

// Run records until ctx is done, then drains the sampler and returns. The
// sample passed to sink is reused after sink returns: copy what you keep
// (its Stack slice may be kept, but is shared with other samples of the
// same stack: it must not be modified). With unwind tables, each user
// frame above the sampled pc is marked with how it was found
// (sample.Frame.Method, from Sample.Unwind). A sample of a Python process
// whose Python frames the sampler read has them in place of the
// interpreter's evaluation-loop frames (symbolize.Symbolizer.Python), read
// now, while the process likely lives. Each sample is stamped with
// the period it weighs (Sample.PeriodNs, see PeriodAt): once a sample
// taken at a new period is stamped, the samples after it are too, even
// one from another CPU a little older than the change, so that the stamps
// only move forward and a store cuts its head once per change.
func (r *Recorder) Run(ctx context.Context, sink func(*sample.Sample)) error {
	var s sample.Sample
	var sweptNs int64
	var marked markedStacks
	var snap []symbolize.SnapshotMapping
	stamp := r.PeriodNs()
	// With unwind tables, each sample says how its user frames were found.
	tables := r.prof.Unwind() == profiler.UnwindDWARF
	r.prof.OnMaps(func(m *profiler.Maps) {
		if !m.Complete {
			return // /proc, if the process lives, or nothing
		}
		snap = snap[:0]
		for _, mp := range m.Mappings {
			snap = append(snap, symbolize.SnapshotMapping{Start: mp.Start, End: mp.End, Offset: mp.Offset,
				Dev: mp.Dev, Inode: mp.Inode, CtimeNs: mp.CtimeNs, VDSO: mp.Kind == profiler.MappingVDSO})
		}
		r.sym.SetMaps(m.PID, snap)
	})
	err := r.prof.Run(ctx, func(rec *profiler.Record, wallNs int64) {
		if wallNs-sweptNs >= exitSweep.Nanoseconds() {
			r.sym.ForgetExited(exitSweep)
			marked.clear()
			sweptNs = wallNs
		}
		if !r.sym.Has(rec.PID, rec.Comm) {
			// A new pid. It may have exited since this poll's snapshots
			// were read; if not, Observe reads its /proc/PID/maps, and
			// notes its command name as they were read: a sample under
			// another one follows an exec (see Symbolizer.Has).
			r.prof.DrainMaps()
			if !r.sym.Observe(rec.PID, rec.Comm) && len(rec.User) > 0 {
				// Gone before anyone read its mappings: its user
				// frames stay unknown. Snapshots would have kept them.
				r.prof.MissedProcess()
			}
		}
		stack, shared := r.sym.SymbolizeShared(rec.PID, rec.Kernel, rec.User)
		s = sample.Sample{
			Time:     wallNs,
			CPU:      rec.CPU,
			PID:      rec.PID,
			TID:      rec.TID,
			Comm:     rec.Comm,
			CgroupID: rec.CgroupID,
			Stack:    stack,
		}
		// The guard changed the frequency: the ring may still hold a poll
		// interval's worth taken at the old period. Only forward.
		if p := r.PeriodAt(wallNs); p != stamp && p == r.PeriodNs() {
			stamp = p
		}
		s.PeriodNs = stamp
		if tables {
			s.Unwind = sample.Unwind{UserFrames: len(rec.User), Table: rec.UserDWARF}
			// Each user frame says how it was found, for the store and
			// the pprof labels: on a copy, as the symbolizer's frames
			// are shared between samples (one copy per stack and bits).
			s.Stack = marked.mark(s.Stack, &s.Unwind, shared)
		}
		if len(rec.Python) > 0 {
			// The thread's Python frames in place of the interpreter's
			// evaluation loop, on a new slice. The user frames are no
			// longer the last len(rec.User) of the stack: each says how
			// it was found (marked above), Unwind no longer can.
			s.Stack = r.sym.Python(rec.PID, s.Stack, len(rec.Kernel), rec.Python)
			s.Unwind = sample.Unwind{}
		}
		if r.containers != nil {
			s.Container = r.containers.Lookup(rec.CgroupID)
		}
		sink(&s)
	})
	if err != nil {
		return fmt.Errorf("record: %w", err)
	}
	return nil
}

// Stats returns the sampler's counters.
func (r *Recorder) Stats() (profiler.Stats, error) { return r.prof.Stats() }

// Counters returns the sampler's counters without the BPF run times
// (profiler.Profiler.Counters): cheaper, for frequent progress lines.
func (r *Recorder) Counters() (profiler.Stats, error) { return r.prof.Counters() }

// PeriodNs is the sampling period now, in nanoseconds of CPU time.
func (r *Recorder) PeriodNs() int64 { return sample.PeriodOf(int64(r.prof.Frequency())) }

// Shed gives up loading unwind tables not loaded yet, the work the
// overhead guard gives up before it halves the sampling rate
// (overhead.Shedder, Profiler.ShedTables).
func (r *Recorder) Shed() (string, bool) { return r.prof.ShedTables() }

// Restore loads unwind tables again after Shed.
func (r *Recorder) Restore() { r.prof.RestoreTables() }

// Upkeep is the periodic work of where the samples go, done in bursts:
// the store's (store.DB.Upkeep), its CPU time so far and the same with
// each burst spread over the time it serves.
type Upkeep interface {
	Upkeep() (cpu, spread time.Duration)
}

// TimeUpkeep makes Parts report u's periodic work as the part PartStore.
// Call it before Parts is first called.
func (r *Recorder) TimeUpkeep(u Upkeep) { r.upkeep = u }

// Parts returns the CPU time so far of the agent's work that does not fall
// with the sampling rate (overhead.Config.Parts): new processes (their
// mappings read by the symbolizer and the unwinder, their unwind entries
// written, and the BPF program that snapshots them as they exit), symbol
// tables and unwind tables loaded. A binary's symbols and unwind table are
// read or compiled once and kept (in memory, and in the cache directory
// for later runs): the guard judges them spread over a couple of minutes
// (overhead.Part.OneOff), not in the window a table was compiled in.
//
// The samples' own path is a part too, the one that falls with the rate:
// the ring's drains (each sample decoded, symbolized, handed on to be
// stored), the symbolizer's work on new processes and binaries inside
// them left out; and so is the sampling BPF program's run at each sample
// (counted while kernel.bpf_stats_enabled is on; the kernel charges it
// to the sampled tasks, and the overhead guard's meter adds it), 0.32% of
// one CPU at 99 Hz on two CPUs, which was counted in the guard's "rest". So is the store's periodic work (TimeUpkeep): its WAL
// writes, head cuts, block writes and compaction fall with the rate too,
// but come in bursts, a block every 2 minutes, which the guard judges
// spread over the time they serve (overhead.Part.Spreads).
func (r *Recorder) Parts() []overhead.Part {
	sym := r.sym.Stats()
	processes := sym.ProcessesCPU
	var tables, drains, sampler time.Duration
	if st, err := r.prof.Stats(); err == nil {
		processes += st.Unwind.ProcessesCPU + st.ExitRunTime
		tables = st.Unwind.TablesCPU
		drains = st.DrainCPU
		sampler = st.BPFRunTime
	}
	parts := []overhead.Part{
		{Name: PartSamples, CPU: max(0, drains-sym.SymbolsCPU-sym.ProcessesCPU), PerSample: true},
		{Name: PartSampler, CPU: sampler, PerSample: true},
		{Name: PartProcesses, CPU: processes},
		{Name: PartSymbols, CPU: sym.SymbolsCPU, OneOff: true},
		{Name: PartTables, CPU: tables, OneOff: true},
	}
	if r.upkeep != nil {
		cpu, spread := r.upkeep.Upkeep()
		parts = append(parts, overhead.Part{Name: PartStore, CPU: cpu, PerSample: true, Spreads: true, Spread: spread})
	}
	return parts
}

// The names of Parts.
const (
	PartSamples   = "samples"
	PartSampler   = "BPF sampler"
	PartProcesses = "new processes"
	PartSymbols   = "symbol tables"
	PartTables    = "unwind tables"
	PartStore     = "the store"
)

// Frequency is the sampling frequency now, in Hz per CPU.
func (r *Recorder) Frequency() int { return r.prof.Frequency() }

// SetFrequency changes the sampling frequency of the running sampler.
func (r *Recorder) SetFrequency(hz int) error {
	from := r.PeriodNs()
	if err := r.prof.SetFrequency(hz); err != nil {
		return err
	}
	// After the ioctls: a sample taken before then closes an old-period
	// interval, and the first at the new period comes a new period after
	// its CPU's ioctl, long after this.
	r.changeMu.Lock()
	r.change = periodChange{at: time.Now().UnixNano(), from: from, to: r.PeriodNs()}
	r.changeMu.Unlock()
	return nil
}

// PeriodAt is the sampling period, in nanoseconds of CPU time, of a
// sample taken at wall time t (Unix ns), as far as the last frequency
// change goes: the old period before the change, the new one from it.
// Changing an event's period (PERF_EVENT_IOC_PERIOD) restarts its timer
// at the new period: after a raise from 2 to 99 Hz each CPU's next sample
// came 10 ms later, not at the old 500 ms schedule, and weighing the
// samples of one old period after the change at the old period made a
// CPU's 400 ms hold 19.5 s of CPU time (TestPeriodAfterARaise; the
// guard's 24 to 99 Hz: four samples of 41.7 ms in 40 ms). The first
// sample after the change closes the new period and what was left of the
// old: weighed at the new, it is counted short, never over. Samples read
// from the ring after a change were often taken before it: what they
// weigh follows their own time, not the time they are read.
func (r *Recorder) PeriodAt(t int64) int64 {
	r.changeMu.Lock()
	c := r.change
	r.changeMu.Unlock()
	if c.at != 0 && t < c.at {
		return c.from
	}
	return r.PeriodNs()
}

// SymbolizerStats returns the symbolizer's counters and cache sizes.
func (r *Recorder) SymbolizerStats() symbolize.Stats { return r.sym.Stats() }

// Alive returns nil while the sampler's ring is being read: the last read
// is less than maxAge old. Otherwise it says how long ago it was.
func (r *Recorder) Alive(maxAge time.Duration) error {
	if age := time.Since(r.prof.LastRead()); age > maxAge {
		return fmt.Errorf("the sample ring was last read %v ago", age.Round(time.Millisecond))
	}
	return nil
}

// Close stops sampling and frees its resources.
func (r *Recorder) Close() error { return r.prof.Close() }
