package profiler

import (
	"cmp"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"

	"github.com/heatscope/heatscope/bpf"
	"github.com/heatscope/heatscope/internal/workclock"
	"github.com/heatscope/heatscope/symbolize"
	"github.com/heatscope/heatscope/unwind"
)

// Unwind selects how user stacks are walked.
type Unwind int

// Unwinding methods.
const (
	// UnwindFP walks frame pointers (bpf_get_stack): code built without
	// them gives short stacks.
	UnwindFP Unwind = iota
	// UnwindDWARF walks each binary's unwind table (unwind/), built from
	// its .eh_frame, and frame pointers where a binary has none (JIT code)
	// and for a process's first samples, until its tables are loaded.
	// It needs Linux 5.17 (bpf_loop, bpf_task_pt_regs) and kernel BTF.
	UnwindDWARF
	// UnwindAuto is UnwindDWARF where the kernel can run it, UnwindFP
	// elsewhere (with a log line saying why).
	UnwindAuto
)

// ParseUnwind parses "fp", "dwarf" or "auto".
func ParseUnwind(s string) (Unwind, error) {
	switch s {
	case "fp":
		return UnwindFP, nil
	case "dwarf":
		return UnwindDWARF, nil
	case "auto":
		return UnwindAuto, nil
	}
	return 0, fmt.Errorf("unwind %q: want fp, dwarf or auto", s)
}

func (u Unwind) String() string {
	switch u {
	case UnwindDWARF:
		return "dwarf"
	case UnwindAuto:
		return "auto"
	}
	return "fp"
}

// DefaultUnwindMaxBytes bounds the unwind tables loaded into BPF maps.
const DefaultUnwindMaxBytes = 64 << 20

// dwarfSupported reports whether the kernel has what the table walk
// needs: bpf_loop and bpf_task_pt_regs for perf_event programs.
func dwarfSupported() error {
	for _, fn := range []asm.BuiltinFunc{asm.FnLoop, asm.FnTaskPtRegs, asm.FnGetCurrentTaskBtf} {
		if err := features.HaveProgramHelper(ebpf.PerfEvent, fn); err != nil {
			return fmt.Errorf("the kernel lacks BPF helper %v for DWARF unwinding (needs Linux 5.17): %w", fn, err)
		}
	}
	return nil
}

// UnwindStats describes the unwind tables (zero with UnwindFP).
type UnwindStats struct {
	// Enabled is true when user stacks are walked with tables.
	Enabled bool
	// Tables and TableBytes are the tables loaded into BPF maps now, and
	// their size; MaxBytes the bound on it.
	Tables           int
	TableBytes       int64
	MaxBytes         int64
	Processes        int
	Built, CacheHits uint64
	Evictions        uint64
	// Deferred counts tables not loaded because every loaded one was in
	// use (see tableResidence): their frames are walked with frame
	// pointers until there is room.
	Deferred           uint64
	NoCFI, BuildErrors uint64
	// LoadErrors counts the tables built that the kernel refused (a
	// table map it would not create, fill or take into unwind_tables):
	// their frames are walked with frame pointers.
	LoadErrors uint64
	// Fallback is set when the table walk was asked for (--unwind auto)
	// but cannot work on this kernel: user stacks are walked with frame
	// pointers, Enabled is false.
	Fallback Fallback
	// MapsReads counts the processes' mappings the unwinder took to
	// write their entries: read from /proc/PID/maps, or, MapsShared of
	// them, handed on from the symbolizer's read (Config.RecentMaps).
	// Processes gone before they were read are not counted.
	MapsReads, MapsShared uint64
	// Ready counts the process images whose tables all reached the BPF
	// maps; ReadyWaitMax and ReadyWaitSum are the longest and the total
	// time from the unwinder's first sight of such an image (its first
	// sample, at most a poll before) to that moment.
	Ready                      uint64
	ReadyWaitMax, ReadyWaitSum time.Duration
	// TableFrames and FPFrames count the user frames of the samples read
	// (the sampled pc aside, which needs no unwinding) found with an
	// unwind table and with frame pointers: JIT code, binaries without
	// CFI, and a process's first samples before its tables are in.
	TableFrames, FPFrames uint64
	// CachePrunedFiles and CachePrunedBytes count the table files removed
	// from the disk cache (Config.UnwindCacheDir), least recently used
	// first, to keep it within Config.UnwindCacheMaxBytes.
	CachePrunedFiles, CachePrunedBytes uint64
	// TablesCPU is the agent's CPU time spent loading tables (compiled,
	// or read from the disk cache, and copied into their maps);
	// ProcessesCPU spent on processes' entries (their mappings read, the
	// files looked at, the entries written). Neither falls with the
	// sampling rate.
	TablesCPU, ProcessesCPU time.Duration
}

// fileKey names a mapped file as stat(2) sees it.
type fileKey struct {
	dev, ino uint64
	size     int64
	mtimeNs  int64
}

// mappedID is a mapped file as /proc/PID/maps names it: device and inode.
type mappedID struct{ dev, ino uint64 }

// identity is what a stat(2) of a mapped file said, and when.
type identity struct {
	key fileKey
	at  time.Time
}

// identityTTL is how long a stat of a mapped file stands for every
// mapping of the same device and inode: under churn each new process
// maps the same few files, and a stat of each through /proc/PID/root was
// a fifth of the unwinder's CPU (bench/churn, 500 new processes a
// second). A file rewritten in place (its size or modification time
// changed, the same inode) is seen within this long.
const identityTTL = 10 * time.Second

// execSegment is an executable PT_LOAD of a binary.
type execSegment struct{ off, vaddr, filesz uint64 }

// mappedFile is what the unwinder knows of a mapped file.
type mappedFile struct {
	cfi  uint64
	segs []execSegment
	// key names its table (build id, or the file's identity), "" when
	// it has none (no CFI, or an error).
	key     string
	buildID string
}

// loadedTable is a table in unwind_tables.
type loadedTable struct {
	id   uint32
	rows uint32
	// The shape of its index (unwind.Index), after the rows in its map.
	indexPC, buckets uint32
	shift            uint8
	bytes            int64
	key              string
	// lastUsed is when a process using it was last sampled (or its
	// entry written).
	lastUsed time.Time
}

// procState is what the unwinder did for one process: the mappings it
// read, and whether some of their tables were still to be built.
type procState struct {
	mm   uint64
	read time.Time
	// asked is when the unwinder first saw this image (pid and mm);
	// ready is set once its tables were all in.
	asked time.Time
	ready bool
	root  string
	maps  []symbolize.ExecMapping
	// usage is set when the maps say which mappings the process's stacks
	// passed through (symbolize.ExecMapping.Used, from the symbolizer): the others
	// get no table until they do (unused), which checkUse looks for.
	usage, unused bool
	complete      bool
	// tables are the keys of the loaded tables its entry uses.
	tables []string
	// retry is when to write its entry again for a table there was no
	// room for (zero: none).
	retry time.Time
	// withTables is when its entry was first written with a table in it
	// (zero: never): its samples taken from walkSettle later count for
	// checkWalk.
	withTables time.Time
}

