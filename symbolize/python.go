package symbolize

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"path/filepath"
	"syscall"
	"time"

	"github.com/heatscope/heatscope/pyinterp"
	"github.com/heatscope/heatscope/pysymbol"
	"github.com/heatscope/heatscope/sample"
)

// Python frames. The sampler reads, beside the native stack, the chain of
// CPython interpreter frames of the sampled thread (pyinterp.Frame, leaf
// first): each frame's code object and instruction offset, and whether it
// is the first frame a call of the evaluation loop,
// _PyEval_EvalFrameDefault, ran (the entry frame: every frame above it, up
// to the previous entry frame, ran in the same C call). Python names each
// frame (package pysymbol reads the code objects from the process's
// memory) and puts the Python frames of each call of the loop in the
// place of that call's native frame, so that a C extension called from
// Python shows its native frames above its Python caller, and Python
// called back from C its Python frames above the C code that called it.

// evalLoop is the native function whose frames the Python frames replace:
// CPython's evaluation loop, in python3.X or libpython3.X.so.
const evalLoop = "_PyEval_EvalFrameDefault"

// pythonModule is the module of Python frames whose code object could not
// be read: they are named "[python+0xADDRESS]" by its address.
const pythonModule = "python"

// pythonState is what the symbolizer knows of a process's interpreter,
// found at its first sample with Python frames.
type pythonState struct {
	// proc is how pysymbol reads it; err, when set, why it cannot be.
	proc pysymbol.Process
	err  error
	// version is the version of the process's mappings (process.version)
	// it was last checked against; proc.Image hashes the mappings it
	// was found with (mapsImage).
	version uint64
	// noneMapped is set when err says that no mapping held an
	// interpreter (none failed to be read).
	noneMapped bool
}

// pythonMapsRefresh bounds how often the mappings of a process with
// Python frames are read again while they show no interpreter.
const pythonMapsRefresh = 10 * time.Millisecond

// Python returns stack (kernel frames, then user frames, leaf first, as
// Symbolize returns them; kernel is how many are kernel frames) with the
// Python frames py (leaf first) put in place of the evaluation loop's
// frames: the frames of the innermost call of the loop in place of its
// innermost frame, and so on outwards. Kernel frames stay on top.
//
// When the stacks disagree, no frame is lost: Python frames of more calls
// than the native stack shows (a native stack cut short) go below its
// last frame, in order, and native loop frames left over (a Python chain
// cut at the sampler's depth) stay as they are; either way the sample is
// counted in Stats.PythonMisplaced. A frame whose code object cannot be
// read is named by its address ("[python+0x7f…]") and counted in
// Stats.PythonUnknown.
//
// stack is not modified (it may be shared with other samples); the stack
// returned is new.
func (s *Symbolizer) Python(pid uint32, stack []sample.Frame, kernel int, py []pyinterp.Frame) []sample.Frame {
	if len(py) == 0 {
		return stack
	}
	p := s.process(pid)
	p.mu.Lock()
	for reread := false; ; reread = true {
		if p.py == nil || p.py.version != p.version {
			// First sight, or its mappings were read again. When
			// they changed (an exec, a dlopen) the interpreter is
			// found again and its code objects are read again under
			// the new image. A process that exited since (its
			// mappings from an exit snapshot) keeps what was found.
			if p.py == nil || p.py.err != nil || mapsImage(p.maps) != p.py.proc.Image {
				if st := s.findPython(p); st.err == nil || p.py == nil {
					p.py = st
				}
			}
			if p.py.version != p.version {
				kept := *p.py // readers may hold the old one
				kept.version = p.version
				p.py = &kept
			}
		}
		// The sampler found an interpreter its mappings, as read,
		// do not show: read in its dynamic loader, before a
		// shared-library build mapped libpython. They are read again
		// now, not a mapsRefreshInterval later (its frames named
		// "[python+0x…]" meanwhile); at most every pythonMapsRefresh.
		if reread || !p.py.noneMapped || p.procRead.IsZero() || time.Since(p.readAt) < pythonMapsRefresh {
			break
		}
		s.readMaps(p)
	}
	st := p.py
	p.mu.Unlock()
	frames := make([]pyFrame, len(py))
	named := 0
	for i, f := range py {
		frames[i] = s.pythonFrame(st, f)
		if !frames[i].incomplete {
			named++
		}
	}
	out, placed := interleave(stack, kernel, frames)
	s.stats.pythonFrames.Add(uint64(named))
	if !placed {
		s.stats.pythonMisplaced.Add(1)
	}
	return out
}

// pyFrame is one Python frame of a sample: named, unless incomplete
// (being set up: CPython's tracebacks leave it out), and whether it is
// the first its evaluation-loop call ran (pyinterp.Frame.Entry).
type pyFrame struct {
	frame             sample.Frame
	entry, incomplete bool
}

// pythonFrame names one Python frame, or tells it is incomplete: one the
// sampler says may be, whose instruction is before its code's first
// traceable one. A frame whose code object cannot be read is named by
// its address, and shown.
func (s *Symbolizer) pythonFrame(st *pythonState, f pyinterp.Frame) pyFrame {
	if st.err == nil {
		c, err := s.python.Code(st.proc, f.Code)
		if err == nil {
			if f.MayBeIncomplete && c.Incomplete(f.Offset) {
				return pyFrame{entry: f.Entry, incomplete: true}
			}
			line, _ := c.Line(f.Offset)
			return pyFrame{frame: sample.Frame{Function: c.Qualname, Module: c.File, Kind: sample.KindPython,
				Line: uint32(line), StartLine: uint32(c.FirstLine)}, entry: f.Entry}
		}
		s.opts.Logger.Debug("symbolize: python code object", "pid", st.proc.PID, "err", err)
	}
	s.stats.pythonUnknown.Add(1)
	return pyFrame{frame: sample.Frame{Function: sample.UnknownName(pythonModule, f.Code), Module: "[" + pythonModule + "]",
		Kind: sample.KindPython}, entry: f.Entry}
}

