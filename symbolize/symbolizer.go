package symbolize

import (
	"cmp"
	"errors"
	"log/slog"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/heatscope/heatscope/internal/diskcache"
	"github.com/heatscope/heatscope/internal/rawsys"
	"github.com/heatscope/heatscope/internal/workclock"
	"github.com/heatscope/heatscope/pyinterp"
	"github.com/heatscope/heatscope/pysymbol"
	"github.com/heatscope/heatscope/sample"
)

// Options configures a Symbolizer. Zero fields take their defaults.
type Options struct {
	// ProcRoot is where procfs is mounted, "/proc" by default.
	ProcRoot string
	// PerfMapDir holds the JIT perf maps, PerfMapDir/perf-PID.map; "/tmp"
	// by default.
	PerfMapDir string
	// MaxBinaries bounds the binaries whose symbol tables are cached, 256
	// by default. Cached processes do not keep evicted binaries in
	// memory: a process that needs one again reads it again.
	MaxBinaries int
	// MaxBinaryBytes bounds the memory of the cached symbol tables, 32 MiB
	// by default: the least recently used are evicted beyond it (the last
	// one loaded stays, however large).
	MaxBinaryBytes int64
	// MaxProcesses bounds the processes whose address maps are cached,
	// 8192 by default.
	MaxProcesses int
	// Logger receives debug messages about the maps and binaries that
	// could not be read; nil discards them.
	Logger *slog.Logger
	// DebugDir holds separate debug files by build id,
	// DebugDir/.build-id/ab/cdef….debug, as distributions' -dbg and
	// -dbgsym packages install them; "/usr/lib/debug" by default. A
	// binary without a .symtab takes its symbols from there, as perf does.
	DebugDir string
	// KernelCacheDir, when set, is where the kernel's symbols are cached
	// between runs of the agent (see KernelCache). The Symbolizer itself
	// does not use it: it is for whoever loads the Kernel it is given.
	KernelCacheDir string
	// SymbolCacheDir, when set, keeps the symbol tables of binaries with a
	// build id on disk, in SymbolCacheDir/symbols (symcache.go): a binary
	// the memory bound evicted is read back from its file, not parsed
	// again. SymbolCacheMaxBytes bounds the files (0: 256 MiB), the least
	// recently used removed first.
	SymbolCacheDir      string
	SymbolCacheMaxBytes int64
	// PythonCodeBytes bounds the memory of the cached Python code objects
	// (names and location tables; see Python), pysymbol.DefaultMaxBytes
	// by default.
	PythonCodeBytes int64
	// Interpreters says which binaries hold a CPython and its layout,
	// each binary read once: the recorder gives the symbolizer the cache
	// the sampler sets its Python processes up from (nil: one of its
	// own, of MaxBinaries binaries).
	Interpreters Interpreters
}

// Interpreters finds the CPython interpreter in a binary, reading each
// binary once (pyinterp.Cache): Lookup returns the interpreter in the
// file id, read from path the first time; fresh reports whether this
// call read it.
type Interpreters interface {
	Lookup(id pyinterp.FileID, path string) (in *pyinterp.Interpreter, fresh bool, err error)
}

// DefaultSymbolCacheMaxBytes bounds the symbol table files on disk
// without Options.SymbolCacheMaxBytes.
const DefaultSymbolCacheMaxBytes = 256 << 20

// Symbolizer turns the raw addresses of samples into frames. It is safe for
// concurrent use.
type Symbolizer struct {
	kernel *Kernel
	opts   Options

	// mu guards the caches. A process's own state is guarded by its mu,
	// and a binary is loaded outside mu (see binEntry).
	mu    sync.Mutex
	procs *lru[uint32, *process]
	bins  *lru[binKey, *binEntry]
	// binBytes is the sum of the bytes of the cached binaries.
	binBytes int64
	// paths holds one copy of each mapped path.
	paths interner
	// ids maps the identity of files already read to their binary's key.
	ids *lru[fileID, binKey]
	// files names the files whose mappings were read from /proc, by the
	// device, inode and change time a snapshot gives, for SetMaps.
	files *lru[fileKey, knownFile]
	// symbolFiles is the disk cache of symbol tables (no Path: none).
	symbolFiles diskcache.Dir
	// python names Python frames; interpreters says which binaries hold
	// a CPython and its layout (python.go).
	python       *pysymbol.Resolver
	interpreters Interpreters

	stats struct {
		binaryHits, binaryMisses, binaryErrors atomic.Uint64
		binaryDiskHits                         atomic.Uint64
		mapsReads, mapsErrors                  atomic.Uint64
		snapshots, snapshotUnknownFiles        atomic.Uint64
		framesResolved, framesUnknown          atomic.Uint64
		stackHits                              atomic.Uint64
		pythonFrames, pythonUnknown            atomic.Uint64
		pythonMisplaced                        atomic.Uint64
		pythonBinaries                         atomic.Uint64
		// symbolsCPU times the binaries' symbols loaded (from their
		// files or the disk cache), processesCPU the processes'
		// mappings read (Stats).
		symbolsCPU, processesCPU workclock.Clock
	}
	// stacks caches recently symbolized stacks; versions numbers the
	// processes' mappings for its keys (process.version).
	stacks stackCache
	// frames caches recently named user frames, for the stacks that
	// stacks does not hold (frameCache).
	frames   frameCache
	versions atomic.Uint64
}