// buildJob is a binary whose table some processes wait for.
type buildJob struct {
	cfi uint64 // bytes of .eh_frame and .debug_frame: the build's cost
	// cached is true when the table is in the cache: reading it costs
	// a small fraction of compiling it.
	cached bool
	// waiters are the processes whose entries lack this table, and the
	// binary's path as each sees it (/proc/PID/root/...): any of them
	// may have exited by the time it is built.
	waiters map[uint32]string
	// unusedBy holds the waiters whose stacks have not passed through
	// the binary yet (procState.usage): it is built once one waiter's
	// have, with the samples all of them had meanwhile, so that it goes
	// in at once when a stack reaches it.
	unusedBy map[uint32]bool
	// waited counts the samples of its waiters since it was queued (and
	// their heat then), queued is when: what building it is weighed
	// against (worthIt). later counts only those since it was queued:
	// whether its processes still run.
	waited, later uint64
	queued        time.Time
}

// unwinder reads sampled processes' mappings, builds and loads the
// tables of their binaries, and fills unwind_procs, on its own goroutine:
// building a table can take tens of milliseconds, which the ring reader
// must not wait for.
type unwinder struct {
	procs, pending, tables *ebpf.Map
	// tableSpec is what each table map is made from (tableMapSpec).
	tableSpec *ebpf.MapSpec
	cache     unwind.Cache
	maxBytes  int64
	log       *slog.Logger
	procRoot  string
	// periodNs is the sampling period now, in ns of CPU time a sample
	// stands for.
	periodNs func() int64
	// recentMaps is Config.RecentMaps (nil: none).
	recentMaps func(dst []symbolize.ExecMapping, pid uint32, since time.Time) ([]symbolize.ExecMapping, bool)
	// self is the agent's own pid: its stacks are walked with frame
	// pointers, which its Go code keeps. Its table (1.5 MB of
	// .debug_frame, about 150 ms to compile) was built in every run, the
	// agent paying a tenth of its 1% budget to watch itself.
	self uint32

	wake chan struct{}
	done chan struct{}
	wg   sync.WaitGroup
	// shed is set while only the tables of processes seen for
	// shedMinAge are built or read (Profiler.ShedTables): the others wait.
	shed atomic.Bool

	// Owned by the worker goroutine.
	files map[fileKey]*mappedFile
	// idents holds the recent stats of mapped files (identityTTL).
	idents map[mappedID]identity
	loaded map[string]*loadedTable
	failed map[string]bool
	// deferred holds the tables there was no room for, and when: they
	// are not tried again for tableResidence.
	deferred map[string]time.Time
	procList map[uint32]*procState
	freeIDs  []uint32
	nextID   uint32
	// gen is the last generation given to an unwind_procs entry (struct
	// hs_proc's gen): every entry written gets the next one, so that the
	// walk's cache of rows (walk_cache) never takes an old entry's rows
	// for a new one's.
	gen   uint64
	swept time.Time
	// queue holds the binaries to build, by table key.
	queue map[string]*buildJob
	// heat counts each process's samples since the unwinder last looked
	// (decayed by half at every sweep): the tables of the most sampled
	// processes are built first. sampledNow holds the processes sampled
	// since the last poll.
	heat       map[uint32]uint64
	sampledNow []uint32
	// useBuf is checkUse's buffer for the symbolizer's mappings.
	useBuf []symbolize.ExecMapping
	// asks holds the processes that asked for their mappings and were
	// not read yet.
	asks map[uint32]ask
	// credit is the estimated build time the worker may spend now
	// (afford), as of credited.
	credit   time.Duration
	credited time.Time

	mu    sync.Mutex
	stats UnwindStats
	// newHeat is the samples per process counted by the ring reader
	// since the worker last took them, newHeatOldest when the oldest of
	// them was taken (under mu).
	newHeat       map[uint32]uint64
	newHeatOldest time.Time

	// take empties unwind_pending into taken, from the ring reader
	// (before each drain) and from the worker (when the reader has not
	// for a while).
	takeMu sync.Mutex
	taken  []taken
	// lastTake is when unwind_pending was last emptied, and drainedTake
	// when it was emptied before the ring reader's last complete drain.
	lastTake, drainedTake time.Time
	// pendKeys and pendVals are the buffers unwind_pending is read into.
	pendKeys []uint32
	pendVals []uint64
	// askCount is the BPF program's count of the requests it wrote to
	// unwind_pending (asks in .bss, read through its memory mapping), and
	// askCountSeen its value at the last take: unwind_pending is read only
	// when they differ.
	askCount     *ebpf.Variable
	askCountSeen uint64
	// walkable counts the samples of processes whose entries held a
	// table, taken walkSettle or more after it was written; walkOK is set
	// once a frame was found with a table; off once checkWalk found none
	// in walkCheckSamples of them, and turned the table walk off.
	walkable    uint64
	walkOK, off bool
	// skew is added to every mapping's load bias (tests: a walk that
	// finds no row, as a kernel where the walk cannot work).
	skew uint64

	// batchWarned and eachWarned are set once take warned that its
	// batch call, and then its entry-by-entry reading, failed.
	batchWarned, eachWarned bool

	// tablesCPU and processesCPU time the work on tables and on
	// processes' entries (UnwindStats).
	tablesCPU, processesCPU workclock.Clock
}

// taken is a request for a process's mappings taken out of
// unwind_pending: the process, its address space then, and when it was
// taken (the sample that asked was taken before).
type taken struct {
	pid uint32
	mm  uint64
	at  time.Time
	// byReader is set when the ring reader took it, before a drain.
	byReader bool
}

// maxTables is MAX_TABLES in bpf/profile.bpf.c.
const maxTables = 4096

// maxUmaps is MAX_UMAPS in bpf/profile.bpf.c.
const maxUmaps = 64

// maxWalkFrames is MAX_WALK_FRAMES in bpf/profile.bpf.c.
const maxWalkFrames = 128

// walkCacheSlots is WALK_CACHE_SLOTS in bpf/profile.bpf.c.
const walkCacheSlots = 256

func newUnwinder(objs *bpf.ProfileMaps, askCount *ebpf.Variable, tableSpec *ebpf.MapSpec, cache unwind.Cache, maxBytes int64, periodNs func() int64,
	recentMaps func([]symbolize.ExecMapping, uint32, time.Time) ([]symbolize.ExecMapping, bool), log *slog.Logger) *unwinder {
	if maxBytes <= 0 {
		maxBytes = DefaultUnwindMaxBytes
	}
	u := &unwinder{
		procs: objs.UnwindProcs, pending: objs.UnwindPending, askCount: askCount, tables: objs.UnwindTables, tableSpec: tableSpec,
		cache: cache, maxBytes: maxBytes, periodNs: periodNs, recentMaps: recentMaps, self: uint32(os.Getpid()), log: log, procRoot: "/proc",
		wake: make(chan struct{}, 1), done: make(chan struct{}),
		files: map[fileKey]*mappedFile{}, loaded: map[string]*loadedTable{}, failed: map[string]bool{}, deferred: map[string]time.Time{},
		procList: map[uint32]*procState{}, queue: map[string]*buildJob{},
		heat: map[uint32]uint64{}, newHeat: map[uint32]uint64{},
		asks: map[uint32]ask{}, pendKeys: make([]uint32, maxPending), pendVals: make([]uint64, maxPending),
	}
	u.stats.Enabled, u.stats.MaxBytes = true, maxBytes
	if u.cache.Pruned == nil {
		u.cache.Pruned = &unwind.PruneStats{}
	}
	u.cache.Prune() // what earlier runs left over the bound
	return u
}

