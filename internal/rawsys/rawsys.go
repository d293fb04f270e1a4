// Package rawsys reads files the kernel makes from memory (/proc/PID/maps)
// and stats paths with raw system calls, which the Go scheduler is not
// told about.
//
// Why: an ordinary system call (syscall.Syscall, under os and x/sys/unix)
// wakes the runtime's sysmon thread when it sleeps, and sysmon then polls
// every 20 µs for as long as any goroutine runs: under process churn the
// agent's reads of new processes' maps woke it in most polls of the
// sample ring, and its polling was 14% of the agent's CPU (churn case b,
// 99 Hz, perf on the agent). A raw call keeps its P while it runs, so it
// is only for calls that cannot block for long: /proc files, and stats of
// paths a running process maps (their inodes are in memory). Not for
// reading a file from a disk.
package rawsys

import (
	"io/fs"
	"syscall"
	"unsafe"
)

// ReadFile reads the whole file at path into buf, growing it as needed,
// and returns it. Errors are *fs.PathError, so errors.Is(err,
// fs.ErrNotExist) tells a process that has exited.
func ReadFile(path string, buf []byte) ([]byte, error) {
	fd, err := Open(path)
	if err != nil {
		return buf[:0], err
	}
	defer Close(fd)
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		free := buf[len(buf):cap(buf)]
		n, _, errno := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&free[0])), uintptr(len(free)))
		switch {
		case errno == syscall.EINTR:
			continue
		case errno != 0:
			return buf, &fs.PathError{Op: "read", Path: path, Err: errno}
		case n == 0:
			return buf, nil
		}
		buf = buf[:len(buf)+int(n)]
	}
}

// Open opens the file at path for reading (close-on-exec) and returns its
// descriptor, which the caller closes with Close. Errors are
// *fs.PathError.
func Open(path string) (uintptr, error) {
	p, err := syscall.BytePtrFromString(path)
	if err != nil {
		return 0, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	for {
		fd, _, errno := syscall.RawSyscall6(syscall.SYS_OPENAT, atFDCWD, uintptr(unsafe.Pointer(p)),
			syscall.O_RDONLY|syscall.O_CLOEXEC, 0, 0, 0)
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 {
			return 0, &fs.PathError{Op: "open", Path: path, Err: errno}
		}
		return fd, nil
	}
}

// Close closes a descriptor Open returned.
func Close(fd uintptr) { syscall.RawSyscall(syscall.SYS_CLOSE, fd, 0, 0) }

// Ioctl makes the ioctl request req on fd with the argument arg (a pointer
// to the request's structure, which the caller keeps alive), retrying on
// EINTR, and returns its errno (0: none). Only for requests that do not
// block, as the /proc files' queries.
func Ioctl(fd, req uintptr, arg unsafe.Pointer) syscall.Errno {
	for {
		_, _, errno := syscall.RawSyscall(syscall.SYS_IOCTL, fd, req, uintptr(arg))
		if errno != syscall.EINTR {
			return errno
		}
	}
}

// Stat fills st with the status of the file at path, following symbolic
// links, as syscall.Stat does. Errors are *fs.PathError. A raw call on
// amd64 and arm64 (whose fstatat fills a syscall.Stat_t), an ordinary one
// elsewhere.
func Stat(path string, st *syscall.Stat_t) error {
	if err := stat(path, st); err != nil {
		return &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	return nil
}

// atFDCWD is AT_FDCWD (-100) as a system call argument.
const atFDCWD = ^uintptr(99)
