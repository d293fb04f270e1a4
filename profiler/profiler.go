package profiler

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/bits"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/heatscope/heatscope/bpf"
	"github.com/heatscope/heatscope/internal/workclock"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/symbolize"
	"github.com/heatscope/heatscope/unwind"
	"github.com/heatscope/heatscope/wallclock"
)

// Stacks selects which stacks the BPF program walks.
type Stacks int

// Stack selections.
const (
	// StacksAll records kernel and user frames.
	StacksAll Stacks = iota
	// StacksKernel records kernel frames only (cheaper: no user stack walk).
	StacksKernel
	// StacksUser records user frames only.
	StacksUser
)

// ParseStacks parses "all", "kernel" or "user".
func ParseStacks(s string) (Stacks, error) {
	switch s {
	case "all", "":
		return StacksAll, nil
	case "kernel":
		return StacksKernel, nil
	case "user":
		return StacksUser, nil
	}
	return 0, fmt.Errorf("stacks %q: want all, kernel or user", s)
}

// Config configures a Profiler. The zero value is not valid: use Frequency.
type Config struct {
	// Frequency is the sampling rate per CPU in Hz (1 to MaxFrequency).
	Frequency int
	// CPUs to sample; nil means every online CPU.
	CPUs []int
	// PIDs, when not empty, limits sampling to these processes.
	PIDs []uint32
	// CgroupID, when not zero, limits sampling to this cgroup v2.
	CgroupID uint64
	// Stacks selects kernel, user or both stacks.
	Stacks Stacks
	// PollInterval is how often the ring buffer is read (default 250 ms).
	PollInterval time.Duration
	// RingBufferSize is the ring size in bytes, a power of two; 0 sizes it
	// for half a second of worst-case (2 KiB) records on every CPU.
	RingBufferSize int
	// BTFPath names a BTF file to use instead of /sys/kernel/btf/vmlinux.
	BTFPath string
	// BPFStats turns on the kernel's BPF run-time statistics so Stats can
	// report the program's own CPU time (it costs two clock reads a run).
	BPFStats bool
	// Logger receives what the profiler has to say (nil: nothing).
	Logger *slog.Logger
	// Unwind selects how user stacks are walked (default UnwindFP).
	Unwind Unwind
	// UnwindCacheDir keeps compiled unwind tables between runs ("": no
	// cache).
	UnwindCacheDir string
	// UnwindCacheMaxBytes bounds the table files in UnwindCacheDir (0:
	// unwind.DefaultCacheMaxBytes); the least recently used are removed.
	UnwindCacheMaxBytes int64
	// UnwindMaxBytes bounds the unwind tables loaded into BPF maps (0:
	// DefaultUnwindMaxBytes); the least recently used are evicted.
	UnwindMaxBytes int64
	// RecentMaps, when set, hands the unwinder another reader's read of
	// a process's /proc/PID/maps (the symbolizer's, which reads the maps
	// of every new process it is given samples of): it appends to dst
	// the executable mappings of pid if they were read at or after since,
	// and reports whether they were, saying which ones the process's
	// sampled stacks passed through (symbolize.ExecMapping.Used): only those get
	// tables. The unwinder reads /proc itself when it gets false, and
	// then gives every mapping its table. Called from the unwinder's
	// goroutine.
	RecentMaps func(dst []symbolize.ExecMapping, pid uint32, since time.Time) ([]symbolize.ExecMapping, bool)
	// OnProgram, when set, is told of the function of each BPF program
	// the profiler loads that runs in the context of the tasks it samples
	// (the exit snapshot program, in every exiting task), once it is
	// loaded, so that the symbolizer names its frames as kallsyms does
	// without reading kallsyms (symbolize.Kernel.AddProgram). It may be
	// called from another goroutine than Run's.
	OnProgram func(symbolize.ProgramSymbol)
	// Interpreters says which binaries hold a CPython, each binary read
	// once: the cache the symbolizer names Python frames from
	// (symbolize.Options.Interpreters), so that neither reads a binary
	// the other has (nil: a cache of the profiler's own).
	Interpreters Interpreters

	// forceIoctl attaches with PERF_EVENT_IOC_SET_BPF even where BPF
	// links work, so that tests cover the fallback.
	forceIoctl bool
	// noMapsSnapshot never loads the exit snapshot program, as on a
	// kernel that cannot run it: every new process wakes the agent.
	noMapsSnapshot bool
	// refuseTables makes the table maps check (checkTableMaps) offer
	// the kernel a table unlike the template, which it refuses, as
	// Debian 12's 6.1 refused every table: tests see the fallback.
	refuseTables bool
	// noPython finds no Python interpreter: processes' entries name none,
	// and the sampler walks no Python frames (the cost benchmark).
	noPython bool
	// skewTables gives every unwind table a wrong load bias: the walk
	// finds no row, as on a kernel where it cannot work (tests).
	skewTables bool
	// refuseProgram offers the verifier a table-walking program it
	// refuses, as a kernel might the real one: tests see the fallback.
	refuseProgram bool
	// snapshotLoadDelay delays the load of the exit snapshot program, as
	// a starved machine does, so that tests see the ring reader go on.
	snapshotLoadDelay time.Duration
}