// start starts the worker goroutine.
func (u *unwinder) start() { u.wg.Go(u.run) }

// closing reports whether close was called: the worker then stops
// between steps (a table being compiled is finished first).
func (u *unwinder) closing() bool {
	select {
	case <-u.done:
		return true
	default:
		return false
	}
}

// sampled counts the samples of each process read from the ring since the
// last call (the worker builds the tables of the most sampled first), and
// their user frames found with tables and with frame pointers.
func (u *unwinder) sampled(counts map[uint32]uint64, tableFrames, fpFrames uint64, oldest time.Time) {
	u.mu.Lock()
	if u.newHeatOldest.IsZero() || oldest.Before(u.newHeatOldest) {
		u.newHeatOldest = oldest
	}
	for pid, n := range counts {
		u.newHeat[pid] += n
	}
	u.stats.TableFrames += tableFrames
	u.stats.FPFrames += fpFrames
	u.mu.Unlock()
}

// kick makes the worker look at the pending processes.
func (u *unwinder) kick() {
	select {
	case u.wake <- struct{}{}:
	default:
	}
}

func (u *unwinder) close() {
	close(u.done)
	u.wg.Wait()
}

func (u *unwinder) Stats() UnwindStats {
	u.mu.Lock()
	st := u.stats
	u.mu.Unlock()
	if u.cache.Pruned != nil {
		st.CachePrunedFiles, st.CachePrunedBytes = u.cache.Pruned.Files.Load(), u.cache.Pruned.Bytes.Load()
	}
	st.TablesCPU, st.ProcessesCPU = u.tablesCPU.Total(), u.processesCPU.Total()
	return st
}

// refreshInterval is how often a process's mappings are read again at
// most, when its samples keep asking (a pc in no known mapping).
const refreshInterval = time.Second

// selfPoll is how long the worker waits for a kick before it looks at the
// pending processes itself: the ring reader kicks it at every poll
// (PollInterval), but may be held up for seconds (loading the exit
// snapshot program on a busy machine), and the table walk in BPF needs
// only the worker's entries meanwhile.
const selfPoll = time.Second

func (u *unwinder) run() {
	// A timer pushed back at every poll, not a ticker: while the reader
	// kicks the worker it never fires, and a process woken by nothing but
	// its poll timer costs the least (Profiler.Run).
	idle := time.NewTimer(selfPoll)
	defer idle.Stop()
	for {
		select {
		case <-u.done:
			return
		case <-u.wake:
		case <-idle.C:
		}
		idle.Reset(selfPoll)
		t0 := time.Now()
		u.poll(t0)
		u.log.Debug("unwinder poll", "took", time.Since(t0), "queue", len(u.queue), "procs", len(u.procList), "loaded", len(u.loaded))
	}
}

// poll handles the pending processes.
func (u *unwinder) poll(now time.Time) {
	u.mu.Lock()
	for _, job := range u.queue {
		for pid := range job.waiters {
			job.waited += u.newHeat[pid]
			job.later += u.newHeat[pid]
		}
	}
	u.sampledNow = u.sampledNow[:0]
	oldest := u.newHeatOldest
	u.newHeatOldest = time.Time{}
	for pid, n := range u.newHeat {
		u.heat[pid] += n
		u.sampledNow = append(u.sampledNow, pid)
		if st := u.procList[pid]; st != nil {
			for _, k := range st.tables {
				if t := u.loaded[k]; t != nil {
					t.lastUsed = now
				}
			}
			if !st.withTables.IsZero() && oldest.After(st.withTables.Add(walkSettle)) {
				u.walkable += n
			}
		}
	}
	clear(u.newHeat)
	found := u.stats.TableFrames
	u.mu.Unlock()
	u.takeAsks(now)
	if u.off {
		clear(u.asks)
		return
	}
	if u.checkWalk(found) {
		return
	}
	var reqs []uint32
	for pid, a := range u.asks {
		if st := u.procList[pid]; st != nil && st.mm == a.mm && now.Sub(st.read) < refreshInterval {
			continue // asked again too soon
		}
		if u.heat[pid] < askSamples && now.Sub(a.since) < askWait {
			continue // maybe a short-lived process: not worth reading yet
		}
		reqs = append(reqs, pid)
	}
	// The most sampled first, for up to readBudget: at start, or under
	// churn, hundreds of processes ask at once, and reading all their
	// mappings before building anything held up the hot ones' tables.
	// The rest wait for the next poll.
	slices.SortFunc(reqs, func(a, b uint32) int { return cmp.Or(cmp.Compare(u.heat[b], u.heat[a]), cmp.Compare(a, b)) })
	for i, pid := range reqs {
		if u.closing() || i > 0 && time.Since(now) >= readBudget {
			break
		}
		a := u.asks[pid]
		delete(u.asks, pid)
		span := u.processesCPU.Start()
		err := u.process(pid, a, now)
		span.Stop()
		if err != nil {
			u.log.Debug("unwind tables of a process", "pid", pid, "err", err)
		}
	}
	for _, pid := range u.sampledNow {
		if err := u.checkUse(pid, now); err != nil {
			u.log.Debug("unwind tables of a process", "pid", pid, "err", err)
		}
	}
	for pid, st := range u.procList {
		if !st.retry.IsZero() && now.After(st.retry) {
			if err := u.writeEntry(pid, st, now); err != nil {
				u.log.Debug("unwind tables of a process", "pid", pid, "err", err)
			}
		}
	}
	u.build(now)
	if now.Sub(u.swept) >= 5*time.Second {
		u.sweep()
		u.swept = now
	}
	u.mu.Lock()
	u.stats.Processes = len(u.procList)
	u.mu.Unlock()
}

// maxPending is the size of unwind_pending in bpf/profile.bpf.c.
const maxPending = 1024

// askSamples and askWait say when a process that asked for its mappings
// is read: once it has this many samples, or has waited this long (it
// asked at an earlier poll: the ring reader polls every 250 ms). Under
// churn (200 short-lived processes a second) most processes are sampled
// once and exit within a poll; reading each one's mappings and writing
// its entry cost more of the agent's CPU than any other part of the
// table walk once the tables were built. A busy process has its second
// sample 10 ms after its first at 99 Hz; one starved of CPU on a loaded
// machine waits a poll more (500 ms delayed a signal-handling fixture's
// tables past the end of its test at load 20).
const (
	askSamples = 2
	askWait    = 50 * time.Millisecond
)

