package pysymbol

import (
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// readMemory reads len(buf) bytes at addr in process pid's memory
// (process_vm_readv: one system call, no file to open; needs the same
// access as ptrace, which root has). A read that is not whole is an error.
func readMemory(pid uint32, addr uint64, buf []byte) error {
	n, err := readMemorySpeculative(pid, addr, buf, nil)
	if err == nil && n < len(buf) {
		err = fmt.Errorf("read %d of %d bytes at %#x in pid %d", n, len(buf), addr, pid)
	}
	return err
}

// readMemorySpeculative reads buf at addr and, when more is not nil, the
// bytes right after it into more, in one system call: how much of more
// is wanted is not known yet, and it may run past the end of the mapping
// (the kernel then stops after buf). It returns how many bytes were read,
// counting from buf's start; fewer than len(buf) is an error.
func readMemorySpeculative(pid uint32, addr uint64, buf, more []byte) (int, error) {
	if len(buf) == 0 {
		return 0, nil
	}
	local := []unix.Iovec{{Base: &buf[0]}}
	local[0].SetLen(len(buf))
	remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(buf)}}
	if len(more) > 0 {
		l := unix.Iovec{Base: &more[0]}
		l.SetLen(len(more))
		local = append(local, l)
		remote = append(remote, unix.RemoteIovec{Base: uintptr(addr) + uintptr(len(buf)), Len: len(more)})
	}
	n, err := unix.ProcessVMReadv(int(pid), local, remote, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return 0, fmt.Errorf("read pid %d's memory: %w", pid, ErrExited)
		}
		return 0, fmt.Errorf("read %d bytes at %#x in pid %d: %w", len(buf), addr, pid, err)
	}
	if n < len(buf) {
		return n, fmt.Errorf("read %d of %d bytes at %#x in pid %d", n, len(buf), addr, pid)
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
