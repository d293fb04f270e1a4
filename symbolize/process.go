package symbolize

import (
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/heatscope/heatscope/sample"
	"golang.org/x/sys/unix"
)

// mapsRefreshInterval bounds how often a process's maps are re-read when
// an address falls outside them (after a dlopen or an exec).
const mapsRefreshInterval = time.Second

// process is what is known of one process: its executable mappings, read
// when the process was first seen, with the binaries loaded so far, and
// its perf map.
type process struct {
	mu  sync.Mutex
	pid uint32
	// usedAt is when the process was last looked up, or found alive by
	// ForgetExited, in Unix nanoseconds; guarded by the Symbolizer's mu.
	usedAt int64
	// exited is set when the mappings came from an exit snapshot: no need
	// to ask /proc whether it lives. Guarded by the Symbolizer's mu.
	exited bool
	// maps holds the executable mappings, sorted by start address.
	maps []userMapping
	// version is new (Symbolizer.versions) each time maps is set: the
	// stack cache's key.
	version uint64
	// readAt is when maps was last read (or tried); zero once the
	// process exec'd since (see Has).
	readAt time.Time
	// procRead is when the read of /proc/PID/maps that maps came from
	// started; zero when they came from a snapshot (SetMaps) or no read
	// succeeded. RecentExecMappings hands them on by it.
	procRead time.Time
	// comm is the command name of the process's last sample (Has).
	comm string
	// perf is the JIT perf map, opened the first time it is needed.
	perf *perfMap
	// py is its Python interpreter, found at its first sample with
	// Python frames (python.go).
	py *pythonState
}

// userMapping is an executable mapping with, for a file, its binary,
// loaded the first time an address falls in the mapping.
type userMapping struct {
	mapping
	// loaded is set once the file was read, or tried.
	loaded bool
	// bin is the cache entry of the file's symbol table; nil before it
	// is loaded or when the file could not be opened.
	bin *binEntry
}

// readMaps (re-)reads the process's executable mappings. Mappings
// unchanged since the last read keep their binary. If the maps cannot be
// read, as when the process has exited, the old ones stay. p.mu must be
// held.
func (s *Symbolizer) readMaps(p *process) {
	span := s.stats.processesCPU.Start()
	defer span.Stop()
	started := time.Now()
	p.readAt = started
	s.stats.mapsReads.Add(1)
	path := filepath.Join(s.opts.ProcRoot, strconv.FormatUint(uint64(p.pid), 10), "maps")
	sc := mapsScratches.Get().(*mapsScratch)
	defer sc.put()
	// With raw system calls: an ordinary one woke the Go runtime's sysmon
	// thread for the rest of the drain of the sample ring (rawsys).
	sc.maps = sc.maps[:0]
	if err := readExecMaps(sc, path, &s.paths); err != nil {
		s.stats.mapsErrors.Add(1)
		s.opts.Logger.Debug("symbolize: read maps", "pid", p.pid, "err", err)
		return
	}
	n := 0
	for _, m := range sc.maps {
		if m.exec {
			n++
		}
	}
	exec := make([]userMapping, 0, n)
	for _, m := range sc.maps {
		if !m.exec {
			continue
		}
		um := userMapping{mapping: m}
		if old := p.find(m.start); old != nil && old.mapping == m {
			um = *old
		}
		exec = append(exec, um)
	}
	p.maps, p.version, p.procRead = exec, s.versions.Add(1), started
}

// ExecMapping is an executable mapping of a process as a line of
// /proc/PID/maps gives it, for another reader of the mappings (the
// sampler's unwinder) to take from the symbolizer's read instead of
// reading them again.
type ExecMapping struct {
	Start, End uint64
	// Offset is the file offset mapped at Start.
	Offset uint64
	// Dev and Inode identify the mapped file (Dev encoded as stat(2)'s
	// st_dev); 0 for anonymous memory.
	Dev, Inode uint64
	// Path is the mapped file's path, empty for anonymous memory, or a
	// name such as "[vdso]".
	Path string
	// Deleted is set when the file was deleted or replaced since it was
	// mapped (the line's " (deleted)", cut from Path): Path then names
	// another file, or none.
	Deleted bool
	// Used is set once an address of a sample the symbolizer was given
	// fell in the mapping (of a file) since it was read: a binary the
	// process's stacks pass through.
	Used bool
}

// ReadExecMappings reads the executable mappings of the maps file at
// path (/proc/PID/maps), as the symbolizer parses its own reads.
func ReadExecMappings(path string) ([]ExecMapping, error) {
	sc := mapsScratches.Get().(*mapsScratch)
	defer sc.put()
	sc.maps = sc.maps[:0]
	if err := readExecMaps(sc, path, nil); err != nil {
		return nil, err
	}
	maps := sc.maps
	out := make([]ExecMapping, len(maps))
	for i, m := range maps {
		out[i] = ExecMapping{Start: m.start, End: m.end, Offset: m.offset, Dev: m.dev, Inode: m.inode, Path: m.path, Deleted: m.deleted}
	}
	return out, nil
}