// ask is a process's request for its mappings, for the address space
// mm: first taken out of unwind_pending at since, last at last.
type ask struct {
	mm          uint64
	since, last time.Time
}

// maxTaken bounds the requests take holds for the worker: beyond it, the
// rest stay in unwind_pending (bounded by the BPF map) until the worker
// has caught up.
const maxTaken = 4 * maxPending

// take moves the requests in unwind_pending into taken, emptying the map
// with one batch system call (a process asks again, if it is still
// sampled without an entry, once the map no longer holds it). If the
// batch call fails, it warns once and reads the map entry by entry
// (takeEach): with nothing taken, no process would ask again and
// --unwind dwarf would fall back to frame pointers without a word.
func (u *unwinder) take(byReader bool) {
	u.takeMu.Lock()
	defer u.takeMu.Unlock()
	if len(u.taken) >= maxTaken {
		return
	}
	now := time.Now()
	u.lastTake = now
	if !u.asked() {
		return
	}
	var cursor ebpf.MapBatchCursor
	for {
		n, err := u.pending.BatchLookupAndDelete(&cursor, u.pendKeys, u.pendVals, nil)
		for i := range n {
			u.taken = append(u.taken, taken{pid: u.pendKeys[i], mm: u.pendVals[i], at: now, byReader: byReader})
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return // all taken
		}
		if err != nil {
			if !u.batchWarned {
				u.batchWarned = true
				u.log.Warn("unwind tables: reading the processes that ask for them in one batch failed; reading them one by one", "err", err)
			}
			if err := u.takeEach(now, byReader); err != nil && !u.eachWarned {
				u.eachWarned = true
				u.log.Warn("unwind tables: reading the processes that ask for them failed; their stacks are walked with frame pointers", "err", err)
			}
			return
		}
		if n == 0 {
			return
		}
	}
}

// asked reports whether the BPF program wrote a request to unwind_pending
// since the last call that reported true (always true where its count
// cannot be read: kernels before 5.5 map no .bss). A count read before the
// batch read that empties the map cannot miss a request: one written after
// the read moves the count again. u.takeMu is held.
func (u *unwinder) asked() bool {
	var n uint64
	if u.askCount == nil || u.askCount.Get(&n) != nil {
		return true
	}
	if n == u.askCountSeen {
		return false
	}
	u.askCountSeen = n
	return true
}

// drained tells the worker that the ring reader has handled the records
// of the drain that followed its last take: the symbolizer has read the
// mappings of the new processes among them (Config.RecentMaps).
func (u *unwinder) drained() {
	u.takeMu.Lock()
	u.drainedTake = u.lastTake
	u.takeMu.Unlock()
}

// takeAsks moves the requests taken since the last poll into asks. The
// ring reader takes them before each drain; if it has not for half a
// selfPoll (held up), the worker takes them itself. A request the reader
// took waits for the end of its drain, so that the symbolizer's read of
// the process's mappings, if it is new, is there to be handed on; for a
// selfPoll at most, should the drain be held up.
func (u *unwinder) takeAsks(now time.Time) {
	u.takeMu.Lock()
	stale := now.Sub(u.lastTake) >= selfPoll/2
	u.takeMu.Unlock()
	if stale {
		u.take(false)
	}
	u.takeMu.Lock()
	kept := u.taken[:0]
	for _, t := range u.taken {
		if t.byReader && t.at.After(u.drainedTake) && now.Sub(t.at) < selfPoll {
			kept = append(kept, t) // its drain is still going on
			continue
		}
		if a, ok := u.asks[t.pid]; ok && a.mm == t.mm {
			a.last = t.at
			u.asks[t.pid] = a
		} else {
			u.asks[t.pid] = ask{mm: t.mm, since: t.at, last: t.at}
		}
	}
	clear(u.taken[len(kept):])
	u.taken = kept
	u.takeMu.Unlock()
}

// takeEach is take without batch calls, as before them: it reads every
// entry of unwind_pending, then deletes the ones it read (an entry
// written again in between is lost, and asked again at a later sample).
// u.takeMu is held.
func (u *unwinder) takeEach(now time.Time, byReader bool) error {
	var (
		pid  uint32
		mm   uint64
		pids []uint32
	)
	it := u.pending.Iterate()
	for it.Next(&pid, &mm) {
		u.taken = append(u.taken, taken{pid: pid, mm: mm, at: now, byReader: byReader})
		pids = append(pids, pid)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("iterate over unwind_pending: %w", err)
	}
	for _, pid := range pids {
		if err := u.pending.Delete(pid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete process %d from unwind_pending: %w", pid, err)
		}
	}
	return nil
}

// sweep forgets the processes that have exited, and halves every
// process's heat, so that the build order follows what is sampled now.
func (u *unwinder) sweep() {
	u.forgetExited()
	now := time.Now()
	for id, ident := range u.idents {
		if now.Sub(ident.at) >= identityTTL {
			delete(u.idents, id)
		}
	}
	for pid, n := range u.heat {
		_, known := u.procList[pid]
		_, asked := u.asks[pid]
		if !known && !asked || n < 2 {
			delete(u.heat, pid)
		} else {
			u.heat[pid] = n / 2
		}
	}
}

// tablesInUse returns the keys of the tables live processes use.
func (u *unwinder) tablesInUse() map[string]bool {
	inUse := map[string]bool{}
	for _, st := range u.procList {
		for _, k := range st.tables {
			inUse[k] = true
		}
	}
	return inUse
}

// forgetExited forgets the processes that have exited.
func (u *unwinder) forgetExited() {
	for pid := range u.procList {
		if err := unix.Kill(int(pid), 0); errors.Is(err, unix.ESRCH) {
			delete(u.procList, pid)
			_ = u.procs.Delete(pid)
		}
	}
}

// process takes a process's mappings and writes its unwind_procs entry
// with the tables loaded so far; the others are queued for build, and
// the entry is written again when they are in. The mappings are the
// symbolizer's read when it is recent enough to show the image that
// asked (Config.RecentMaps), else read from /proc/PID/maps.
func (u *unwinder) process(pid uint32, a ask, now time.Time) error {
	old := u.procList[pid]
	// A read that started after the request was taken out of
	// unwind_pending started after the sample that asked, and so shows
	// its image, or a later one (whose mm differs: the walk asks again).
	// For an image already known the request is for a pc outside its
	// mappings (a dlopen): the read must follow the latest request.
	since := a.since
	if old != nil && old.mm == a.mm {
		since = a.last
	}
	root := fmt.Sprintf("%s/%d", u.procRoot, pid)
	var (
		maps   []symbolize.ExecMapping
		shared bool
	)
	if u.recentMaps != nil {
		maps, shared = u.recentMaps(nil, pid, since)
	}
	usage := shared
	if !shared {
		var err error
		if maps, err = symbolize.ReadExecMappings(root + "/maps"); err != nil {
			return err // gone, most often
		}
		usage = u.takeUse(pid, maps)
	}
	u.mu.Lock()
	u.stats.MapsReads++
	if shared {
		u.stats.MapsShared++
	}
	u.mu.Unlock()
	st := &procState{mm: a.mm, read: now, asked: a.since, root: root, maps: maps, usage: usage}
	if old != nil && old.mm == a.mm {
		st.asked, st.ready = old.asked, old.ready
	}
	u.procList[pid] = st
	return u.writeEntry(pid, st, now)
}

