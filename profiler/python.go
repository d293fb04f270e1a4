package profiler

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"

	"github.com/cilium/ebpf"

	"github.com/heatscope/heatscope/bpf"
	"github.com/heatscope/heatscope/pyinterp"
	"github.com/heatscope/heatscope/symbolize"
)

// maxPyLayouts is MAX_PY_LAYOUTS, pyFrameRead PY_FRAME_READ and
// pyThreadRead PY_THREAD_READ in bpf/profile.bpf.c: the layouts the BPF
// program holds, and the bytes of an interpreter frame and of a thread
// state it reads at once.
const (
	maxPyLayouts = 8
	pyFrameRead  = 80
	pyThreadRead = 176
)

// Interpreters finds the CPython interpreter in a binary, reading each
// binary once (pyinterp.Cache, shared with the symbolizer): Lookup
// returns the interpreter in the file id, read from path the first time;
// fresh reports whether this call read it.
type Interpreters interface {
	Lookup(id pyinterp.FileID, path string) (in *pyinterp.Interpreter, fresh bool, err error)
}

// pythonFinder finds the CPython interpreter a process maps, for its
// unwind_procs entry (hs_proc.py_runtime and py_layout), and writes the
// layouts the entries name to py_layouts. Each binary is read once
// (Interpreters); only files whose name says python are read at all.
type pythonFinder struct {
	layouts *ebpf.Map
	cache   Interpreters
	log     *slog.Logger
	// identify names a mapped file (mapped as id) by a stat of it:
	// the unwinder's, whose stats the tables share.
	identify func(path string, id mappedID) (fileKey, bool)

	mu sync.Mutex
	// index holds each layout written to py_layouts, by value.
	index map[pyinterp.Layout]uint32
	stats PythonStats
}

// PythonStats counts what the agent found of Python processes.
type PythonStats struct {
	// Binaries is how many files the finder read (cached after, and
	// not counted when the symbolizer read them first), and
	// Interpreters how many of them were CPython with a known layout;
	// Unsupported those that were CPython it cannot read (warned about
	// once each).
	Binaries, Interpreters, Unsupported uint64
	// Processes counts the process entries written with an interpreter.
	Processes uint64
}

// pyCacheSize bounds the binaries whose answer the finder remembers when
// it has a cache of its own.
const pyCacheSize = 1024

// newPythonFinder returns a finder reading binaries through cache (nil: a
// cache of its own) and identifying them with a stat of their path.
func newPythonFinder(layouts *ebpf.Map, cache Interpreters, log *slog.Logger) *pythonFinder {
	if cache == nil {
		cache = pyinterp.NewCache(pyCacheSize)
	}
	return &pythonFinder{layouts: layouts, cache: cache, log: log, identify: statFileKey, index: map[pyinterp.Layout]uint32{}}
}

// find returns the address of _PyRuntime in the process whose mappings
// are maps (read through root, /proc/PID) and the index of its layout in
// py_layouts, or ok false when it maps no interpreter the sampler can
// read; then waiting reports whether it maps a launcher of libpython
// (pyinterp.ErrLauncher) and no libpython yet: read in its dynamic
// loader, the process maps its interpreter soon.
func (f *pythonFinder) find(root string, maps []symbolize.ExecMapping) (runtime uint64, layout uint32, ok, waiting bool) {
	launcher, lib := false, false
	for _, m := range maps {
		if m.Deleted || len(m.Path) == 0 || m.Path[0] != '/' || !pyinterp.MayBeInterpreter(m.Path) {
			continue
		}
		if strings.HasPrefix(filepath.Base(m.Path), "libpython") {
			lib = true
		}
		path := root + "/root" + m.Path
		fk, found := f.identify(path, mappedID{m.Dev, m.Inode})
		if !found {
			// The process has exited (its mappings came from its exit
			// snapshot): nothing is known of the binary, which the cache
			// did not remember; the next process mapping it reads it.
			continue
		}
		in, fresh, err := f.cache.Lookup(pyinterp.FileID{Dev: fk.dev, Inode: fk.ino, Size: fk.size, MtimeNs: fk.mtimeNs}, path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // gone between the stat and the read
		}
		if fresh {
			f.count(func(s *PythonStats) { s.Binaries++ })
		}
		if errors.Is(err, pyinterp.ErrLauncher) {
			launcher = true
		}
		if err != nil {
			if fresh && !errors.Is(err, pyinterp.ErrNotInterpreter) {
				// Once per binary: its processes keep native frames.
				f.count(func(s *PythonStats) { s.Unsupported++ })
				f.log.Warn("python frames: an interpreter the sampler cannot read; its processes show native frames only", "binary", m.Path, "err", err)
			}
			continue
		}
		idx, err := f.layoutIndex(in.Layout)
		if err != nil {
			if fresh {
				f.count(func(s *PythonStats) { s.Unsupported++ })
				f.log.Warn("python frames: an interpreter the sampler cannot read; its processes show native frames only", "binary", m.Path, "version", in.Version, "err", err)
			}
			continue
		}
		if fresh {
			f.count(func(s *PythonStats) { s.Interpreters++ })
			if len(in.Mismatches) > 0 {
				f.log.Warn("python frames: _Py_DebugOffsets differs from heatscope's table; the published offsets are used", "binary", m.Path, "version", in.Version, "fields", in.Mismatches)
			}
		}
		rt, found := in.RuntimeAddr(m.Start, m.Offset)
		if !found {
			continue
		}
		f.count(func(s *PythonStats) { s.Processes++ })
		return rt, idx, true, false
	}
	return 0, 0, false, launcher && !lib
}