// MaxFrequency is the highest sampling frequency Open accepts.
const MaxFrequency = 10000

// DefaultPollInterval is how often the ring buffer is read by default.
// Each poll wakes the agent (and with it the Go runtime's sysmon thread)
// and costs a few system calls whatever it reads: at 100 ms those were
// about a third of the agent's CPU on a node where both CPUs ran one
// process each (issue 22). A sample waits for the next poll to be seen,
// so this is also how late the live views are at most.
const DefaultPollInterval = 250 * time.Millisecond

// Counters are the BPF program's counters, for one CPU or summed.
type Counters struct {
	// Samples is how many samples passed the filters.
	Samples uint64
	// Lost is how many records the ring buffer had no room for.
	Lost uint64
	// KernelStackErrors and UserStackErrors count failed stack walks.
	KernelStackErrors, UserStackErrors uint64
	// Filtered is how many samples the pid or cgroup filter skipped.
	Filtered uint64
	// DWARFWalks counts user stacks walked with unwind tables, FPWalks
	// those walked with frame pointers because the process's tables
	// were not in yet (both zero with UnwindFP); UnsupportedRows the
	// walks that stopped at a row they cannot follow, TruncatedWalks
	// those that reached the frame limit.
	DWARFWalks, FPWalks, UnsupportedRows, TruncatedWalks uint64
	// PythonWalks counts the samples of processes that run a CPython
	// the agent found (UnwindDWARF only); of those, PythonNoThread the
	// ones of a thread with no thread state (a thread Python does not
	// know), PythonReadErrors those whose frame chain a failed read cut,
	// PythonTruncated those with more frames than MaxPythonFrames.
	PythonWalks, PythonNoThread, PythonReadErrors, PythonTruncated uint64
}

func (c *Counters) add(o Counters) {
	c.Samples += o.Samples
	c.Lost += o.Lost
	c.KernelStackErrors += o.KernelStackErrors
	c.UserStackErrors += o.UserStackErrors
	c.Filtered += o.Filtered
	c.DWARFWalks += o.DWARFWalks
	c.FPWalks += o.FPWalks
	c.UnsupportedRows += o.UnsupportedRows
	c.TruncatedWalks += o.TruncatedWalks
	c.PythonWalks += o.PythonWalks
	c.PythonNoThread += o.PythonNoThread
	c.PythonReadErrors += o.PythonReadErrors
	c.PythonTruncated += o.PythonTruncated
}