// RecentExecMappings appends to dst the executable mappings of process pid
// from the symbolizer's last read of its /proc/PID/maps, if that read
// started at or after since, and reports whether there was one; each says
// whether the process's samples had an address in it (Used). It reads
// nothing and does not make pid known: a process the symbolizer has not
// seen, one whose mappings came from an exit snapshot, and one last read
// before since are false, and the caller reads /proc itself.
func (s *Symbolizer) RecentExecMappings(dst []ExecMapping, pid uint32, since time.Time) ([]ExecMapping, bool) {
	s.mu.Lock()
	p, ok := s.procs.peek(pid)
	s.mu.Unlock()
	if !ok {
		return dst, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.procRead.IsZero() || p.procRead.Before(since) {
		return dst, false
	}
	for i := range p.maps {
		m := &p.maps[i]
		dst = append(dst, ExecMapping{Start: m.start, End: m.end, Offset: m.offset, Dev: m.dev, Inode: m.inode, Path: m.path, Deleted: m.deleted, Used: m.loaded})
	}
	return dst, true
}

// mapsScratch is what reading a process's maps needs for a moment: the
// file's text (or the buffer of a query's path) and its parsed lines. They
// are pooled, since under process churn maps are read hundreds of times a
// second.
type mapsScratch struct {
	data []byte
	maps []mapping
	name [unix.PathMax]byte
}

var mapsScratches = sync.Pool{New: func() any { return &mapsScratch{data: make([]byte, 0, 16<<10)} }}

// maxScratch is the largest maps text whose buffer goes back to the pool.
const maxScratch = 1 << 20

func (sc *mapsScratch) put() {
	if cap(sc.data) > maxScratch {
		return
	}
	clear(sc.maps[:cap(sc.maps)]) // drop the paths
	sc.data, sc.maps = sc.data[:0], sc.maps[:0]
	mapsScratches.Put(sc)
}

// find returns the executable mapping containing addr, or nil.
func (p *process) find(addr uint64) *userMapping {
	// By index: a userMapping is too large to be copied for each probe.
	i := sort.Search(len(p.maps), func(i int) bool { return p.maps[i].end > addr })
	if i == len(p.maps) || addr < p.maps[i].start {
		return nil
	}
	return &p.maps[i]
}

// resolveUser returns the frame of the user address addr, looking up
// lookup (addr-1 for return addresses), and whether it was named.
// p.mu must be held.
func (s *Symbolizer) resolveUser(p *process, addr, lookup uint64) (sample.Frame, bool) {
	if f, ok := s.frames.get(p.version, addr, lookup); ok {
		return f, true
	}
	m := p.find(lookup)
	if m == nil && time.Since(p.readAt) >= mapsRefreshInterval {
		s.readMaps(p)
		m = p.find(lookup)
	}
	if m == nil {
		return sample.Frame{Function: unknownName(moduleUnknown, addr), Module: moduleUnknown, Address: addr}, false
	}

	switch m.class() {
	case classAnon:
		if p.perf == nil {
			p.perf = newPerfMap(filepath.Join(s.opts.PerfMapDir, fmt.Sprintf("perf-%d.map", p.pid)))
		}
		if name, ok := p.perf.lookup(lookup); ok {
			return sample.Frame{Function: name, Module: moduleJIT, Address: addr, Kind: sample.KindJIT}, true
		}
		return sample.Frame{Function: unknownName(moduleAnon, addr), Module: moduleAnon, Address: addr}, false
	case classPseudo:
		off := addr - m.start
		return sample.Frame{Function: unknownName(m.path, off), Module: m.path, Address: off, Kind: sample.KindUser}, false
	}

	off := addr - m.start + m.offset
	f := sample.Frame{Module: m.path, Address: off, Kind: sample.KindUser}
	bin := s.mappedBinary(p, m)
	if bin == nil {
		f.Function = unknownName(m.path, off)
		return f, false
	}
	f.BuildID = bin.buildID
	f.Address = bin.vaddr(off)
	if name, ok := bin.lookup(f.Address - (addr - lookup)); ok {
		f.Function = name
		s.frames.put(p.version, addr, lookup, f)
		return f, true
	}
	f.Function = unknownName(m.path, f.Address)
	return f, false
}

// mappedBinary returns the symbol table of a file mapping, looking it up
// the first time, and again when the cache evicted it since: a mapping
// does not keep a binary in memory past the cache's bounds. It is nil when
// the file cannot be read. p.mu must be held.
func (s *Symbolizer) mappedBinary(p *process, m *userMapping) *binaryFile {
	if !m.loaded {
		m.bin, m.loaded = s.binary(p.pid, &m.mapping), true
	}
	if m.bin == nil {
		return nil
	}
	bin, stale := m.bin.binary()
	if stale {
		if m.bin = s.binary(p.pid, &m.mapping); m.bin != nil {
			bin, _ = m.bin.binary() // nil if evicted again meanwhile
		}
	}
	return bin
}

// Modules of user frames outside any file.
const (
	moduleUnknown = "[unknown]" // outside every mapping
	moduleAnon    = "[anon]"    // anonymous memory without a perf map entry
	moduleJIT     = "[jit]"     // named by the perf map
)