// takeUse marks the mappings of maps, just read from /proc, that the
// symbolizer's earlier read of the process's mappings says its stacks
// passed through (symbolize.ExecMapping.Used), and reports whether the
// symbolizer had read the same image (its mappings all among these). A process whose mappings the unwinder read
// itself (the symbolizer's read was older than its request) used to get
// the tables of all its mappings: a browser's hundred libraries, though
// its stacks passed through a few; now, like one whose read it was handed,
// only of those the stacks passed through (checkUse queues the others
// once a stack does).
func (u *unwinder) takeUse(pid uint32, maps []symbolize.ExecMapping) bool {
	if u.recentMaps == nil {
		return false
	}
	theirs, ok := u.recentMaps(u.useBuf[:0], pid, time.Time{})
	u.useBuf = theirs[:0]
	if !ok {
		return false
	}
	// Only a read of the same image says anything: each of its mappings
	// must be among these (a dlopen since adds some; an exec replaces
	// them, and then every mapping may get its table, as before).
	for _, m := range theirs {
		if !slices.ContainsFunc(maps, func(e symbolize.ExecMapping) bool { return sameMapping(e, m) }) {
			return false
		}
	}
	for i := range maps {
		m := &maps[i]
		j, found := slices.BinarySearchFunc(theirs, m.Start, func(e symbolize.ExecMapping, start uint64) int { return cmp.Compare(e.Start, start) })
		if found && theirs[j].Used && sameMapping(theirs[j], *m) {
			m.Used = true
		}
	}
	return true
}

// sameMapping reports whether two reads show the same mapping.
func sameMapping(a, b symbolize.ExecMapping) bool {
	return a.Start == b.Start && a.End == b.End && a.Offset == b.Offset && a.Path == b.Path
}

// checkUse looks, for a process just sampled whose entry leaves out
// mappings no stack had passed through (procState.unused), whether one
// now has, from the symbolizer's mappings (Config.RecentMaps), and if so
// rewrites the entry, queueing their tables. Every mapping of a process
// used to get its table once the process had paid for its tables: a
// browser's hundred libraries (63 built in one 20 s recording), the
// dynamic loader of every process, where its stacks pass through a few.
// A binary shows up in the stacks before its table matters: the walk
// finds the frame in it with the caller's table (or frame pointers), and
// needs its table for the frames beyond.
func (u *unwinder) checkUse(pid uint32, now time.Time) error {
	st := u.procList[pid]
	if st == nil || !st.unused || u.recentMaps == nil {
		return nil
	}
	theirs, ok := u.recentMaps(u.useBuf[:0], pid, time.Time{})
	u.useBuf = theirs[:0]
	if !ok {
		return nil
	}
	changed := false
	for i := range st.maps {
		m := &st.maps[i]
		if m.Used {
			continue
		}
		j, found := slices.BinarySearchFunc(theirs, m.Start, func(e symbolize.ExecMapping, start uint64) int { return cmp.Compare(e.Start, start) })
		if found && theirs[j].Used && theirs[j].End == m.End && theirs[j].Offset == m.Offset && theirs[j].Path == m.Path {
			m.Used, changed = true, true
		}
	}
	if !changed {
		return nil
	}
	return u.writeEntry(pid, st, now)
}

// writeEntry writes a process's unwind_procs entry from its mappings,
// with no tables for the agent's own process (self).
func (u *unwinder) writeEntry(pid uint32, st *procState, now time.Time) error {
	var entry bpf.ProfileHsProc
	entry.Mm = st.mm
	u.gen++
	entry.Gen = u.gen
	st.complete, st.unused = true, false
	st.tables = st.tables[:0]
	st.retry = time.Time{}
	for _, m := range st.maps {
		if entry.Count >= maxUmaps {
			entry.Flags |= 1 // HS_PROC_TRUNCATED
			break
		}
		um := bpf.ProfileHsUmap{Start: m.Start, End: m.End, Table: noTable}
		if pid != u.self && !m.Deleted && len(m.Path) > 0 && m.Path[0] == '/' {
			// A table already loaded serves any mapping of its file;
			// one to build, only a mapping the stacks pass through.
			build := !st.usage || m.Used
			t, bias, state := u.tableFor(pid, st.root+"/root"+m.Path, mappedID{m.Dev, m.Inode}, m.Offset, m.Start, build, now)
			switch state {
			case tableLoaded:
				um.Table, um.Rows, um.Bias = t.id, t.rows, bias+u.skew
				um.IndexPc, um.Buckets, um.Shift = t.indexPC, t.buckets, t.shift
				st.tables = append(st.tables, t.key)
			case tableQueued:
				st.complete = false
			case tableDeferred:
				st.retry = now.Add(tableResidence)
			case tableUnused:
				st.unused = true // built once a stack passes through it (checkUse)
			}
		}
		entry.M[entry.Count] = um
		entry.Count++
	}
	if err := u.procs.Put(pid, &entry); err != nil {
		return fmt.Errorf("write the mappings of process %d: %w", pid, err)
	}
	if len(st.tables) > 0 && st.withTables.IsZero() {
		st.withTables = time.Now() // not the poll's now: builds took time since
	}
	if st.complete && !st.ready && len(st.tables) > 0 {
		st.ready = true
		wait := time.Since(st.asked)
		u.mu.Lock()
		u.stats.Ready++
		u.stats.ReadyWaitSum += wait
		u.stats.ReadyWaitMax = max(u.stats.ReadyWaitMax, wait)
		u.mu.Unlock()
	}
	return nil
}

// walkSettle is how long after a process's entry first holds a table the
// samples it takes count for checkWalk: only those of polls whose samples
// were all taken that late (a reader held up on a starved machine drains
// seconds-old samples, taken before the entry was in), with a margin for
// the conversion of their kernel times to wall time.
const walkSettle = 100 * time.Millisecond

// walkCheckSamples is how many samples of processes with tables (taken
// from walkSettle after their entries were written) may find no frame
// with a table before checkWalk turns the walk off. A process gets a
// table only for a binary its sampled stacks pass through, and any stack
// deeper than one frame there finds its caller with it where the walk
// works (6.18: 96% of a frame-pointer-less program's samples reach main).
const walkCheckSamples = 200

// checkWalk is the walk's result checked: once walkCheckSamples samples
// of processes whose tables are in were read with not one user frame
// found with a table (found, the count so far), the walk does not work on
// this kernel, whatever the checks at start said. It then turns the
// table walk off (turnOff) and reports true. Once a frame was found with
// a table it never checks again.
func (u *unwinder) checkWalk(found uint64) bool {
	if u.walkOK || found > 0 {
		u.walkOK = true
		return false
	}
	if u.walkable < walkCheckSamples {
		return false
	}
	u.turnOff(fmt.Errorf("%d samples of processes whose binaries' unwind tables are loaded, and not one user frame found with a table", u.walkable))
	return true
}