// Stats is a snapshot of the sampler's counters.
type Stats struct {
	// Counters summed over all CPUs.
	Counters
	// PerCPU holds each sampled CPU's counters, keyed by CPU number.
	PerCPU map[int]Counters
	// Received is how many records the agent read from the ring.
	Received uint64
	// DecodeErrors counts records that failed to decode.
	DecodeErrors uint64
	// Wakeups counts the times the BPF program woke the agent before its
	// next poll: to read a new process's /proc/PID/maps, or to set up a
	// new image of an executable named python* (a Python process's).
	Wakeups uint64
	// BPFRunTime and BPFRunCount are the program's accumulated run time
	// and run count, counted while kernel.bpf_stats_enabled is on (zero
	// otherwise): Config.BPFStats turns it on.
	BPFRunTime  time.Duration
	BPFRunCount uint64
	// ExitRunTime and ExitRunCount are the same for the program that
	// snapshots exiting processes' mappings (zero without it).
	ExitRunTime  time.Duration
	ExitRunCount uint64
	// DrainCPU is the agent's CPU time reading the ring, the handler's
	// included (Run: symbolizing and storing each sample).
	DrainCPU time.Duration
	// SnapshotLoad is how long loading and attaching the exit snapshot
	// program took, on a goroutine of its own (zero until it is in).
	SnapshotLoad time.Duration
	// RingBufferSize is the ring's size and RingBufferUsed the bytes
	// waiting in it.
	RingBufferSize, RingBufferUsed int
	// Unwind describes the unwind tables (zero with UnwindFP).
	Unwind UnwindStats
}

// Profiler samples stacks on every CPU with the BPF program.
type Profiler struct {
	cfg  Config
	objs bpf.ProfileObjects
	// drainCPU times each drain of the ring (Stats.DrainCPU).
	drainCPU workclock.Clock
	// eventsMu guards events: SetFrequency may run beside Run.
	eventsMu sync.Mutex
	events   []*perfEvent
	ring     *ring
	waiter   *fdWaiter
	polled   func()
	// spec and kernelTypes are what load loaded the sampler from, kept to
	// load the exit program from. mapsRing carries the mapping snapshots
	// of exiting processes, taken by the exitLink program (both nil until
	// enableSnapshots); maps is the decoded snapshot handed to onMaps.
	spec        *ebpf.CollectionSpec
	kernelTypes *btf.Spec
	// btfCache holds the kernel's BTF for the loads, parsed at most once:
	// the exit program's CO-RE relocations, its attach target and
	// exitTracepointSeesMM each parsed it (two parses, most of that load
	// under churn). Dropped once the exit program is loaded.
	btfCache *btf.Cache
	// churnSince and churnWakeups start the second over which the
	// wakeups that call for snapshots are counted; missedProcess is set
	// when a process exited before its maps were read (MissedProcess);
	// snapshotsTried is set once enableSnapshots ran.
	churnSince     time.Time
	churnWakeups   uint64
	missedProcess  bool
	snapshotsTried bool
	mapsRing       *ring
	// snapLoad is the exit program's load under way (nil: none).
	snapLoad     *snapshotLoad
	exitProg     *ebpf.Program
	exitLink     link.Link
	maps         Maps
	onMaps       func(*Maps)
	clock        *wallclock.Clock
	statsEnabled interface{ Close() error }
	// unwinder loads unwind tables (nil with UnwindFP).
	unwinder *unwinder
	// tableSpec is what the unwinder makes each table map from.
	tableSpec *ebpf.MapSpec
	// auto is set when Config.Unwind was UnwindAuto: a failed check
	// falls back to frame pointers (fallback says which) instead of
	// failing Open.
	auto     bool
	fallback Fallback
	// heat counts each pid's samples in one drain, for the unwinder: kept
	// and cleared, not made anew for every drain (the reader's goroutine
	// only).
	heat map[uint32]uint64

	received     atomic.Uint64
	decodeErrors atomic.Uint64
	wakeups      atomic.Uint64
	// snapshotLoadTime is Stats.SnapshotLoad, in nanoseconds.
	snapshotLoadTime atomic.Int64
	// frequency is the sampling frequency now (SetFrequency changes it).
	frequency atomic.Int64
	// lastDrain is when the ring was last read (Unix ns), for Alive.
	lastDrain atomic.Int64
}

