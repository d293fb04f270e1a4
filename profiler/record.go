package profiler

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// MaxFrames is the most frames the BPF program records per stack (kernel
// and user each).
const MaxFrames = 127

// recordHeaderSize is the size of struct hs_sample up to its frames array in
// bpf/profile.bpf.c. A test checks it against the generated Go type.
const recordHeaderSize = 64

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
	if nk > MaxFrames || nu > MaxFrames {
		return fmt.Errorf("decode record: %d kernel and %d user frames, more than %d", nk, nu, MaxFrames)
	}
	if want := recordHeaderSize + 8*(nk+nu); len(b) < want {
		return fmt.Errorf("decode record: %d bytes, want %d for %d kernel and %d user frames", len(b), want, nk, nu)
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
	frames := b[recordHeaderSize:]
	r.Kernel = decodeFrames(r.Kernel[:0], frames[:8*nk])
	r.User = decodeFrames(r.User[:0], frames[8*nk:8*(nk+nu)])
	return nil
}

func decodeFrames(dst []uint64, b []byte) []uint64 {
	for i := 0; i+8 <= len(b); i += 8 {
		dst = append(dst, binary.LittleEndian.Uint64(b[i:]))
	}
	return dst
}