// turnOff stops the table walk: every process's entry is deleted, so that
// the program walks frame pointers, and the unwinder writes none again.
// It warns, and Stats says why (Fallback).
func (u *unwinder) turnOff(err error) {
	u.off = true
	u.log.Warn("the table walk cannot work on this kernel: user stacks are walked with frame pointers", "check", CheckWalkResults, "reason", err)
	for pid := range u.procList {
		_ = u.procs.Delete(pid)
	}
	clear(u.procList)
	clear(u.queue)
	clear(u.asks)
	u.mu.Lock()
	u.stats.Fallback = Fallback{Check: CheckWalkResults, Reason: err.Error()}
	u.mu.Unlock()
}

// readBudget is how long one poll may spend reading pending processes'
// mappings; the least sampled wait for the next poll.
const readBudget = 50 * time.Millisecond

// buildBudget is how long one poll may spend building tables; the rest
// wait for the next poll.
const buildBudget = 200 * time.Millisecond

// buildOrder sorts the queued tables by the samples waiting for them per
// byte of CFI to compile (a thirty-second of it for a table in the cache;
// a floor of 16 KiB, so that tiny binaries of idle processes do not go
// first), cheapest first among equals: the hot processes of a busy machine
// get their stacks first, and one huge binary (a browser, node) does not
// hold up many smaller ones of equal heat.
func (u *unwinder) buildOrder() []string {
	score := make(map[string]float64, len(u.queue))
	keys := make([]string, 0, len(u.queue))
	for k, job := range u.queue {
		var samples uint64
		for pid := range job.waiters {
			if _, known := u.procList[pid]; !known {
				delete(job.waiters, pid)
				delete(job.unusedBy, pid)
				continue
			}
			samples += u.heat[pid]
		}
		if len(job.waiters) == 0 {
			delete(u.queue, k) // every process that wanted it is gone
			continue
		}
		score[k] = float64(samples) / float64(max(job.cost(), 16<<10))
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		return cmp.Or(cmp.Compare(score[b], score[a]), cmp.Compare(u.queue[a].cost(), u.queue[b].cost()), cmp.Compare(a, b))
	})
	return keys
}

// compileNsPerByte is about what compiling a table costs per byte of CFI:
// BenchmarkCompileLibc measured 60-196 ms per MB (median 75).
const compileNsPerByte = 100

// buildShare is the most of its waiting samples' CPU time a table may
// cost: a table is built once the samples of the processes waiting for
// it stand for 1/buildShare times its estimated compile time (a cached
// one's read counts a thirty-second of that), or once it has waited
// 1/waitShare times that. Building every table at once made the agent
// compile whatever ran, however little: on a busy development machine new
// binaries (test binaries, a 10 MB table for minio) cost it 5-9% of a CPU
// where frame pointers cost 2%. A hot process pays soon (libc's 153 KB of
// .eh_frame, about 15 ms, after 0.8 s of sampled CPU, 0.4 s for two busy
// processes; from the cache after 3 samples); one that gets little CPU
// waits at most 0.3 s for libc, 6.3 s for a binary of 3 MB of CFI, if it
// keeps running (activeShare).
const buildShare = 0.02

// waitShare bounds the wait: a table is built once compiling it costs at
// most this share of the wall time its processes have waited for it, if
// they were sampled meanwhile for at least activeShare of one CPU.
const waitShare = 0.05

// activeShare is the least CPU, in CPUs, the processes waiting for a
// table must have used since it was queued for the wait alone to build
// it. Without it every table of every process sampled was built once it
// had waited 20 times its estimate: the tables of idle processes sampled
// once at the agent's start (a browser's hundred libraries, 117 tables
// in a 20 s run on the shared machine), and of the agent itself (its
// 1.5 MB of .debug_frame, 150 ms estimated, built 3 s into every run at
// 1% of a CPU). A starved test fixture (10% of a CPU at load 20) still
// has libc's table after 0.3 s; the agent's own is built once its
// samples have paid for it.
const activeShare = 0.05

// worthIt reports whether the samples waiting for a table have paid for
// building it (buildShare), or it has waited long enough (waitShare) for
// processes that keep running (activeShare). Either way the processes
// waiting for it must have been sampled askSamples times: a table is no
// use to a process sampled once, most often short-lived or idle.
func (u *unwinder) worthIt(job *buildJob, now time.Time) bool {
	if job.waited < askSamples {
		return false
	}
	cost := float64(job.cost()) * compileNsPerByte
	period := float64(u.periodNs())
	waited := float64(now.Sub(job.queued))
	return float64(job.waited)*period*buildShare >= cost ||
		waited*waitShare >= cost && float64(job.later)*period >= activeShare*waited
}

// estimate is about how long loading the table takes: compiling its
// CFI, or a thirty-second of that from the cache.
func (j *buildJob) estimate() time.Duration {
	return time.Duration(j.cost() * compileNsPerByte)
}

// buildRate is the estimated time (buildJob.estimate) the worker may
// spend building tables, as a share of one CPU over time, and buildBurst
// how much it may spend at once after a quiet spell (at the agent's
// start, or when a new program starts). worthIt bounds each table's cost
// by its own processes' CPU, but not the sum: on a machine whose CPUs
// are busy with new binaries (a build machine: compilers, test binaries,
// a browser under test; load 22) the agent compiled 10 tables in a 36 s
// recording, 0.26 s of CompileFile (--cpu-profile). The estimate, not
// the time a build took, is charged: a build slowed down by a busy
// machine would otherwise hold up every other table for minutes. libc's
// 153 KB of .eh_frame is estimated at 15 ms, 10 MB of CFI at a second.
// A read from the cache (a thirty-second of that) is not charged:
// buildBudget bounds those per poll.
const (
	buildRate  = 0.005
	buildBurst = time.Second
)

// afford reports whether the worker may now build a table estimated to
// take est: the credit, refilled at buildRate up to buildBurst, covers
// it, or is full (a table estimated beyond buildBurst waits for a full
// credit, and takes it all: charge).
func (u *unwinder) afford(est time.Duration, now time.Time) bool {
	u.refill(now)
	return u.credit >= est || u.credit == buildBurst
}

// refill adds to the credit what buildRate earned since it was last
// refilled, up to buildBurst (a full credit at the first call).
func (u *unwinder) refill(now time.Time) {
	if u.credited.IsZero() {
		u.credit = buildBurst
	} else if now.After(u.credited) {
		u.credit = min(buildBurst, u.credit+time.Duration(float64(now.Sub(u.credited))*buildRate))
	}
	u.credited = now
}

// charge takes a compiled table's estimate out of the credit, down to
// zero at most: a table estimated beyond buildBurst (50 MB of .eh_frame,
// 5 s) once left it at -4 s, and every other table, a cached libc's
// 0.5 ms read included, waited the ~1000 s buildRate takes to refill
// that.
func (u *unwinder) charge(est time.Duration, now time.Time) {
	u.refill(now)
	u.credit = max(0, u.credit-est)
}

