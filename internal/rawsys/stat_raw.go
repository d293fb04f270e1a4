//go:build amd64 || arm64

package rawsys

import (
	"syscall"
	"unsafe"
)

func stat(path string, st *syscall.Stat_t) error {
	p, err := syscall.BytePtrFromString(path)
	if err != nil {
		return err
	}
	for {
		_, _, errno := syscall.RawSyscall6(sysFstatat, atFDCWD, uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(st)), 0, 0, 0)
		if errno != syscall.EINTR {
			if errno != 0 {
				return errno
			}
			return nil
		}
	}
}
