package profiler

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"

	"github.com/heatscope/heatscope/bpf"
	"github.com/heatscope/heatscope/internal/workclock"
	"github.com/heatscope/heatscope/pyinterp"
	"github.com/heatscope/heatscope/symbolize"
	"github.com/heatscope/heatscope/unwind"
)

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
	// Python counts what was found of Python interpreters.
	Python PythonStats
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
	// pyWake wakes the Python set-up (setUpPython) after each drain.
	pyWake chan struct{}
	// state guards what the worker owns (below, from files on): the
	// worker holds it while it works, but for the time it compiles or
	// reads a table (unwind.Cache.Load), which can take seconds of wall
	// time on a loaded machine; meanwhile the Python set-up takes it to
	// write the entries of new Python processes.
	state sync.Mutex
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
	// walk's caches of rows (walk_cache, leaf_cache) never take an old
	// entry's rows for a new one's.
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
	// when it was emptied before the ring reader's last complete drain;
	// drainedAt is when that drain ended (the Python set-up's debug log).
	lastTake, drainedTake, drainedAt time.Time
	// pendKeys and pendVals are the buffers unwind_pending is read into.
	pendKeys   []uint32
	pendVals   []uint64
	pendCursor batchCursor
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
	// python finds the interpreter of the processes that run CPython,
	// for their entries.
	python *pythonFinder
	// entry is the buffer writeEntry fills; under state.
	entry bpf.ProfileHsProc
	// procsW writes unwind_procs entries with raw system calls
	// (procsOut).
	procsW *procsWriter
	// pyRetries holds the processes whose mappings the Python set-up
	// reads again for their interpreter (retryPython), made at the
	// first; under state.
	pyRetries map[uint32]pyRetry
}

func newUnwinder(objs *bpf.ProfileMaps, askCount *ebpf.Variable, tableSpec *ebpf.MapSpec, cache unwind.Cache, maxBytes int64, periodNs func() int64,
	recentMaps func([]symbolize.ExecMapping, uint32, time.Time) ([]symbolize.ExecMapping, bool), interpreters Interpreters, log *slog.Logger) *unwinder {
	if maxBytes <= 0 {
		maxBytes = DefaultUnwindMaxBytes
	}
	u := &unwinder{
		procs: objs.UnwindProcs, pending: objs.UnwindPending, askCount: askCount, tables: objs.UnwindTables, tableSpec: tableSpec,
		cache: cache, maxBytes: maxBytes, periodNs: periodNs, recentMaps: recentMaps, self: uint32(os.Getpid()), log: log, procRoot: "/proc",
		wake: make(chan struct{}, 1), done: make(chan struct{}), pyWake: make(chan struct{}, 1),
		files: map[fileKey]*mappedFile{}, loaded: map[string]*loadedTable{}, failed: map[string]bool{}, deferred: map[string]time.Time{},
		procList: map[uint32]*procState{}, queue: map[string]*buildJob{},
		heat: map[uint32]uint64{}, newHeat: map[uint32]uint64{},
		asks: map[uint32]ask{}, pendKeys: make([]uint32, maxPending), pendVals: make([]uint64, maxPending),
	}
	u.python = newPythonFinder(objs.PyLayouts, interpreters, log)
	// The finder names a mapped file as the tables do, from the stat
	// they share (identityTTL): a Python process costs no stat of its
	// own.
	u.python.identify = func(path string, id mappedID) (fileKey, bool) { return u.fileKeyOf(path, id, time.Now()) }
	u.stats.Enabled, u.stats.MaxBytes = true, maxBytes
	if u.cache.Pruned == nil {
		u.cache.Pruned = &unwind.PruneStats{}
	}
	u.cache.Prune() // what earlier runs left over the bound
	return u
}

// start starts the worker goroutine, and the Python set-up's.
func (u *unwinder) start() {
	u.wg.Go(u.run)
	if u.python != nil {
		u.wg.Go(u.runPythonSetUp)
	}
}

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
	select {
	case u.pyWake <- struct{}{}:
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
	st.Python = u.python.Stats()
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
		u.state.Lock()
		u.poll(t0)
		u.log.Debug("unwinder poll", "took", time.Since(t0), "queue", len(u.queue), "procs", len(u.procList), "loaded", len(u.loaded))
		u.state.Unlock()
	}
}