// cost is about what loading the table takes, in bytes of CFI compiled.
func (j *buildJob) cost() uint64 {
	if j.cached {
		return j.cfi / 32
	}
	return j.cfi
}

// build builds queued tables, hottest first (buildOrder), for up to
// buildBudget (at least one), and rewrites the entries of the processes
// that waited for each as soon as it is in.
func (u *unwinder) build(now time.Time) {
	if len(u.queue) == 0 {
		return
	}
	shed := u.shed.Load()
	start := time.Now()
	built := 0
	blocked := false // a table waits for the credit: only cached ones go now
	for _, k := range u.buildOrder() {
		if built > 0 && time.Since(start) >= buildBudget || u.closing() {
			break
		}
		job := u.queue[k]
		if len(job.unusedBy) == len(job.waiters) {
			continue // no stack passed through it yet
		}
		if shed && !u.longLived(job, now) {
			continue // given up for processes that may not live long (Profiler.ShedTables)
		}
		if !u.worthIt(job, now) || blocked && !job.cached {
			continue // its processes' samples have not paid for it yet, or it waits its turn
		}
		if !job.cached && !u.afford(job.estimate(), now) {
			u.log.Debug("unwind table waits for the build budget", "key", k, "estimate", job.estimate(), "credit", u.credit)
			// In order: the cheaper ones after it do not overtake it;
			// ones read from the cache do, as they are not charged.
			blocked = true
			continue
		}
		built++
		delete(u.queue, k)
		t0 := time.Now()
		// Through the root of each waiting process in turn, until one
		// is still there: the first to map a library (libc) is often a
		// short-lived process, gone before the table is built.
		for pid, path := range job.waiters {
			span := u.tablesCPU.Start()
			t, compiled, err := u.load(path, k, now)
			span.Stop()
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH) {
				continue // nothing compiled: try the next
			}
			if compiled {
				// Charged even when the build failed (it took the
				// time); not when every waiter was gone, nor for a
				// read from the cache.
				u.charge(time.Duration(job.cfi*compileNsPerByte), now)
			}
			if err != nil {
				u.log.Debug("load unwind table", "path", path, "err", err)
			} else {
				u.log.Debug("unwind table loaded", "path", path, "rows", t.rows, "took", time.Since(t0), "waiting", len(job.waiters), "pid", pid)
			}
			break
		}
		span := u.processesCPU.Start()
		for pid := range job.waiters {
			if st := u.procList[pid]; st != nil && !st.complete {
				if err := u.writeEntry(pid, st, now); err != nil {
					u.log.Debug("unwind tables of a process", "pid", pid, "err", err)
				}
			}
		}
		span.Stop()
	}
}

// shedMinAge is how long a process must have been seen for its tables to
// be built while tables are shed (Profiler.ShedTables): under churn most
// processes live less than a second, and their tables are the work worth
// least; a process that keeps running past it is worth its table.
const shedMinAge = 5 * time.Second

// longLived reports whether a process waiting for job was first seen
// shedMinAge ago or more.
func (u *unwinder) longLived(job *buildJob, now time.Time) bool {
	for pid := range job.waiters {
		if st := u.procList[pid]; st != nil && now.Sub(st.asked) >= shedMinAge {
			return true
		}
	}
	return false
}

// noTable is HS_NO_TABLE.
const noTable = 0xffffffff

// What tableFor found.
const (
	tableNone     = iota // no table: no CFI, an error, not an ELF file
	tableLoaded          // loaded
	tableQueued          // to be built
	tableDeferred        // no room for it now
	tableUnused          // queued, not to be built for this process: no stack passed through it
)

// tableFor returns the loaded table of the file at path (the mapping's
// file id, from the maps) and the load bias of its mapping at file offset
// off, address start; or queues the table for build, process pid waiting
// for it, to be built only once a waiter has build set (its stacks passed
// through the mapping).
func (u *unwinder) tableFor(pid uint32, path string, id mappedID, off, start uint64, build bool, now time.Time) (*loadedTable, uint64, int) {
	fk, ok := u.fileKeyOf(path, id, now)
	if !ok {
		return nil, 0, tableNone
	}
	b, ok := u.files[fk]
	if !ok {
		b = u.readBinary(path, fk)
		u.files[fk] = b
	}
	if b.key == "" || u.failed[b.key] {
		return nil, 0, tableNone
	}
	if at, ok := u.deferred[b.key]; ok {
		if now.Sub(at) < tableResidence {
			return nil, 0, tableDeferred
		}
		delete(u.deferred, b.key)
	}
	var seg *execSegment
	for i := range b.segs {
		s := &b.segs[i]
		if off >= s.off&^0xfff && off < s.off+s.filesz {
			seg = s
			break
		}
	}
	if seg == nil {
		return nil, 0, tableNone
	}
	t := u.loaded[b.key]
	if t == nil {
		job := u.queue[b.key]
		if job == nil {
			job = &buildJob{cfi: b.cfi, cached: u.cache.Has(b.buildID), waiters: map[uint32]string{}, unusedBy: map[uint32]bool{}, queued: now}
			u.queue[b.key] = job
		}
		if _, ok := job.waiters[pid]; !ok {
			job.waited += u.heat[pid]
		}
		job.waiters[pid] = path
		if job.unusedBy == nil {
			job.unusedBy = map[uint32]bool{}
		}
		if !build {
			job.unusedBy[pid] = true
			return nil, 0, tableUnused
		}
		delete(job.unusedBy, pid)
		return nil, 0, tableQueued
	}
	t.lastUsed = now
	return t, start - off + seg.off - seg.vaddr, tableLoaded
}

// fileKeyOf names the file at path, mapped as id: from a stat of it within
// identityTTL of any mapping of the same file, else from a stat now.
func (u *unwinder) fileKeyOf(path string, id mappedID, now time.Time) (fileKey, bool) {
	if ident, ok := u.idents[id]; ok && id.ino != 0 && now.Sub(ident.at) < identityTTL {
		return ident.key, true
	}
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return fileKey{}, false
	}
	fk := fileKey{dev: st.Dev, ino: st.Ino, size: st.Size, mtimeNs: st.Mtim.Nano()}
	if id.ino != 0 {
		if u.idents == nil {
			u.idents = map[mappedID]identity{}
		}
		u.idents[id] = identity{key: fk, at: now}
	}
	return fk, true
}

// readBinary reads a file's executable segments and names its table.
func (u *unwinder) readBinary(path string, fk fileKey) *mappedFile {
	b := &mappedFile{}
	f, err := elf.Open(path)
	if err != nil {
		return b
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			b.segs = append(b.segs, execSegment{off: p.Off, vaddr: p.Vaddr, filesz: p.Filesz})
		}
	}
	for _, name := range []string{".eh_frame", ".debug_frame"} {
		if s := f.Section(name); s != nil {
			b.cfi += s.Size
		}
	}
	if b.cfi == 0 {
		u.mu.Lock()
		u.stats.NoCFI++
		u.mu.Unlock()
		return b
	}
	if id := unwind.BuildID(f); id != "" {
		b.key, b.buildID = "build-id:"+id, id
	} else {
		b.key = fmt.Sprintf("file:%d:%d:%d:%d", fk.dev, fk.ino, fk.size, fk.mtimeNs)
	}
	return b
}