// Open loads the BPF program, opens a sampling event on every selected
// CPU and attaches the program to each. Errors name what is missing:
// capabilities, BTF, or perf event support.
func Open(cfg Config) (*Profiler, error) {
	if cfg.Frequency < 1 || cfg.Frequency > MaxFrequency {
		return nil, fmt.Errorf("frequency %d Hz: want 1 to %d", cfg.Frequency, MaxFrequency)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.CPUs == nil {
		cpus, err := OnlineCPUs()
		if err != nil {
			return nil, err
		}
		cfg.CPUs = cpus
	}
	if cfg.RingBufferSize == 0 {
		cfg.RingBufferSize = ringSizeFor(len(cfg.CPUs), cfg.Frequency)
	}
	if cfg.RingBufferSize < os.Getpagesize() || bits.OnesCount(uint(cfg.RingBufferSize)) != 1 {
		return nil, fmt.Errorf("ring buffer size %d: want a power of two of at least %d", cfg.RingBufferSize, os.Getpagesize())
	}
	kernelTypes, err := loadBTF(cfg.BTFPath)
	if err != nil {
		return nil, err
	}
	_ = rlimit.RemoveMemlock() // needed only before Linux 5.11; fails harmlessly after
	// Probed, not assumed from the version: a kernel without the ring
	// buffer fails here with its name, not at the program's load.
	if err := features.HaveMapType(ebpf.RingBuf); errors.Is(err, ebpf.ErrNotSupported) {
		return nil, fmt.Errorf("the kernel lacks the BPF ring buffer the sampler writes to (Linux 5.8): %w", err)
	}

	p := &Profiler{cfg: cfg, clock: wallclock.New(), auto: cfg.Unwind == UnwindAuto, btfCache: btf.NewCache()}
	if cfg.Unwind != UnwindFP {
		if err := dwarfSupported(); err != nil {
			if err := p.fallBack(CheckHelpers, err); err != nil {
				return nil, err
			}
		} else {
			p.cfg.Unwind = UnwindDWARF
		}
	}
	p.frequency.Store(int64(cfg.Frequency))
	p.lastDrain.Store(time.Now().UnixNano())
	if err := p.load(kernelTypes); err != nil {
		return nil, err
	}
	if p.cfg.Unwind == UnwindDWARF {
		periodNs := func() int64 { return sample.PeriodOf(p.frequency.Load()) }
		p.unwinder = newUnwinder(&p.objs.ProfileMaps, p.objs.Asks, p.tableSpec,
			unwind.Cache{Dir: cfg.UnwindCacheDir, MaxBytes: cfg.UnwindCacheMaxBytes, Log: cfg.Logger}, cfg.UnwindMaxBytes, periodNs, cfg.RecentMaps, cfg.Interpreters, cfg.Logger)
		if cfg.skewTables {
			p.unwinder.skew = 1 << 40
		}
		if cfg.noPython {
			p.unwinder.python = nil
		}
		p.unwinder.start()
	}
	if cfg.BPFStats {
		closer, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
		if err != nil {
			p.Close()
			return nil, permissionError("enable BPF run-time statistics", err)
		}
		p.statsEnabled = closer
	}
	if err := p.openEvents(); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// ringSizeFor sizes the ring for a second of 2 KiB records on every CPU
// (four poll intervals), between 1 MiB and 64 MiB.
func ringSizeFor(cpus, hz int) int {
	want := cpus * hz * 2048
	size := 1 << 20
	for size < want && size < 64<<20 {
		size <<= 1
	}
	return size
}

// kernelBTFPath is where the running kernel exposes its BTF.
const kernelBTFPath = "/sys/kernel/btf/vmlinux"

// loadBTF returns the BTF to load the program against: the file given with
// --btf, or nil for the running kernel's, which it checks is present. The
// check reads only the header: cilium/ebpf parses the kernel's BTF lazily,
// if and when CO-RE relocations need it (parsing it all here cost 10 ms and
// several MB for nothing).
func loadBTF(path string) (*btf.Spec, error) {
	if path != "" {
		spec, err := btf.LoadSpec(path)
		if err != nil {
			return nil, fmt.Errorf("load BTF from %s: %w", path, err)
		}
		return spec, nil
	}
	if err := checkBTFHeader(kernelBTFPath); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoBTF, err)
	}
	return nil, nil
}

// checkBTFHeader checks that path starts with the BTF magic number.
func checkBTFHeader(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var magic [2]byte
	if _, err := io.ReadFull(f, magic[:]); err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	if binary.LittleEndian.Uint16(magic[:]) != 0xeb9f {
		return fmt.Errorf("%s: not BTF (magic %#x)", path, magic)
	}
	return nil
}

