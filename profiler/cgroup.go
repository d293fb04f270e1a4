package profiler

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// cgroup2Magic is CGROUP2_SUPER_MAGIC, the f_type of a cgroup v2 mount.
const cgroup2Magic = 0x63677270

// CgroupV2Root returns where the cgroup v2 hierarchy is mounted: usually
// /sys/fs/cgroup, but /sys/fs/cgroup/unified on hybrid (v1 + v2) systems.
func CgroupV2Root() (string, error) {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return "", fmt.Errorf("find the cgroup v2 mount: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[2] == "cgroup2" {
			return f[1], nil
		}
	}
	return "", errors.New("find the cgroup v2 mount: no cgroup2 file system is mounted")
}

// ParseCgroup turns a cgroup id, or a cgroup v2 directory (absolute, or
// relative to CgroupRoot), into the id bpf_get_current_cgroup_id returns:
// the directory's inode number. The empty string is 0, no filter.
func ParseCgroup(s string) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	if id, err := strconv.ParseUint(s, 10, 64); err == nil {
		return id, nil
	}
	path := s
	if !filepath.IsAbs(path) {
		root, err := CgroupV2Root()
		if err != nil {
			return 0, fmt.Errorf("cgroup %q: %w", s, err)
		}
		path = filepath.Join(root, path)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return 0, fmt.Errorf("cgroup %q: %w", s, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	var fsStat syscall.Statfs_t
	if !fi.IsDir() || !ok || syscall.Statfs(path, &fsStat) != nil || fsStat.Type != cgroup2Magic {
		return 0, fmt.Errorf("cgroup %q: not a cgroup v2 directory", s)
	}
	return st.Ino, nil
}