// load builds (or reads from the cache) a table and loads it into
// unwind_tables, evicting the least recently used tables beyond maxBytes.
// A path that is gone (its process exited) is an error that leaves the
// table to be built through another process. compiled reports whether
// the table was compiled rather than read from the cache (a build that
// failed included): what the build budget is charged for.
func (u *unwinder) load(path, key string, now time.Time) (lt *loadedTable, compiled bool, err error) {
	t, hit, err := u.cache.Load(path)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH) {
		return nil, false, err
	}
	compiled = !hit
	defer func() {
		if err != nil && !errors.Is(err, errNoRoom) {
			u.failed[key] = true // neither retried nor counted again
		}
	}()
	u.mu.Lock()
	switch {
	case errors.Is(err, unwind.ErrNoCFI):
		u.stats.NoCFI++
	case err != nil:
		u.stats.BuildErrors++
	case hit:
		u.stats.CacheHits++
	default:
		u.stats.Built++
	}
	u.mu.Unlock()
	if err != nil {
		return nil, compiled, err
	}
	size := int64(t.Size())
	if size > u.maxBytes || len(t.Rows) == 0 {
		return nil, compiled, fmt.Errorf("table of %d bytes, more than the %d-byte bound", size, u.maxBytes)
	}
	var inUse map[string]bool // read once for all the evictions this load needs
	for u.used()+size > u.maxBytes || len(u.freeIDs) == 0 && u.nextID >= maxTables {
		if inUse == nil {
			u.forgetExited()
			inUse = u.tablesInUse()
		}
		if !u.evictOne(now, inUse) {
			u.deferred[key] = now
			u.mu.Lock()
			u.stats.Deferred++
			u.mu.Unlock()
			return nil, compiled, errNoRoom
		}
	}
	index := unwind.BuildIndex(t.Rows)
	inner, err := newTableMap(u.tableSpec, t.Rows, index)
	if err != nil {
		u.refused(err)
		return nil, compiled, err
	}
	defer inner.Close() // unwind_tables keeps its own reference
	var id uint32
	if n := len(u.freeIDs); n > 0 {
		id, u.freeIDs = u.freeIDs[n-1], u.freeIDs[:n-1]
	} else {
		id = u.nextID
		u.nextID++
	}
	if err := u.tables.Put(id, inner); err != nil {
		u.freeIDs = append(u.freeIDs, id)
		err = fmt.Errorf("add the table to unwind_tables: %w", err)
		u.refused(err)
		return nil, compiled, err
	}
	lt = &loadedTable{
		id: id, rows: uint32(len(t.Rows)), bytes: size, key: key, lastUsed: now,
		indexPC: index.Base, buckets: uint32(len(index.First) - 1), shift: index.Shift,
	}
	u.loaded[key] = lt
	u.updateSizes()
	return lt, compiled, nil
}

// refused counts a table the kernel did not take (LoadErrors) and warns
// of the first: its frames are walked with frame pointers.
func (u *unwinder) refused(err error) {
	u.mu.Lock()
	u.stats.LoadErrors++
	first := u.stats.LoadErrors == 1
	u.mu.Unlock()
	if first {
		u.log.Warn("the kernel refused an unwind table: the frames of its binary are walked with frame pointers", "err", err)
	}
}

// rowStride is the distance between two rows in an array map's memory:
// the kernel rounds a value's size up to 8 bytes.
const rowStride = (unwind.RowSize + 7) &^ 7

// fillRows writes rows and then their index into a new BPF_F_MMAPABLE
// array map of as many entries through a shared mapping of its memory,
// unmapped on return: a copy, where a batch update of the map costs a
// system call's work per row (about 150 ms of system time for 10 MB of
// tables on the 2-CPU test machine).
func fillRows(m *ebpf.Map, rows []unwind.Row, index unwind.Index) error {
	slots := index.AppendBPF(nil)
	size := (len(rows) + len(slots)/unwind.RowSize) * rowStride
	page := os.Getpagesize()
	mem, err := unix.Mmap(m.FD(), 0, (size+page-1)/page*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("map the memory of a %d-row table map: %w", len(rows), err)
	}
	for i, r := range rows {
		off := i * rowStride
		r.AppendBPF(mem[off : off : off+unwind.RowSize])
	}
	for j := 0; j < len(slots); j += unwind.RowSize {
		off := (len(rows) + j/unwind.RowSize) * rowStride
		copy(mem[off:off+unwind.RowSize], slots[j:j+unwind.RowSize])
	}
	if err := unix.Munmap(mem); err != nil {
		return fmt.Errorf("unmap the memory of a %d-row table map: %w", len(rows), err)
	}
	return nil
}

func (u *unwinder) used() int64 {
	var n int64
	for _, t := range u.loaded {
		n += t.bytes
	}
	return n
}

func (u *unwinder) updateSizes() {
	u.mu.Lock()
	u.stats.Tables, u.stats.TableBytes = len(u.loaded), u.used()
	u.mu.Unlock()
}

// tableResidence is how long a table stays loaded after its processes
// were last sampled before another may take its room, and how long a table
// there was no room for waits before it is tried again: with more tables
// in use than the bound holds, the ones in do not trade places with the
// ones out at every poll (each trade a build or a cache read and a map).
const tableResidence = 10 * time.Second

// errNoRoom is load's error when every table is in use.
var errNoRoom = errors.New("no room for the table: the loaded ones are in use")

// evictOne drops the least recently used table that no live process uses,
// or else the least recently used one unused for tableResidence, and
// reports whether there was one. The processes that use it lose their
// entries, so that their next samples ask for them again (frame pointers
// meanwhile). inUse is tablesInUse's answer.
func (u *unwinder) evictOne(now time.Time, inUse map[string]bool) bool {
	var victim *loadedTable
	for _, t := range u.loaded {
		if inUse[t.key] && now.Sub(t.lastUsed) < tableResidence {
			continue
		}
		// Tables of no live process before tables of idle ones.
		if victim == nil || inUse[victim.key] && !inUse[t.key] ||
			inUse[victim.key] == inUse[t.key] && t.lastUsed.Before(victim.lastUsed) {
			victim = t
		}
	}
	if victim == nil {
		return false
	}
	_ = u.tables.Delete(victim.id)
	u.freeIDs = append(u.freeIDs, victim.id)
	delete(u.loaded, victim.key)
	for pid, st := range u.procList {
		if slices.Contains(st.tables, victim.key) {
			_ = u.procs.Delete(pid)
			delete(u.procList, pid)
		}
	}
	u.mu.Lock()
	u.stats.Evictions++
	u.mu.Unlock()
	u.updateSizes()
	return true
}
