package profiler

import (
	"bufio"
	"bytes"
	"cmp"
	"debug/elf"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"

	"github.com/heatscope/heatscope/bpf"
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
	Tables             int
	TableBytes         int64
	MaxBytes           int64
	Processes          int
	Built, CacheHits   uint64
	Evictions          uint64
	NoCFI, BuildErrors uint64
	// MapsReads counts /proc/PID/maps reads for tables.
	MapsReads uint64
}

// fileKey names a mapped file as stat(2) sees it.
type fileKey struct {
	dev, ino uint64
	size     int64
	mtimeNs  int64
}

// execSegment is an executable PT_LOAD of a binary.
type execSegment struct{ off, vaddr, filesz uint64 }

// mappedFile is what the unwinder knows of a mapped file.
type mappedFile struct {
	cfi  uint64
	segs []execSegment
	// key names its table (build id, or the file's identity), "" when
	// it has none (no CFI, or an error).
	key string
}

// loadedTable is a table in unwind_tables.
type loadedTable struct {
	id       uint32
	rows     uint32
	bytes    int64
	lastUsed time.Time
}

// procState is what the unwinder did for one process: the mappings it
// read, and whether some of their tables were still to be built.
type procState struct {
	mm       uint64
	read     time.Time
	root     string
	maps     []execMapping
	complete bool
}

// buildJob is a binary whose table some process waits for.
type buildJob struct {
	path string // as the first process that maps it sees it
	cfi  uint64 // bytes of .eh_frame and .debug_frame: the build's cost
}

// unwinder reads sampled processes' mappings, builds and loads the
// tables of their binaries, and fills unwind_procs, on its own goroutine:
// building a table can take tens of milliseconds, which the ring reader
// must not wait for.
type unwinder struct {
	procs, pending, tables *ebpf.Map
	cache                  unwind.Cache
	maxBytes               int64
	log                    *slog.Logger
	procRoot               string

	wake chan struct{}
	done chan struct{}
	wg   sync.WaitGroup

	// Owned by the worker goroutine.
	files    map[fileKey]*mappedFile
	loaded   map[string]*loadedTable
	failed   map[string]bool
	procList map[uint32]*procState
	freeIDs  []uint32
	nextID   uint32
	swept    time.Time
	// queue holds the binaries to build, by table key.
	queue map[string]buildJob

	mu    sync.Mutex
	stats UnwindStats
}

// maxTables is MAX_TABLES in bpf/profile.bpf.c.
const maxTables = 4096

// maxUmaps is MAX_UMAPS in bpf/profile.bpf.c.
const maxUmaps = 64

// maxWalkFrames is MAX_WALK_FRAMES in bpf/profile.bpf.c.
const maxWalkFrames = 128

func newUnwinder(objs *bpf.ProfileMaps, cacheDir string, maxBytes int64, log *slog.Logger) *unwinder {
	if maxBytes <= 0 {
		maxBytes = DefaultUnwindMaxBytes
	}
	u := &unwinder{
		procs: objs.UnwindProcs, pending: objs.UnwindPending, tables: objs.UnwindTables,
		cache: unwind.Cache{Dir: cacheDir}, maxBytes: maxBytes, log: log, procRoot: "/proc",
		wake: make(chan struct{}, 1), done: make(chan struct{}),
		files: map[fileKey]*mappedFile{}, loaded: map[string]*loadedTable{}, failed: map[string]bool{},
		procList: map[uint32]*procState{}, queue: map[string]buildJob{},
	}
	u.stats.Enabled, u.stats.MaxBytes = true, maxBytes
	u.wg.Go(u.run)
	return u
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
	defer u.mu.Unlock()
	return u.stats
}

// refreshInterval is how often a process's mappings are read again at
// most, when its samples keep asking (a pc in no known mapping).
const refreshInterval = time.Second

func (u *unwinder) run() {
	for {
		select {
		case <-u.done:
			return
		case <-u.wake:
		}
		t0 := time.Now()
		u.poll(t0)
		u.log.Debug("unwinder poll", "took", time.Since(t0), "queue", len(u.queue), "procs", len(u.procList), "loaded", len(u.loaded))
	}
}