func (f *pythonFinder) count(add func(*PythonStats)) {
	f.mu.Lock()
	add(&f.stats)
	f.mu.Unlock()
}

// Stats returns the finder's counts (none without a finder).
func (f *pythonFinder) Stats() PythonStats {
	if f == nil {
		return PythonStats{}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}

// layoutIndex returns the py_layouts index of a layout, writing it there
// the first time.
func (f *pythonFinder) layoutIndex(l pyinterp.Layout) (uint32, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if idx, ok := f.index[l]; ok {
		return idx, nil
	}
	if len(f.index) >= maxPyLayouts {
		return 0, fmt.Errorf("the sampler holds %d Python layouts, all taken", maxPyLayouts)
	}
	v, err := bpfLayout(l)
	if err != nil {
		return 0, err
	}
	idx := uint32(len(f.index))
	if err := f.layouts.Put(idx, &v); err != nil {
		return 0, fmt.Errorf("write python layout %d: %w", idx, err)
	}
	f.index[l] = idx
	return idx, nil
}

// bpfLayout converts a layout to the BPF program's, refusing one whose
// frame or thread state fields lie beyond the bytes it reads of them.
func bpfLayout(l pyinterp.Layout) (bpf.ProfileHsPyLayout, error) {
	for _, fd := range []struct {
		name string
		off  uint32
	}{{"thread state native_thread_id", l.ThreadNativeID}, {"thread state frame", l.ThreadFrame}} {
		if fd.off+8 > pyThreadRead {
			return bpf.ProfileHsPyLayout{}, fmt.Errorf("%s at byte %d, beyond the %d bytes the sampler reads of a thread state", fd.name, fd.off, pyThreadRead)
		}
	}
	for _, fd := range []struct {
		name      string
		off, size uint32
	}{
		{"frame code", l.FrameCode, 8}, {"frame previous", l.FramePrevious, 8},
		{"frame instruction", l.FrameInstr, 8}, {"frame owner", l.FrameOwner, 1},
		{"frame is_entry", l.FrameIsEntry, 1},
	} {
		if fd.off == pyinterp.NoOffset && fd.name == "frame is_entry" {
			continue
		}
		if fd.off+fd.size > pyFrameRead {
			return bpf.ProfileHsPyLayout{}, fmt.Errorf("%s at byte %d, beyond the %d bytes the sampler reads of a frame", fd.name, fd.off, pyFrameRead)
		}
	}
	return bpf.ProfileHsPyLayout{
		RuntimeInterpretersHead: l.RuntimeInterpretersHead,
		InterpNext:              l.InterpNext,
		InterpThreadsHead:       l.InterpThreadsHead,
		ThreadNext:              l.ThreadNext,
		ThreadNativeId:          l.ThreadNativeID,
		ThreadFrame:             l.ThreadFrame,
		CframeCurrentFrame:      l.CFrameCurrentFrame,
		FrameCode:               l.FrameCode,
		FramePrevious:           l.FramePrevious,
		FrameInstr:              l.FrameInstr,
		FrameOwner:              l.FrameOwner,
		FrameIsEntry:            l.FrameIsEntry,
		CodeAdaptive:            l.CodeAdaptive,
		OwnerGenerator:          l.OwnerGenerator,
		OwnerCstack:             l.OwnerCStack,
	}, nil
}
