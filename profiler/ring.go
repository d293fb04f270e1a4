package profiler

import (
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ring consumes a BPF ring buffer straight from its memory mapping.
//
// Why not cilium/ebpf's ringbuf.Reader: every ReadInto starts with an
// epoll_wait syscall, and every syscall a goroutine makes wakes the Go
// runtime's sysmon thread, which then polls every 20 µs for a while. At 10
// polls a second that was a large share of the agent's CPU; reading the
// positions and records from shared memory needs no syscall at all.
//
// Layout (kernel/bpf/ringbuf.c): one writable page holding the consumer
// position, then a read-only page holding the producer position, followed
// by the data area mapped twice in a row, so a record that wraps around the
// end is still contiguous. Each record starts with an 8-byte header whose
// first word is its length plus a busy bit (still being written) and a
// discard bit; records are 8-byte aligned.
type ring struct {
	consumer []byte // one page: the consumer position
	producer []byte // one page + 2 × size: producer position, then data twice
	data     []byte
	mask     uint64
}

const (
	ringBusyBit    = 1 << 31
	ringDiscardBit = 1 << 30
	ringHeaderSize = 8
)

func openRing(fd, size int) (*ring, error) {
	page := os.Getpagesize()
	consumer, err := unix.Mmap(fd, 0, page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map ring buffer consumer page: %w", err)
	}
	producer, err := unix.Mmap(fd, int64(page), page+2*size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		unix.Munmap(consumer)
		return nil, fmt.Errorf("map ring buffer data: %w", err)
	}
	return &ring{consumer: consumer, producer: producer, data: producer[page:], mask: uint64(size - 1)}, nil
}

func (r *ring) consumerPos() *uint64 { return (*uint64)(unsafe.Pointer(&r.consumer[0])) }
func (r *ring) producerPos() *uint64 { return (*uint64)(unsafe.Pointer(&r.producer[0])) }

// read calls fn with each complete record, in order, and releases each
// one after fn returns. It stops at a record still being written.
func (r *ring) read(fn func(record []byte)) (n int) {
	cons := atomic.LoadUint64(r.consumerPos())
	prod := atomic.LoadUint64(r.producerPos())
	for cons < prod {
		off := cons & r.mask
		header := atomic.LoadUint32((*uint32)(unsafe.Pointer(&r.data[off])))
		if header&ringBusyBit != 0 {
			break
		}
		length := uint64(header &^ (ringBusyBit | ringDiscardBit))
		if header&ringDiscardBit == 0 {
			start := off + ringHeaderSize
			fn(r.data[start : start+length])
			n++
		}
		cons += (length + ringHeaderSize + 7) &^ 7
		atomic.StoreUint64(r.consumerPos(), cons)
	}
	return n
}

// used returns the bytes written and not yet consumed.
func (r *ring) used() int {
	return int(atomic.LoadUint64(r.producerPos()) - atomic.LoadUint64(r.consumerPos()))
}

func (r *ring) close() {
	unix.Munmap(r.consumer)
	unix.Munmap(r.producer)
}