// poll handles the pending processes.
func (u *unwinder) poll(now time.Time) {
	var pid uint32
	var mm uint64
	type req struct {
		pid uint32
		mm  uint64
	}
	var reqs []req
	it := u.pending.Iterate()
	for it.Next(&pid, &mm) {
		reqs = append(reqs, req{pid, mm})
	}
	for _, r := range reqs {
		if u.closing() {
			return
		}
		st := u.procList[r.pid]
		if st != nil && st.mm == r.mm && now.Sub(st.read) < refreshInterval {
			continue // asked again too soon: left pending for a later poll
		}
		if err := u.process(r.pid, r.mm, now); err != nil {
			u.log.Debug("unwind tables of a process", "pid", r.pid, "err", err)
		}
		_ = u.pending.Delete(r.pid)
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

// sweep forgets the processes that have exited.
func (u *unwinder) sweep() {
	for pid := range u.procList {
		if err := unix.Kill(int(pid), 0); errors.Is(err, unix.ESRCH) {
			delete(u.procList, pid)
			_ = u.procs.Delete(pid)
		}
	}
}

// execMapping is one executable mapping of /proc/PID/maps.
type execMapping struct {
	start, end, offset uint64
	path               string
}

// readExecMaps returns the executable mappings of a process.
func readExecMaps(path string) ([]execMapping, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []execMapping
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) < 5 || len(f[1]) < 3 || f[1][2] != 'x' {
			continue
		}
		lo, hi, ok := bytes.Cut(f[0], []byte("-"))
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(string(lo), 16, 64)
		end, err2 := strconv.ParseUint(string(hi), 16, 64)
		off, err3 := strconv.ParseUint(string(f[2]), 16, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		m := execMapping{start: start, end: end, offset: off}
		if len(f) >= 6 {
			m.path = string(bytes.Join(f[5:], []byte(" ")))
		}
		out = append(out, m)
	}
	return out, nil
}

// process reads a process's mappings and writes its unwind_procs entry
// with the tables loaded so far; the others are queued for build, and
// the entry is written again when they are in.
func (u *unwinder) process(pid uint32, mm uint64, now time.Time) error {
	u.mu.Lock()
	u.stats.MapsReads++
	u.mu.Unlock()
	root := fmt.Sprintf("%s/%d", u.procRoot, pid)
	maps, err := readExecMaps(root + "/maps")
	if err != nil {
		return err
	}
	st := &procState{mm: mm, read: now, root: root, maps: maps}
	u.procList[pid] = st
	return u.writeEntry(pid, st, now)
}

// writeEntry writes a process's unwind_procs entry from its mappings.
func (u *unwinder) writeEntry(pid uint32, st *procState, now time.Time) error {
	var entry bpf.ProfileHsProc
	entry.Mm = st.mm
	st.complete = true
	for _, m := range st.maps {
		if entry.Count >= maxUmaps {
			entry.Flags |= 1 // HS_PROC_TRUNCATED
			break
		}
		um := bpf.ProfileHsUmap{Start: m.start, End: m.end, Table: noTable}
		if len(m.path) > 0 && m.path[0] == '/' {
			t, bias, state := u.tableFor(st.root+"/root"+m.path, m.offset, m.start, now)
			switch state {
			case tableLoaded:
				um.Table, um.Rows, um.Bias = t.id, t.rows, bias
			case tableQueued:
				st.complete = false
			}
		}
		entry.M[entry.Count] = um
		entry.Count++
	}
	if err := u.procs.Put(pid, &entry); err != nil {
		return fmt.Errorf("write the mappings of process %d: %w", pid, err)
	}
	return nil
}

// buildBudget is how long one poll may spend building tables; the rest
// wait for the next poll. Small tables go first: most processes then get
// most of their frames soon, and one huge binary (a browser, node) does
// not hold up the rest.
const buildBudget = 200 * time.Millisecond

// build builds queued tables, smallest first, for up to buildBudget (at
// least one), then rewrites the entries of the processes that waited.
func (u *unwinder) build(now time.Time) {
	if len(u.queue) == 0 {
		return
	}
	keys := make([]string, 0, len(u.queue))
	for k := range u.queue {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return cmp.Compare(u.queue[a].cfi, u.queue[b].cfi) })
	start := time.Now()
	for i, k := range keys {
		if i > 0 && time.Since(start) >= buildBudget || u.closing() {
			break
		}
		job := u.queue[k]
		delete(u.queue, k)
		if _, err := u.load(job.path, k, now); err != nil {
			u.log.Debug("load unwind table", "path", job.path, "err", err)
		}
	}
	for pid, st := range u.procList {
		if !st.complete {
			if err := u.writeEntry(pid, st, now); err != nil {
				u.log.Debug("unwind tables of a process", "pid", pid, "err", err)
			}
		}
	}
}

// noTable is HS_NO_TABLE.
const noTable = 0xffffffff

// What tableFor found.
const (
	tableNone   = iota // no table: no CFI, an error, not an ELF file
	tableLoaded        // loaded
	tableQueued        // to be built
)