// readBudget is how long one poll may spend reading pending processes'
// mappings; the least sampled wait for the next poll.
const readBudget = 50 * time.Millisecond

// poll handles the pending processes.
func (u *unwinder) poll(now time.Time) {
	u.mu.Lock()
	u.countWaited()
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
		if u.heat[pid] < askSamples && now.Sub(a.since) < askWait && !u.mayRunPython(pid, a) {
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
		u.setUpOne(pid, a, now, "poll")
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

// countWaited adds the samples of each queued table's waiters since the
// last poll (newHeat) to its counts, going through the smaller of the two
// sets: under churn a table waits for the processes of the last sweep,
// and a poll's samples are of a few. u.mu is held.
func (u *unwinder) countWaited() {
	for _, job := range u.queue {
		if len(u.newHeat) < len(job.waiters) {
			for pid, n := range u.newHeat {
				if _, ok := job.waiters[pid]; ok {
					job.waited += n
					job.later += n
				}
			}
			continue
		}
		for pid := range job.waiters {
			job.waited += u.newHeat[pid]
			job.later += u.newHeat[pid]
		}
	}
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
		_ = u.procsOut().delete(pid)
	}
	clear(u.procList)
	clear(u.queue)
	clear(u.asks)
	u.mu.Lock()
	u.stats.Fallback = Fallback{Check: CheckWalkResults, Reason: err.Error()}
	u.mu.Unlock()
}

// mayRunPython reports whether a process that asked for its mappings
// (a) may run Python: a new image of a process whose image ran Python
// (an exec, e.g. a reloader's), or one whose mappings, as the symbolizer
// read them since it asked (Config.RecentMaps, at no cost of the
// unwinder's own), include a file that may hold CPython. Such a process
// is set up at its first request, not after a second sample: the
// sampler walks its Python frames only once its entry names its
// interpreter, and until then its samples show the interpreter's
// evaluation loop where the program's functions ran. Any other process
// waits as before (askSamples): under churn most processes sampled once
// exit soon after.
func (u *unwinder) mayRunPython(pid uint32, a ask) bool {
	if u.python == nil {
		return false
	}
	if st := u.procList[pid]; st != nil && st.mm != a.mm && st.pyRuntime != 0 {
		return true
	}
	if u.recentMaps == nil {
		return false
	}
	maps, ok := u.recentMaps(u.useBuf[:0], pid, a.since)
	u.useBuf = maps[:0]
	return ok && slices.ContainsFunc(maps, func(m symbolize.ExecMapping) bool { return !m.Deleted && pyinterp.MayBeInterpreter(m.Path) })
}

// procsOut returns the writer of unwind_procs entries, made at its first
// use. u.state is held: its calls share one key buffer.
func (u *unwinder) procsOut() *procsWriter {
	if u.procsW == nil {
		u.procsW = newProcsWriter(u.procs)
	}
	return u.procsW
}

// runPythonSetUp writes the entries of new Python processes after each
// drain of the ring (setUpPython), beside the worker: the worker builds
// tables for up to buildBudget a poll, and one table of a big binary took
// 2.8 s of wall time on a loaded machine, while the samples of a Python
// process that asked meanwhile had no Python frames. It takes state
// while the worker compiles, or between its polls. It also reads again,
// when due, the mappings of the processes set up in their dynamic loader
// (retryPython).
func (u *unwinder) runPythonSetUp() {
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		select {
		case <-u.done:
			return
		case <-u.pyWake:
		case <-retry.C:
		}
		u.state.Lock()
		now := time.Now()
		u.setUpPython(now)
		next := u.retryPython(now)
		u.state.Unlock()
		if !next.IsZero() {
			retry.Reset(time.Until(next))
		}
	}
}

// setUpPython writes the entries of the new images that asked for their
// mappings and may run Python (mayRunPython), and of those waiting for
// their interpreter (procState.pyWaiting) that asked again (a pc in the
// library just mapped); the other requests wait for the worker's poll.
// u.state is held.
func (u *unwinder) setUpPython(now time.Time) {
	if u.off || u.closing() {
		return // the table walk was turned off: no entry is written
	}
	u.takeAsks(now)
	for pid, a := range u.asks {
		st := u.procList[pid]
		known := st != nil && st.mm == a.mm
		if known && !st.pyWaiting || !known && !u.mayRunPython(pid, a) {
			continue // a known image's (a dlopen), or not Python
		}
		delete(u.asks, pid)
		u.setUpOne(pid, a, now, "first request")
	}
}

