package pysymbol

import (
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Memory is read with process_vm_readv: one system call for several
// ranges, no file to open; it needs the access ptrace needs, which root
// has. An object is read with its header (what must be there) and, on
// speculation, a few hundred bytes after it, where a short name's
// characters are: how long it is is not known until its header is read.
// A speculative range may run past the end of a mapping: the kernel then
// stops the transfer after the last range it could read whole, and what
// was not read is read again, range by range.

// readMemory reads len(buf) bytes at addr in process pid's memory; a read
// that is not whole is an error.
func readMemory(pid uint32, addr uint64, buf []byte) error {
	_, err := readv(pid, [][]byte{buf}, []uint64{addr})
	return err
}

// object is a Python object to read: its address, the bytes that must be
// read (head) and those read if they can be (more, right after head, and
// in head's capacity: o.head[:o.n] is what was read).
type object struct {
	addr       uint64
	head, more []byte
	// n is how many bytes were read from head's start.
	n int
}

// readObjects reads objects in one system call where it can; every
// object's head is read or it is an error.
func readObjects(pid uint32, objs []*object) error {
	bufs := make([][]byte, 0, 2*len(objs))
	addrs := make([]uint64, 0, 2*len(objs))
	for _, o := range objs {
		bufs = append(bufs, o.head, o.more)
		addrs = append(addrs, o.addr, o.addr+uint64(len(o.head)))
	}
	n, err := readv(pid, bufs, addrs)
	if errors.Is(err, ErrExited) {
		return err
	}
	for _, o := range objs {
		o.n = min(n, len(o.head)+len(o.more))
		n -= o.n
		if o.n < len(o.head) {
			break // this one and those after it: one by one
		}
	}
	for _, o := range objs {
		if o.n >= len(o.head) {
			continue
		}
		n, err := readv(pid, [][]byte{o.head, o.more}, []uint64{o.addr, o.addr + uint64(len(o.head))})
		if n < len(o.head) {
			return err
		}
		o.n = n
	}
	return nil
}

// readv reads each of bufs at the address of addrs in one system call and
// returns how many bytes it read, counting from the first: the kernel
// stops at the first range it cannot read. An error says the first
// range was not read whole.
func readv(pid uint32, bufs [][]byte, addrs []uint64) (int, error) {
	local := make([]unix.Iovec, 0, len(bufs))
	remote := make([]unix.RemoteIovec, 0, len(bufs))
	for i, b := range bufs {
		if len(b) == 0 {
			continue
		}
		l := unix.Iovec{Base: &b[0]}
		l.SetLen(len(b))
		local = append(local, l)
		remote = append(remote, unix.RemoteIovec{Base: uintptr(addrs[i]), Len: len(b)})
	}
	if len(local) == 0 {
		return 0, nil
	}
	n, err := unix.ProcessVMReadv(int(pid), local, remote, 0)
	switch {
	case errors.Is(err, unix.ESRCH):
		return 0, fmt.Errorf("read pid %d's memory: %w", pid, ErrExited)
	case err != nil:
		return 0, fmt.Errorf("read %d bytes at %#x in pid %d: %w", len(bufs[0]), addrs[0], pid, err)
	case n < len(bufs[0]):
		return n, fmt.Errorf("read %d of %d bytes at %#x in pid %d", n, len(bufs[0]), addrs[0], pid)
	}
	return n, nil
}

// ErrExited is wrapped by the errors of reads from a process that has
// exited.
var ErrExited = errors.New("the process has exited")

// word and word32 read the little-endian 8- and 4-byte words at off in b
// (every layout pyinterp holds is a 64-bit little-endian build's), 0 past
// its end.
func word(b []byte, off uint32) uint64 {
	if uint64(off)+8 > uint64(len(b)) {
		return 0
	}
	return binary.LittleEndian.Uint64(b[off:])
}

func word32(b []byte, off uint32) uint32 {
	if uint64(off)+4 > uint64(len(b)) {
		return 0
	}
	return binary.LittleEndian.Uint32(b[off:])
}