// sampleObjects are the BPF objects the sampler needs: every map, and the
// perf_event program. The exit snapshot program is loaded later, when
// churn calls for it (enableSnapshots).
type sampleObjects struct {
	bpf.ProfileMaps
	Profile *ebpf.Program  `ebpf:"profile"`
	Asks    *ebpf.Variable `ebpf:"asks"`
}

// load loads the sampler and keeps its spec for the exit program.
func (p *Profiler) load(kernelTypes *btf.Spec) error {

	spec, err := bpf.LoadProfile()
	if err != nil {
		return fmt.Errorf("load BPF spec: %w", err)
	}
	spec.Maps[bpf.ProfileMapEvents].MaxEntries = uint32(p.cfg.RingBufferSize)
	if p.cfg.Unwind == UnwindDWARF {
		outer := spec.Maps[bpf.ProfileMapUnwindTables]
		p.tableSpec = tableMapSpec(outer)
		check := p.tableSpec
		if p.cfg.refuseTables {
			check = check.Copy()
			check.ValueSize += 8 // not the template's: the kernel refuses it
		}
		if err := checkTableMaps(outer, check); err != nil {
			if err := p.fallBack(CheckTableMaps, err); err != nil {
				return err
			}
		}
	}
	if p.cfg.Unwind == UnwindDWARF {
		// The sampler is the table-walking program; walk_frames holds
		// each CPU's walk in progress, walk_cache the rows it found last.
		spec.Programs[bpf.ProfileProgProfile] = spec.Programs[bpf.ProfileProgProfileDwarf]
		if p.cfg.refuseProgram {
			// Reads a register never written: the verifier refuses it.
			spec.Programs[bpf.ProfileProgProfile] = spec.Programs[bpf.ProfileProgProfileDwarf].Copy()
			spec.Programs[bpf.ProfileProgProfile].Instructions = asm.Instructions{asm.Mov.Reg(asm.R0, asm.R2), asm.Return()}
		}
		cpus, err := ebpf.PossibleCPU()
		if err != nil {
			return fmt.Errorf("count possible CPUs: %w", err)
		}
		spec.Maps[bpf.ProfileMapWalkFrames].MaxEntries = uint32(cpus * maxWalkFrames)
		spec.Maps[bpf.ProfileMapWalkCache].MaxEntries = uint32(cpus * walkCacheSlots)
		spec.Maps[bpf.ProfileMapPyFrames].MaxEntries = uint32(cpus * MaxPythonFrames)
	}
	if n := len(p.cfg.PIDs); n > 0 {
		spec.Maps[bpf.ProfileMapTargetPids].MaxEntries = uint32(n)
	}
	vars := map[string]any{
		bpf.ProfileVarFilterPids:     boolByte(len(p.cfg.PIDs) > 0),
		bpf.ProfileVarFilterCgroupId: p.cfg.CgroupID,
		bpf.ProfileVarCollectKernel:  boolByte(p.cfg.Stacks != StacksUser),
		bpf.ProfileVarCollectUser:    boolByte(p.cfg.Stacks != StacksKernel),
	}
	for name, v := range vars {
		if err := spec.Variables[name].Set(v); err != nil {
			return fmt.Errorf("set BPF option %s: %w", name, err)
		}
	}
	opts := &ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{KernelTypes: kernelTypes}, Cache: p.btfCache}
	var sampler sampleObjects
	if err := spec.LoadAndAssign(&sampler, opts); err != nil {
		var verr *ebpf.VerifierError
		if (errors.As(err, &verr) || errors.Is(err, ebpf.ErrNotSupported)) && p.cfg.Unwind == UnwindDWARF && p.auto {
			// The table-walking program is the larger, and the one
			// that needs more of the kernel: the sampler may still
			// load (a missing privilege fails both alike). The
			// error's short form (%v: the verifier's last lines).
			if err := p.fallBack(CheckProgram, fmt.Errorf("the kernel refuses the table-walking program: %v", err)); err != nil {
				return err
			}
			return p.load(kernelTypes)
		}
		if verr != nil {
			return fmt.Errorf("load BPF program: verifier: %+v", verr)
		}
		return permissionError("load BPF program", err)
	}
	p.objs = bpf.ProfileObjects{ProfileMaps: sampler.ProfileMaps, ProfilePrograms: bpf.ProfilePrograms{Profile: sampler.Profile},
		ProfileVariables: bpf.ProfileVariables{Asks: sampler.Asks}}
	p.spec, p.kernelTypes = spec, kernelTypes
	for _, pid := range p.cfg.PIDs {
		if err := p.objs.TargetPids.Put(pid, uint8(1)); err != nil {
			p.objs.Close()
			return fmt.Errorf("add pid %d to the filter: %w", pid, err)
		}
	}
	return nil
}

