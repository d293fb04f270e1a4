//go:build !amd64 && !arm64

package rawsys

import "syscall"

// stat is an ordinary call where fstatat(2) does not fill a
// syscall.Stat_t (32-bit platforms' is stat64).
func stat(path string, st *syscall.Stat_t) error { return syscall.Stat(path, st) }