// tableFor returns the loaded table of the file at path and the load bias
// of its mapping at file offset off, address start; or queues the table
// for build.
func (u *unwinder) tableFor(path string, off, start uint64, now time.Time) (*loadedTable, uint64, int) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return nil, 0, tableNone
	}
	fk := fileKey{dev: st.Dev, ino: st.Ino, size: st.Size, mtimeNs: st.Mtim.Nano()}
	b, ok := u.files[fk]
	if !ok {
		b = u.readBinary(path, fk)
		u.files[fk] = b
	}
	if b.key == "" || u.failed[b.key] {
		return nil, 0, tableNone
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
		if _, queued := u.queue[b.key]; !queued {
			u.queue[b.key] = buildJob{path: path, cfi: b.cfi}
		}
		return nil, 0, tableQueued
	}
	t.lastUsed = now
	return t, start - off + seg.off - seg.vaddr, tableLoaded
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
		b.key = "build-id:" + id
	} else {
		b.key = fmt.Sprintf("file:%d:%d:%d:%d", fk.dev, fk.ino, fk.size, fk.mtimeNs)
	}
	return b
}

// load builds (or reads from the cache) a table and loads it into
// unwind_tables, evicting the least recently used tables beyond maxBytes.
func (u *unwinder) load(path, key string, now time.Time) (lt *loadedTable, err error) {
	defer func() {
		if err != nil {
			u.failed[key] = true // neither retried nor counted again
		}
	}()
	t, hit, err := u.cache.Load(path)
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
		return nil, err
	}
	size := int64(t.Size())
	if size > u.maxBytes || len(t.Rows) == 0 {
		return nil, fmt.Errorf("table of %d bytes, more than the %d-byte bound", size, u.maxBytes)
	}
	for u.used()+size > u.maxBytes || len(u.freeIDs) == 0 && u.nextID >= maxTables {
		if !u.evictOldest() {
			return nil, errors.New("no room for the table")
		}
	}
	inner, err := ebpf.NewMap(&ebpf.MapSpec{
		Type: ebpf.Array, KeySize: 4, ValueSize: unwind.RowSize,
		MaxEntries: uint32(len(t.Rows)), Flags: unix.BPF_F_INNER_MAP,
	})
	if err != nil {
		return nil, fmt.Errorf("create a %d-row table map: %w", len(t.Rows), err)
	}
	defer inner.Close() // unwind_tables keeps its own reference
	keys := make([]uint32, len(t.Rows))
	vals := make([]bpf.ProfileHsRow, len(t.Rows))
	for i, r := range t.Rows {
		keys[i] = uint32(i)
		vals[i] = bpf.ProfileHsRow{Pc: uint32(r.PC), CfaOff: int16(r.CFAOffset), RbpOff: int16(r.RBPOffset),
			Cfa: uint8(r.CFA), Rbp: uint8(r.RBP), Arg: r.Threshold}
	}
	if _, err := inner.BatchUpdate(keys, vals, nil); err != nil {
		return nil, fmt.Errorf("fill the table map: %w", err)
	}
	var id uint32
	if n := len(u.freeIDs); n > 0 {
		id, u.freeIDs = u.freeIDs[n-1], u.freeIDs[:n-1]
	} else {
		id = u.nextID
		u.nextID++
	}
	if err := u.tables.Put(id, inner); err != nil {
		u.freeIDs = append(u.freeIDs, id)
		return nil, fmt.Errorf("add the table to unwind_tables: %w", err)
	}
	lt = &loadedTable{id: id, rows: uint32(len(t.Rows)), bytes: size, lastUsed: now}
	u.loaded[key] = lt
	u.updateSizes()
	return lt, nil
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

// evictOldest drops the least recently used table; the processes that use
// it lose their entries, so that their next samples ask for them again
// (frame pointers meanwhile).
func (u *unwinder) evictOldest() bool {
	if len(u.loaded) == 0 {
		return false
	}
	keys := make([]string, 0, len(u.loaded))
	for k := range u.loaded {
		keys = append(keys, k)
	}
	oldest := slices.MinFunc(keys, func(a, b string) int {
		return cmp.Compare(u.loaded[a].lastUsed.UnixNano(), u.loaded[b].lastUsed.UnixNano())
	})
	t := u.loaded[oldest]
	_ = u.tables.Delete(t.id)
	u.freeIDs = append(u.freeIDs, t.id)
	delete(u.loaded, oldest)
	for pid := range u.procList {
		if u.usesID(pid, t.id) {
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

// usesID reports whether a process's unwind_procs entry uses table id.
func (u *unwinder) usesID(pid uint32, id uint32) bool {
	var e bpf.ProfileHsProc
	if err := u.procs.Lookup(pid, &e); err != nil {
		return false
	}
	for i := range min(int(e.Count), maxUmaps) {
		if e.M[i].Table == id {
			return true
		}
	}
	return false
}
