package profiler

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/heatscope/heatscope/bpf"
	"github.com/heatscope/heatscope/symbolize"
)

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
	// pyChecked is set once its mappings were looked through for a
	// Python interpreter (pythonFinder); pyRuntime is then the address
	// of its _PyRuntime (0: none) and pyLayout its layout's index.
	pyChecked bool
	pyRuntime uint64
	pyLayout  uint32
	// pyWaiting is set when its mappings showed a launcher of libpython
	// but not the library yet (pythonFinder.find): the Python set-up
	// reads them again shortly (retryPython).
	pyWaiting bool
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
	for start := true; ; start = false {
		n, err := lookupAndDeleteBatch(u.pending, &u.pendCursor, start, u.pendKeys, u.pendVals)
		for i := range n {
			u.taken = append(u.taken, taken{pid: u.pendKeys[i], mm: u.pendVals[i], at: now, byReader: byReader})
		}
		if err == errBatchDone {
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
	u.drainedTake, u.drainedAt = u.lastTake, time.Now()
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

// sweep forgets the processes that have exited (also as the queued
// tables' waiters), and halves every process's heat, so that the build
// order follows what is sampled now.
func (u *unwinder) sweep() {
	u.forgetExited()
	u.pruneQueue()
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

// forgetExited forgets the processes that have exited.
func (u *unwinder) forgetExited() {
	for pid := range u.procList {
		if err := unix.Kill(int(pid), 0); errors.Is(err, unix.ESRCH) {
			delete(u.procList, pid)
			_ = u.procsOut().delete(pid)
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
	// The entry (3.5 KB) is the unwinder's, written over for each: made
	// anew, it was most of the bytes a process's set-up allocated.
	entry := &u.entry
	*entry = bpf.ProfileHsProc{}
	entry.Mm = st.mm
	u.gen++
	entry.Gen = u.gen
	if !st.pyChecked && u.python != nil && pid != u.self {
		st.pyRuntime, st.pyLayout, _, st.pyWaiting = u.python.find(st.root, st.maps)
	}
	st.pyChecked = true
	entry.PyRuntime, entry.PyLayout = st.pyRuntime, st.pyLayout
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
	if err := u.procsOut().put(pid, entry); err != nil {
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