// New returns a Symbolizer that resolves kernel addresses with kernel,
// which may be nil: kernel frames are then all unknown.
func New(kernel *Kernel, opts Options) *Symbolizer {
	if opts.ProcRoot == "" {
		opts.ProcRoot = "/proc"
	}
	if opts.PerfMapDir == "" {
		opts.PerfMapDir = "/tmp"
	}
	if opts.DebugDir == "" {
		opts.DebugDir = "/usr/lib/debug"
	}
	if opts.MaxBinaries <= 0 {
		opts.MaxBinaries = 256
	}
	if opts.MaxBinaryBytes <= 0 {
		opts.MaxBinaryBytes = 32 << 20
	}
	if opts.MaxProcesses <= 0 {
		opts.MaxProcesses = 8192
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Symbolizer{
		kernel: kernel,
		opts:   opts,
		procs:  newLRU[uint32, *process](opts.MaxProcesses),
		bins:   newLRU[binKey, *binEntry](opts.MaxBinaries),
		ids:    newLRU[fileID, binKey](4 * opts.MaxBinaries),
		files:  newLRU[fileKey, knownFile](4 * opts.MaxBinaries),

		python:       pysymbol.New(opts.PythonCodeBytes),
		interpreters: opts.Interpreters,
	}
	if s.interpreters == nil {
		s.interpreters = pyinterp.NewCache(opts.MaxBinaries)
	}
	s.bins.evicted = func(_ binKey, e *binEntry) { s.evict(e) }
	if opts.SymbolCacheDir != "" {
		s.symbolFiles = diskcache.Dir{Path: filepath.Join(opts.SymbolCacheDir, "symbols"), Ext: ".symbols",
			MaxBytes: cmp.Or(opts.SymbolCacheMaxBytes, DefaultSymbolCacheMaxBytes), What: "symbol cache", Log: opts.Logger}
	}
	return s
}

// Observe records the address space of a process the first time it is
// seen: it reads /proc/PID/maps and keeps the identity of the executable
// mappings (path, device, inode, offset), so that the process can be
// symbolized even after it exits. The symbol tables are loaded later, the
// first time an address falls in a mapping. For a process already known
// it is a map lookup. comm is the process's command name in the sample at
// hand, noted as Has notes it, so that an exec is seen from the process's
// first sample on.
//
// It reports whether any executable mapping of the process is known:
// false for a kernel thread, and for a process that exited (or whose mm
// was released) before its maps were read, whose user frames will stay
// unknown.
func (s *Symbolizer) Observe(pid uint32, comm string) bool {
	p := s.process(pid)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.noteComm(comm)
	return len(p.maps) > 0
}

// process returns the state of pid, reading it on first sight.
func (s *Symbolizer) process(pid uint32) *process {
	now := time.Now().UnixNano()
	s.mu.Lock()
	if p, ok := s.procs.get(pid); ok {
		p.usedAt = now
		s.mu.Unlock()
		return p
	}
	p := &process{pid: pid, usedAt: now}
	p.mu.Lock() // held while reading, so that concurrent users wait for it
	s.procs.add(pid, p)
	s.mu.Unlock()
	s.readMaps(p)
	p.mu.Unlock()
	return p
}

// Symbolize returns the frames of one sample, leaf first: the kernel
// addresses (leaf first) then the user ones (leaf first), as
// bpf_get_stack returns them. Every address but the first of each stack is
// a return address, which may already belong to the next function: those
// are looked up one byte lower, and reported as they are. A pid not yet
// observed is observed now. Every address yields a frame.
//
// The frames of a stack seen recently in the same process image come from
// a cache (stackCache) and are shared between the samples that return
// them: callers may keep them but must not modify them.
func (s *Symbolizer) Symbolize(pid uint32, kernel, user []uint64) []sample.Frame {
	frames, _ := s.SymbolizeShared(pid, kernel, user)
	return frames
}

// SymbolizeShared is Symbolize, and also reports whether the frames are
// shared: whether the stack cache keeps them, so that the next samples of
// the same stack get the same slice. Stacks with a JIT frame (perf maps
// change as runtimes compile) or an unresolved one are not cached: each
// call returns a new slice for them.
func (s *Symbolizer) SymbolizeShared(pid uint32, kernel, user []uint64) (frames []sample.Frame, shared bool) {
	// Kernel-only stacks are the same in every process.
	var p *process
	var keyPID uint32
	var version uint64
	if len(user) > 0 {
		p = s.process(pid)
		p.mu.Lock()
		defer p.mu.Unlock()
		keyPID, version = pid, p.version
	}
	hash := stackHash(keyPID, version, kernel, user)
	if frames := s.stacks.get(hash, keyPID, version, kernel, user); frames != nil {
		s.stats.stackHits.Add(1)
		s.stats.framesResolved.Add(uint64(len(frames)))
		return frames, true
	}
	frames = make([]sample.Frame, 0, len(kernel)+len(user))
	var resolved, unknown uint64
	cacheable := true
	count := func(f sample.Frame, ok bool) {
		frames = append(frames, f)
		if ok {
			resolved++
		} else {
			unknown++
		}
		cacheable = cacheable && ok && f.Kind != sample.KindJIT
	}
	for i, addr := range kernel {
		count(s.kernel.resolve(addr, lookupAddr(i, addr)))
	}
	for i, addr := range user {
		count(s.resolveUser(p, addr, lookupAddr(i, addr)))
	}
	s.stats.framesResolved.Add(resolved)
	s.stats.framesUnknown.Add(unknown)
	if cacheable && len(frames) > 0 {
		s.stacks.put(hash, keyPID, version, kernel, user, frames)
		return frames, true
	}
	return frames, false
}

// lookupAddr returns the address to look up for the i-th frame of a
// stack: the return addresses of callers point after their call
// instruction, possibly past the end of the function.
func lookupAddr(i int, addr uint64) uint64 {
	if i == 0 || addr == 0 {
		return addr
	}
	return addr - 1
}

// Forget drops what is cached about a process, typically once it has
// exited. The binaries it mapped stay cached for other processes.
func (s *Symbolizer) Forget(pid uint32) {
	s.mu.Lock()
	p, ok := s.procs.peek(pid)
	s.procs.remove(pid)
	s.mu.Unlock()
	if ok {
		s.forgetPython([]*process{p})
	}
}

// ForgetExited forgets the processes that have not been symbolized for
// idle and no longer exist (no ProcRoot/PID), and returns how many. Under
// process churn most cached processes have exited: the process cache then
// holds the processes of the last idle or so rather than the last
// MaxProcesses. It stats each process idle that long, and those found
// alive are not checked again for another idle. Call it from the goroutine
// that symbolizes, so that an exited process's samples still to be read
// are not left without its mappings.
func (s *Symbolizer) ForgetExited(idle time.Duration) int {
	now := time.Now().UnixNano()
	cutoff := now - idle.Nanoseconds()
	var idlers []*process
	gone := make(map[*process]bool)
	s.mu.Lock()
	s.procs.each(func(_ uint32, p *process) {
		if p.usedAt <= cutoff {
			idlers = append(idlers, p)
			gone[p] = p.exited // an exit snapshot said so: no stat
		}
	})
	s.mu.Unlock()
	for _, p := range idlers {
		if gone[p] {
			continue
		}
		var st syscall.Stat_t
		err := rawsys.Stat(filepath.Join(s.opts.ProcRoot, strconv.FormatUint(uint64(p.pid), 10)), &st)
		if errors.Is(err, syscall.ENOENT) {
			gone[p] = true
		}
	}
	var dropped []*process
	s.mu.Lock()
	for _, p := range idlers {
		if p.usedAt > cutoff {
			continue // used since
		}
		if gone[p] {
			if q, ok := s.procs.peek(p.pid); ok && q == p {
				s.procs.remove(p.pid)
				dropped = append(dropped, p)
			}
		} else {
			p.usedAt = now
		}
	}
	s.mu.Unlock()
	s.forgetPython(dropped)
	return len(dropped)
}

// Stats are a Symbolizer's counters since New, and its cache sizes now.
type Stats struct {
	// BinaryHits counts mapped files found in the binary cache.
	BinaryHits uint64
	// BinaryMisses counts binaries loaded into the cache, BinaryDiskHits
	// those of them read from the disk cache (Options.SymbolCacheDir)
	// rather than from their ELF files.
	BinaryMisses, BinaryDiskHits uint64
	// BinaryErrors counts mapped files that could not be opened or read as
	// ELF; their frames are named "[file+0xoffset]".
	BinaryErrors uint64
	// MapsReads counts reads of /proc/PID/maps: first sights and re-reads
	// for addresses outside every mapping.
	MapsReads uint64
	// MapsErrors counts the reads that failed, mostly because the process
	// had exited.
	MapsErrors uint64
	// Snapshots counts processes whose mappings came from a snapshot
	// (SetMaps) rather than from /proc, and SnapshotUnknownFiles the
	// mapped files of those that no /proc read had named, whose frames
	// stay unknown.
	Snapshots, SnapshotUnknownFiles uint64
	// FramesResolved counts frames given a function name.
	FramesResolved uint64
	// FramesUnknown counts frames named "[module+0xoffset]".
	FramesUnknown uint64
	// StackCacheHits counts stacks symbolized from the stack cache.
	StackCacheHits uint64
	// PythonFrames counts the Python frames put in samples (Python),
	// PythonUnknown those of them whose code object could not be read
	// (named "[python+0xADDRESS]"), and PythonMisplaced the samples whose
	// native stack and Python chain disagreed on the calls of the
	// evaluation loop (no frame dropped; see Python).
	PythonFrames, PythonUnknown, PythonMisplaced uint64
	// PythonCode are the code object cache's counters and size.
	PythonCode pysymbol.Stats
	// PythonBinaries counts the binaries the symbolizer read to find
	// their CPython interpreter (Options.Interpreters): none that the
	// sampler, sharing its cache, read first.
	PythonBinaries uint64
	// Binaries is the number of binaries cached.
	Binaries int
	// BinaryBytes is about the memory their symbol tables take.
	BinaryBytes int64
	// Processes is the number of processes cached.
	Processes int
	// SymbolsCPU is the agent's CPU time spent loading binaries' symbols
	// (from their ELF files or the disk cache), ProcessesCPU reading
	// processes' mappings. Neither falls with the sampling rate.
	SymbolsCPU, ProcessesCPU time.Duration
}

// Stats returns the counters and cache sizes.
func (s *Symbolizer) Stats() Stats {
	s.mu.Lock()
	binaries, binBytes, processes := s.bins.len(), s.binBytes, s.procs.len()
	s.mu.Unlock()
	return Stats{
		BinaryHits:           s.stats.binaryHits.Load(),
		BinaryMisses:         s.stats.binaryMisses.Load(),
		BinaryDiskHits:       s.stats.binaryDiskHits.Load(),
		BinaryErrors:         s.stats.binaryErrors.Load(),
		MapsReads:            s.stats.mapsReads.Load(),
		MapsErrors:           s.stats.mapsErrors.Load(),
		Snapshots:            s.stats.snapshots.Load(),
		SnapshotUnknownFiles: s.stats.snapshotUnknownFiles.Load(),
		FramesResolved:       s.stats.framesResolved.Load(),
		FramesUnknown:        s.stats.framesUnknown.Load(),
		StackCacheHits:       s.stats.stackHits.Load(),
		PythonFrames:         s.stats.pythonFrames.Load(),
		PythonUnknown:        s.stats.pythonUnknown.Load(),
		PythonMisplaced:      s.stats.pythonMisplaced.Load(),
		PythonCode:           s.python.Stats(),
		PythonBinaries:       s.stats.pythonBinaries.Load(),
		Binaries:             binaries,
		BinaryBytes:          binBytes,
		Processes:            processes,
		SymbolsCPU:           s.stats.symbolsCPU.Total(),
		ProcessesCPU:         s.stats.processesCPU.Total(),
	}
}
