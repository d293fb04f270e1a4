package profiler

import (
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heatscope/heatscope/internal/rawsys"
	"github.com/heatscope/heatscope/unwind"
)

// DefaultUnwindMaxBytes bounds the unwind tables loaded into BPF maps.
const DefaultUnwindMaxBytes = 64 << 20

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
	fk, ok := statFileKey(path, id)
	if !ok {
		return fileKey{}, false
	}
	if id.ino != 0 {
		if u.idents == nil {
			u.idents = map[mappedID]identity{}
		}
		u.idents[id] = identity{key: fk, at: now}
	}
	return fk, true
}

// statFileKey names the file at path by a stat of it now (id, how the
// maps name it, is not needed for that).
func statFileKey(path string, _ mappedID) (fileKey, bool) {
	var st syscall.Stat_t
	if err := rawsys.Stat(path, &st); err != nil { // a mapped file: its inode is in memory
		return fileKey{}, false
	}
	return fileKey{dev: st.Dev, ino: st.Ino, size: st.Size, mtimeNs: st.Mtim.Nano()}, true
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
	// Compiled (or read) with u.state released: the Python set-up
	// writes new processes' entries meanwhile (runPythonSetUp).
	u.state.Unlock()
	t, hit, err := u.cache.Load(path)
	u.state.Lock()
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
			_ = u.procsOut().delete(pid)
			delete(u.procList, pid)
		}
	}
	u.pruneQueue()
	u.mu.Lock()
	u.stats.Evictions++
	u.mu.Unlock()
	u.updateSizes()
	return true
}
