package profiler

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/heatscope/heatscope/pyinterp"
)

// MaxFrames is the most frames the BPF program records per stack (kernel
// and user each).
const MaxFrames = 127

// MaxPythonFrames is the most Python frames the BPF program records per
// sample (MAX_PY_FRAMES).
const MaxPythonFrames = 96

// recordHeaderSize is the size of struct hs_sample up to its frames array in
// bpf/profile.bpf.c, and pyFrameSize that of struct hs_py_frame. A test
// checks them against the generated Go types.
const (
	recordHeaderSize = 72
	pyFrameSize      = 16
)

// PythonWalk says how the BPF program's walk of a sample's Python frames
// went (hs_sample.python_flags).
type PythonWalk uint16

// PythonWalk bits.
const (
	// PythonTruncated: the chain was longer than MaxPythonFrames (or
	// than the walk's bound): the outermost frames are left out.
	PythonTruncated PythonWalk = 1 << iota
	// PythonReadError: a read of the process's memory failed, or what it
	// read made no sense (a frame being changed, or freed, while read: a
	// frame its own caller, a pointer not 8-byte aligned, no code
	// object): the chain is cut there.
	PythonReadError
	// PythonNoThread: the process runs a Python interpreter, but the
	// thread has no thread state (a thread Python does not know, or one
	// past the walk's bound of thread states).
	PythonNoThread
	// PythonWalked: the process runs an interpreter the agent found,
	// and the sampled thread's frames were looked for.
	PythonWalked
)

// Has reports whether all of the bits of f are set.
func (w PythonWalk) Has(f PythonWalk) bool { return w&f == f }

// Record is one decoded ring-buffer record: a raw, unsymbolized sample.
type Record struct {
	// KernelTime is the sample's CLOCK_MONOTONIC time in nanoseconds.
	KernelTime uint64
	// CgroupID is the cgroup v2 id of the sampled task.
	CgroupID uint64
	// PID is the process id (tgid) and TID the thread id.
	PID, TID uint32
	// CPU is the CPU the sample was taken on.
	CPU uint32
	// Comm is the task's command name.
	Comm string
	// Kernel and User are the frames' addresses, leaf first.
	Kernel, User []uint64
	// UserDWARF has bit i set when User[i+1] was found with an unwind
	// table, clear when with frame pointers (UnwindDWARF only).
	UserDWARF [2]uint64
	// Python holds the thread's Python frames, innermost first, read
	// where the process runs a CPython the agent found (UnwindDWARF
	// only: the walk needs bpf_loop), and PythonWalk how their walk went.
	Python     []pyinterp.Frame
	PythonWalk PythonWalk
}

// UnwoundWithTable reports whether user frame i (i ≥ 1) was found with an
// unwind table.
func (r *Record) UnwoundWithTable(i int) bool {
	if i < 1 || i > 128 {
		return false
	}
	return r.UserDWARF[(i-1)/64]&(1<<((i-1)%64)) != 0
}

// Decode parses one record written by the BPF program into r, reusing r's
// frame slices. It never panics: a record that is short, or whose frame
// counts do not match its length, is an error.
func (r *Record) Decode(b []byte) error {
	if len(b) < recordHeaderSize {
		return fmt.Errorf("decode record: %d bytes, shorter than the %d-byte header", len(b), recordHeaderSize)
	}
	le := binary.LittleEndian
	nk := int(le.Uint16(b[28:30]))
	nu := int(le.Uint16(b[30:32]))
	np := int(le.Uint16(b[64:66]))
	if nk > MaxFrames || nu > MaxFrames {
		return fmt.Errorf("decode record: %d kernel and %d user frames, more than %d", nk, nu, MaxFrames)
	}
	if np > MaxPythonFrames {
		return fmt.Errorf("decode record: %d Python frames, more than %d", np, MaxPythonFrames)
	}
	if want := recordHeaderSize + 8*(nk+nu) + pyFrameSize*np; len(b) < want {
		return fmt.Errorf("decode record: %d bytes, want %d for %d kernel, %d user and %d Python frames", len(b), want, nk, nu, np)
	}
	r.KernelTime = le.Uint64(b[0:8])
	r.CgroupID = le.Uint64(b[8:16])
	r.PID = le.Uint32(b[16:20])
	r.TID = le.Uint32(b[20:24])
	r.CPU = le.Uint32(b[24:28])
	comm := b[32:48]
	if i := bytes.IndexByte(comm, 0); i >= 0 {
		comm = comm[:i]
	}
	if r.Comm != string(comm) { // avoids an allocation per sample
		r.Comm = string(comm)
	}
	r.UserDWARF[0] = le.Uint64(b[48:56])
	r.UserDWARF[1] = le.Uint64(b[56:64])
	r.PythonWalk = PythonWalk(le.Uint16(b[66:68]))
	frames := b[recordHeaderSize:]
	r.Kernel = decodeFrames(r.Kernel[:0], frames[:8*nk])
	r.User = decodeFrames(r.User[:0], frames[8*nk:8*(nk+nu)])
	r.Python = decodePython(r.Python[:0], frames[8*(nk+nu):8*(nk+nu)+pyFrameSize*np])
	return nil
}

// The flags of struct hs_py_frame.
const (
	pyFrameEntry           = 1
	pyFrameMayBeIncomplete = 2
)

func decodePython(dst []pyinterp.Frame, b []byte) []pyinterp.Frame {
	le := binary.LittleEndian
	for i := 0; i+pyFrameSize <= len(b); i += pyFrameSize {
		flags := le.Uint32(b[i+12:])
		dst = append(dst, pyinterp.Frame{
			Code:            le.Uint64(b[i:]),
			Offset:          le.Uint32(b[i+8:]),
			Entry:           flags&pyFrameEntry != 0,
			MayBeIncomplete: flags&pyFrameMayBeIncomplete != 0,
		})
	}
	return dst
}

func decodeFrames(dst []uint64, b []byte) []uint64 {
	for i := 0; i+8 <= len(b); i += 8 {
		dst = append(dst, binary.LittleEndian.Uint64(b[i:]))
	}
	return dst
}
