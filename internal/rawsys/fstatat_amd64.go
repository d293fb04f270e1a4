package rawsys

import "syscall"

// sysFstatat is fstatat(2), which amd64 calls newfstatat.
const sysFstatat = syscall.SYS_NEWFSTATAT