// interleave puts the Python frames py (leaf first) in place of stack's
// evaluation-loop frames, and reports whether each call of the loop on
// one side met one on the other. Incomplete frames delimit their call's
// run but are not shown.
func interleave(stack []sample.Frame, kernel int, py []pyFrame) ([]sample.Frame, bool) {
	run := func(out []sample.Frame, from, to int) []sample.Frame {
		for i := from; i < to; i++ {
			if !py[i].incomplete {
				out = append(out, py[i].frame)
			}
		}
		return out
	}
	out := make([]sample.Frame, 0, len(stack)+len(py))
	kernel = min(kernel, len(stack))
	out = append(out, stack[:kernel]...)
	next := 0 // the first Python frame not placed yet
	placed := true
	for _, f := range stack[kernel:] {
		if f.Function != evalLoop {
			out = append(out, f)
			continue
		}
		if next == len(py) {
			placed = false // a loop call whose Python frames were not read
			out = append(out, f)
			continue
		}
		// This call's frames: up to and with its entry frame.
		end := next
		for end < len(py)-1 && !py[end].entry {
			end++
		}
		out = run(out, next, end+1)
		next = end + 1
	}
	if next < len(py) {
		placed = false // the native stack ended first
		out = run(out, next, len(py))
	}
	return out, placed
}

// findPython finds the interpreter process p runs, among its executable
// mappings of files whose name may be one (pyinterp.MayBeInterpreter),
// and its identity. p.mu must be held.
func (s *Symbolizer) findPython(p *process) *pythonState {
	start, err := pysymbol.StartTime(s.opts.ProcRoot, p.pid)
	if err != nil {
		return &pythonState{err: fmt.Errorf("python process %d: %w", p.pid, err), version: p.version}
	}
	var errs []error
	seen := map[string]bool{}
	for i := range p.maps {
		m := &p.maps[i].mapping
		if m.class() != classFile || seen[m.path] || !pyinterp.MayBeInterpreter(m.path) {
			continue
		}
		seen[m.path] = true
		in, err := s.interpreter(p.pid, m)
		if err == nil {
			return &pythonState{proc: pysymbol.Process{PID: p.pid, StartTime: start, Image: mapsImage(p.maps), Layout: &in.Layout}, version: p.version}
		}
		if !errors.Is(err, pyinterp.ErrNotInterpreter) {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		return &pythonState{err: fmt.Errorf("python process %d: no CPython interpreter among its mappings", p.pid), version: p.version, noneMapped: true}
	}
	return &pythonState{err: fmt.Errorf("python process %d: %w", p.pid, errors.Join(errs...)), version: p.version}
}

// mapsImage hashes a process's executable mappings (where each file is
// mapped): a new image after an exec (address space layout
// randomisation), or a library loaded, changes it; reading the same
// mappings again does not.
func mapsImage(maps []userMapping) uint64 {
	h := fnv.New64a()
	var b [32]byte
	for i := range maps {
		m := &maps[i]
		binary.LittleEndian.PutUint64(b[0:], m.start)
		binary.LittleEndian.PutUint64(b[8:], m.end)
		binary.LittleEndian.PutUint64(b[16:], m.offset)
		binary.LittleEndian.PutUint64(b[24:], m.inode)
		h.Write(b[:])
	}
	return h.Sum64()
}

// interpreter reads (or finds in the cache) the interpreter in the file
// mapped by m, logging once per binary why it is not one that can be read.
func (s *Symbolizer) interpreter(pid uint32, m *mapping) (*pyinterp.Interpreter, error) {
	var errs []error
	for _, mp := range s.mappedPaths(pid, m) {
		var st syscall.Stat_t
		if err := syscall.Stat(mp.path, &st); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := checkMapped(&st, mp.sameFile, m); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", mp.path, err))
			continue
		}
		id := pyinterp.FileID{Dev: st.Dev, Inode: st.Ino, Size: st.Size, MtimeNs: st.Mtim.Nano()}
		in, fresh, err := s.interpreters.Lookup(id, mp.path)
		if fresh {
			s.stats.pythonBinaries.Add(1)
		}
		if err != nil && fresh && !errors.Is(err, pyinterp.ErrNotInterpreter) {
			s.opts.Logger.Warn("python frames of this interpreter will not be named", "binary", filepath.Base(m.path), "err", err)
		}
		return in, err
	}
	return nil, fmt.Errorf("open %s of pid %d: %w", m.path, pid, errors.Join(errs...))
}

// forgetPython drops the cached code objects of processes the symbolizer
// forgot.
func (s *Symbolizer) forgetPython(procs []*process) {
	type identity struct {
		pid   uint32
		start uint64
	}
	gone := map[identity]bool{}
	for _, p := range procs {
		p.mu.Lock()
		if p.py != nil && p.py.err == nil {
			gone[identity{p.py.proc.PID, p.py.proc.StartTime}] = true
		}
		p.mu.Unlock()
	}
	if len(gone) > 0 {
		s.python.Forget(func(pid uint32, start uint64) bool { return gone[identity{pid, start}] })
	}
}