// setUpOne writes a process's entry (process; by says who asks, for
// the debug log), and if it is to be read again for its interpreter, when
// (pyRetries), waking the Python set-up for it. u.state is held.
func (u *unwinder) setUpOne(pid uint32, a ask, now time.Time, by string) {
	start := time.Now()
	span := u.processesCPU.Start()
	err := u.process(pid, a, now)
	span.Stop()
	if err != nil {
		delete(u.pyRetries, pid)
		u.log.Debug("unwind tables of a process", "pid", pid, "err", err)
		return
	}
	u.logPythonSetUp(pid, a, start, by)
	st := u.procList[pid]
	if !st.pyWaiting {
		delete(u.pyRetries, pid)
		return
	}
	if u.pyRetries == nil {
		u.pyRetries = map[uint32]pyRetry{}
	}
	r, ok := u.pyRetries[pid]
	if !ok || r.mm != a.mm {
		r = pyRetry{mm: a.mm, since: a.since, delay: pyRetryFirst}
	} else {
		r.delay *= 2
	}
	r.next = now.Add(r.delay)
	u.pyRetries[pid] = r
	select {
	case u.pyWake <- struct{}{}: // its timer is set after this round
	default:
	}
}

// pyRetry is when to read a process's mappings again for its
// interpreter: set up in its dynamic loader (procState.pyWaiting), it
// maps libpython a few milliseconds of its CPU time later.
type pyRetry struct {
	mm uint64
	// since is when its image first asked; next when to read it again,
	// delay the wait before that read (doubled at each).
	since, next time.Time
	delay       time.Duration
}

// pyRetryFirst is the first wait before a process set up in its dynamic
// loader is read again, doubled at each read; pyRetryFor is how long
// after its first request it is tried (about 10 reads): beyond it, its
// next request (a pc in a library its entry lacks, taken at the ring
// reader's next drain) is read at once (setUpPython). Before these, that
// request was the only one, and the worker read the process again only a
// refreshInterval after its first read: a pyenv build's first Python
// frames came over a second after its first sample.
const (
	pyRetryFirst = 5 * time.Millisecond
	pyRetryFor   = 3 * time.Second
)

// retryPython reads again the mappings of the processes waiting for their
// interpreter whose time has come (pyRetries), and returns when the next
// one is due (zero: none). u.state is held.
func (u *unwinder) retryPython(now time.Time) time.Time {
	var next time.Time
	for pid, r := range u.pyRetries {
		if st := u.procList[pid]; st == nil || st.mm != r.mm || !st.pyWaiting || u.off || now.Sub(r.since) >= pyRetryFor {
			delete(u.pyRetries, pid)
			continue
		}
		if now.Before(r.next) {
			if next.IsZero() || r.next.Before(next) {
				next = r.next
			}
			continue
		}
		u.setUpOne(pid, ask{mm: r.mm, since: r.since, last: now}, now, "retry")
		if r, ok := u.pyRetries[pid]; ok && (next.IsZero() || r.next.Before(next)) {
			next = r.next
		}
	}
	return next
}

// logPythonSetUp logs, at debug level, the steps of the set-up of a
// process that maps a file that may hold CPython, each as a Unix time in
// ns: when its request was taken out of unwind_pending (the ring
// reader's wake, or poll, after the sample that asked), when the drain
// that read its sample ended, when the set-up (by: at its first request,
// or the worker's poll) took it, and when its entry was written; and
// whether the entry names an interpreter. bench/python -trace joins them
// with the process's samples. u.state is held.
func (u *unwinder) logPythonSetUp(pid uint32, a ask, start time.Time, by string) {
	if !u.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	st := u.procList[pid]
	if st == nil || !slices.ContainsFunc(st.maps, func(m symbolize.ExecMapping) bool { return pyinterp.MayBeInterpreter(m.Path) }) {
		return
	}
	u.takeMu.Lock()
	drained := u.drainedAt
	u.takeMu.Unlock()
	u.log.Debug("python set-up", "pid", pid, "by", by, "taken_ns", a.since.UnixNano(), "last_taken_ns", a.last.UnixNano(),
		"drained_ns", drained.UnixNano(), "start_ns", start.UnixNano(), "written_ns", time.Now().UnixNano(), "interpreter", st.pyRuntime != 0)
}
