package profiler

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/heatscope/heatscope/bpf"
)

// batchAttr is union bpf_attr's part for the BPF_MAP_*_BATCH commands.
type batchAttr struct {
	inBatch, outBatch, keys, values uint64
	count, mapFD                    uint32
	elemFlags, flags                uint64
}

// errBatchDone is lookupAndDeleteBatch's answer when the map's last
// bucket was read: the entries it returned with it are the last.
var errBatchDone = errors.New("every bucket read")

// batchCursor is where a batch read of a hash map goes on from: the
// bucket to read next (in), and the one the kernel says follows the
// batch it read (out). It must be on the heap (a field of the unwinder):
// the kernel is given its address inside the system call's argument, which
// the stack could move from under it.
type batchCursor struct{ in, out uint32 }

// lookupAndDeleteBatch takes up to len(keys) entries out of m, a hash map
// of uint32 keys and uint64 values, from the bucket c names (start: from
// the first), and moves c on, as ebpf.Map.BatchLookupAndDelete does, but
// as a raw system call. It returns how many it took, with errBatchDone
// once the last bucket was read; on another error, the entries it took
// before it are still the first n.
//
// Why: the ring reader empties unwind_pending before each drain of the
// sample ring, and under process churn nearly every drain has requests in
// it. An ordinary system call woke the Go runtime's sysmon thread (see
// fdWaiter), which then polled every 20 µs for the rest of the drain and
// the unwinder's work after it: 14% of the agent's CPU in churn case b
// (perf on the agent, 99 Hz). This call reads and deletes entries of a
// map in kernel memory, and never blocks.
func lookupAndDeleteBatch(m *ebpf.Map, c *batchCursor, start bool, keys []uint32, vals []uint64) (int, error) {
	if m.KeySize() != 4 || m.ValueSize() != 8 || len(keys) != len(vals) || len(keys) == 0 {
		return 0, fmt.Errorf("batch read of %v: want keys of 4 and values of 8 bytes, in buffers of the same length, not empty: have %d and %d bytes, %d and %d entries",
			m, m.KeySize(), m.ValueSize(), len(keys), len(vals))
	}
	attr := batchAttr{
		outBatch: uint64(uintptr(unsafe.Pointer(&c.out))),
		keys:     uint64(uintptr(unsafe.Pointer(&keys[0]))),
		values:   uint64(uintptr(unsafe.Pointer(&vals[0]))),
		count:    uint32(len(keys)),
		mapFD:    uint32(m.FD()),
	}
	if !start {
		attr.inBatch = uint64(uintptr(unsafe.Pointer(&c.in)))
	}
	_, _, errno := unix.RawSyscall(unix.SYS_BPF, unix.BPF_MAP_LOOKUP_AND_DELETE_BATCH, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	runtime.KeepAlive(c)
	runtime.KeepAlive(keys)
	runtime.KeepAlive(vals)
	c.in = c.out
	n := min(int(attr.count), len(keys))
	switch errno {
	case 0:
		return n, nil
	case unix.ENOENT:
		return n, errBatchDone
	}
	return n, fmt.Errorf("batch lookup and delete on %v: %w", m, errno)
}

// elemAttr is union bpf_attr's part for BPF_MAP_UPDATE_ELEM and
// BPF_MAP_DELETE_ELEM.
type elemAttr struct {
	mapFD             uint32
	_                 uint32
	key, value, flags uint64
}

// procsWriter writes and deletes unwind_procs entries with raw system
// calls, for the reason lookupAndDeleteBatch gives: under churn the
// unwinder writes an entry for each process it sets up and deletes those
// that exited, most polls. It writes the entry's memory as it is, so it
// is used only where the Go type's layout is the map's value, with no
// padding of the compiler's own (what cilium/ebpf checks before it does
// the same); elsewhere it calls the map's own methods.
type procsWriter struct {
	m   *ebpf.Map
	raw bool
	// key is the pid of the call, on the heap with the writer: the
	// kernel is given its address inside the call's argument.
	key uint32
}

func newProcsWriter(m *ebpf.Map) *procsWriter {
	size := int(unsafe.Sizeof(bpf.ProfileHsProc{}))
	return &procsWriter{m: m, raw: m.KeySize() == 4 && int(m.ValueSize()) == size && binary.Size(bpf.ProfileHsProc{}) == size}
}

// put writes pid's entry.
func (w *procsWriter) put(pid uint32, entry *bpf.ProfileHsProc) error {
	if !w.raw {
		return w.m.Put(pid, entry)
	}
	w.key = pid
	attr := elemAttr{mapFD: uint32(w.m.FD()), key: uint64(uintptr(unsafe.Pointer(&w.key))), value: uint64(uintptr(unsafe.Pointer(entry))), flags: unix.BPF_ANY}
	_, _, errno := unix.RawSyscall(unix.SYS_BPF, unix.BPF_MAP_UPDATE_ELEM, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	runtime.KeepAlive(w)
	runtime.KeepAlive(entry)
	if errno != 0 {
		return fmt.Errorf("update %v: %w", w.m, errno)
	}
	return nil
}

// delete deletes pid's entry; an entry not there is no error.
func (w *procsWriter) delete(pid uint32) error {
	if !w.raw {
		if err := w.m.Delete(pid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
		return nil
	}
	w.key = pid
	attr := elemAttr{mapFD: uint32(w.m.FD()), key: uint64(uintptr(unsafe.Pointer(&w.key)))}
	_, _, errno := unix.RawSyscall(unix.SYS_BPF, unix.BPF_MAP_DELETE_ELEM, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	runtime.KeepAlive(w)
	if errno != 0 && errno != unix.ENOENT {
		return fmt.Errorf("delete from %v: %w", w.m, errno)
	}
	return nil
}