func boolByte(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

func (p *Profiler) openEvents() error {
	var err error
	if p.ring, err = openRing(p.objs.Events.FD(), p.cfg.RingBufferSize); err != nil {
		return err
	}
	if p.waiter, err = newRingWaiter(p.objs.Events.FD()); err != nil {
		return err
	}
	period := uint64(sample.PeriodOf(int64(p.cfg.Frequency)))
	p.eventsMu.Lock()
	defer p.eventsMu.Unlock()
	for _, cpu := range p.cfg.CPUs {
		fd, err := openCPUClock(cpu, period)
		if err != nil {
			return err
		}
		l, err := attach(fd, p.objs.Profile, p.cfg.forceIoctl)
		if err != nil {
			unix.Close(fd)
			return permissionError(fmt.Sprintf("attach sampler on CPU %d", cpu), err)
		}
		p.events = append(p.events, &perfEvent{cpu: cpu, fd: fd, link: l})
	}
	return nil
}

// OnPoll makes Run call fn on its own goroutine after each read of the
// ring (about every PollInterval, and on a new process's first sample).
// Work that must happen periodically while recording, like syncing a log,
// belongs here rather than on a timer of its own: see Run. Call it before
// Run.
func (p *Profiler) OnPoll(fn func()) { p.polled = fn }

// Run reads records until ctx is done, calling handle for each with its
// wall-clock time. The Record is reused: handle must copy what it keeps.
// When ctx is done, Run stops the sampling events and drains what is left in
// the ring before it returns, so a clean stop loses no sample.
//
// The ring is read every PollInterval, when a timerfd expires, and at once
// when the BPF program forces a wakeup (a new process); goroutines wait for
// both in the netpoller. Neither path makes a syscall per poll, and there is
// no Go timer: with every P idle, the runtime's sysmon thread sleeps until
// the next Go timer or syscall, so a poll wakes one thread, not two.
func (p *Profiler) Run(ctx context.Context, handle func(r *Record, wallNs int64)) error {
	timer, err := newPollTimer(p.cfg.PollInterval)
	if err != nil {
		return err
	}
	wake := make(chan struct{}, 1)
	var waiting sync.WaitGroup
	for _, w := range []*fdWaiter{p.waiter, timer} {
		waiting.Go(func() {
			for w.wait() == nil {
				if w == p.waiter {
					p.wakeups.Add(1)
				}
				select {
				case wake <- struct{}{}:
				default:
				}
			}
		})
	}
	defer func() { p.waiter.close(); timer.close(); waiting.Wait() }()
	var rec Record
	for {
		select {
		case <-ctx.Done():
			p.closeEvents()
			p.drain(&rec, handle)
			return nil
		case <-wake:
		}
		p.drain(&rec, handle)
		if p.unwinder != nil {
			p.unwinder.kick()
		}
		p.maybeEnableSnapshots(time.Now())
		if p.polled != nil {
			p.polled()
		}
	}
}

// drain reads every complete record in the ring.
func (p *Profiler) drain(rec *Record, handle func(*Record, int64)) {
	span := p.drainCPU.Start()
	defer span.Stop()
	p.lastDrain.Store(time.Now().UnixNano())
	p.clock.MaybeMeasure()
	// Snapshots first: each is written before the sample that announced
	// its process.
	p.DrainMaps()
	if p.unwinder != nil {
		// Before the records: the mappings read for the records of
		// this drain (the symbolizer's) are then at least as recent as
		// the samples that asked for them (Config.RecentMaps).
		p.unwinder.take(true)
	}
	var heat map[uint32]uint64
	var tableFrames, fpFrames uint64
	if p.unwinder != nil {
		if p.heat == nil {
			p.heat = map[uint32]uint64{}
		}
		heat = p.heat
		clear(heat)
	}
	oldest := int64(math.MaxInt64) // the wall time of the drain's oldest sample
	n := p.ring.read(func(b []byte) {
		if err := rec.Decode(b); err != nil {
			p.decodeErrors.Add(1)
			return
		}
		wall := p.clock.Wall(int64(rec.KernelTime))
		if heat != nil {
			heat[rec.PID]++
			oldest = min(oldest, wall)
			if n := len(rec.User) - 1; n > 0 {
				t := uint64(tableBits(rec.UserDWARF, n))
				tableFrames += t
				fpFrames += uint64(n) - t
			}
		}
		handle(rec, wall)
	})
	if p.unwinder != nil {
		p.unwinder.drained()
		if len(heat) > 0 {
			p.unwinder.sampled(heat, tableFrames, fpFrames, time.Unix(0, oldest))
		}
	}
	p.received.Add(uint64(n))
}

// tableBits counts the frames of 1..n found with tables. The walk sets a
// frame's bit as it finds the frame, so a stack that ends at the outermost
// frame (a return address of 0) has one bit past its last frame.
func tableBits(b [2]uint64, n int) int {
	lo, hi := b[0], b[1]
	if n < 64 {
		lo &= 1<<n - 1
	}
	switch {
	case n <= 64:
		hi = 0
	case n < 128:
		hi &= 1<<(n-64) - 1
	}
	return bits.OnesCount64(lo) + bits.OnesCount64(hi)
}

// Stats returns the program's counters, the agent's read counters and the
// BPF programs' run times.
func (p *Profiler) Stats() (Stats, error) {
	s, err := p.Counters()
	if err != nil {
		return s, err
	}
	// The kernel counts run time while kernel.bpf_stats_enabled is on,
	// whether Config.BPFStats or someone else (sysctl) turned it on.
	if ps, err := p.objs.Profile.Stats(); err == nil {
		s.BPFRunTime, s.BPFRunCount = ps.Runtime, ps.RunCount
	}
	if p.exitProg != nil {
		if ps, err := p.exitProg.Stats(); err == nil {
			s.ExitRunTime, s.ExitRunCount = ps.Runtime, ps.RunCount
		}
	}
	return s, nil
}

// Counters is Stats without the run times, which cost the agent a program
// info query each: one map read, cheap enough for a progress line every
// second.
func (p *Profiler) Counters() (Stats, error) {
	var perCPU []bpf.ProfileHsCounters
	if err := p.objs.Stats.Lookup(uint32(0), &perCPU); err != nil {
		return Stats{}, fmt.Errorf("read BPF counters: %w", err)
	}
	s := Stats{
		PerCPU:         make(map[int]Counters, len(p.cfg.CPUs)),
		Received:       p.received.Load(),
		DecodeErrors:   p.decodeErrors.Load(),
		Wakeups:        p.wakeups.Load(),
		SnapshotLoad:   time.Duration(p.snapshotLoadTime.Load()),
		DrainCPU:       p.drainCPU.Total(),
		RingBufferSize: p.cfg.RingBufferSize,
		RingBufferUsed: p.ring.used(),
	}
	for _, cpu := range p.cfg.CPUs {
		if cpu >= len(perCPU) {
			continue
		}
		v := perCPU[cpu]
		c := Counters{Samples: v.Samples, Lost: v.Lost, KernelStackErrors: v.KernelStackErrors,
			UserStackErrors: v.UserStackErrors, Filtered: v.Filtered, DWARFWalks: v.DwarfWalks,
			FPWalks: v.FpWalks, UnsupportedRows: v.UnsupportedRows, TruncatedWalks: v.TruncatedWalks,
			PythonWalks: v.PyWalks, PythonNoThread: v.PyNoThread, PythonReadErrors: v.PyReadErrors, PythonTruncated: v.PyTruncated}
		s.PerCPU[cpu] = c
		s.add(c)
	}
	if p.unwinder != nil {
		s.Unwind = p.unwinder.Stats()
	}
	if p.fallback.Check != "" {
		s.Unwind.Fallback = p.fallback
	}
	return s, nil
}

// Unwind returns how user stacks are walked: UnwindFP or UnwindDWARF
// (UnwindAuto is resolved by Open).
func (p *Profiler) Unwind() Unwind { return p.cfg.Unwind }

// fallBack handles a check that found the table walk cannot work here:
// with --unwind auto user stacks are walked with frame pointers, with a
// warning naming the check and its finding (kept for Stats); with
// --unwind dwarf it is Open's error.
func (p *Profiler) fallBack(check string, err error) error {
	if !p.auto {
		return fmt.Errorf("--unwind dwarf: %w", err)
	}
	p.fallback = Fallback{Check: check, Reason: err.Error()}
	p.cfg.Unwind = UnwindFP
	p.cfg.Logger.Warn("the table walk cannot work on this kernel: user stacks are walked with frame pointers", "check", check, "reason", err)
	return nil
}

// Frequency returns the sampling frequency in Hz now.
func (p *Profiler) Frequency() int { return int(p.frequency.Load()) }

// ShedTables stops loading the unwind tables of processes seen for less
// than shedMinAge (5 s), and says what was given up: the work worth least
// when the agent is over its budget (overhead.Shedder), since under churn
// most of them exit within a second, and their stacks are walked with
// frame pointers meanwhile; the tables loaded keep serving every process
// that maps their binaries, and a process that keeps running gets its
// tables. False when user stacks are not walked with tables.
func (p *Profiler) ShedTables() (string, bool) {
	if p.unwinder == nil {
		return "", false
	}
	p.unwinder.shed.Store(true)
	return "unwind tables of processes younger than 5 s (walked with frame pointers)", true
}

// RestoreTables loads unwind tables again after ShedTables.
func (p *Profiler) RestoreTables() {
	if p.unwinder != nil {
		p.unwinder.shed.Store(false)
		p.unwinder.kick()
	}
}

// LastRead returns when the ring was last read: a Run loop that stopped
// reading (stuck sink, dead goroutine) shows as an old time.
func (p *Profiler) LastRead() time.Time { return time.Unix(0, p.lastDrain.Load()) }

// SetFrequency changes the sampling frequency of every event in place,
// with the PERF_EVENT_IOC_PERIOD ioctl: no event is re-opened and no sample
// is lost. The kernel restarts each event's timer at the new period: its
// next sample comes one new period after the ioctl (a raise from 2 to
// 99 Hz: 10 ms later, not at the old 500 ms schedule). It is safe to call
// while Run runs.
func (p *Profiler) SetFrequency(hz int) error {
	if hz < 1 || hz > MaxFrequency {
		return fmt.Errorf("frequency %d Hz: want 1 to %d", hz, MaxFrequency)
	}
	p.eventsMu.Lock()
	defer p.eventsMu.Unlock()
	period := uint64(sample.PeriodOf(int64(hz)))
	for _, e := range p.events {
		if err := e.setPeriod(period); err != nil {
			return err
		}
	}
	p.frequency.Store(int64(hz))
	return nil
}

func (p *Profiler) closeEvents() {
	p.eventsMu.Lock()
	defer p.eventsMu.Unlock()
	for _, e := range p.events {
		_ = e.close()
	}
	p.events = nil
}

// Close stops sampling and frees the BPF objects. It is safe to call after
// Run has returned, and more than once.
func (p *Profiler) Close() error {
	p.closeEvents()
	if p.unwinder != nil {
		p.unwinder.close()
		p.unwinder = nil
	}
	if p.waiter != nil {
		p.waiter.close()
		p.waiter = nil
	}
	if p.ring != nil {
		p.ring.close()
		p.ring = nil
	}
	if p.snapLoad != nil {
		p.snapLoad.close()
		p.snapLoad = nil
	}
	if p.mapsRing != nil {
		p.mapsRing.close()
		p.mapsRing = nil
	}
	if p.exitLink != nil {
		p.exitLink.Close()
		p.exitLink = nil
	}
	if p.exitProg != nil {
		p.exitProg.Close()
		p.exitProg = nil
	}
	if p.statsEnabled != nil {
		p.statsEnabled.Close()
		p.statsEnabled = nil
	}
	return p.objs.Close()
}
