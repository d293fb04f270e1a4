package symbolize

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/heatscope/heatscope/internal/rawsys"
)

// Executable mappings by query. Since Linux 6.11 /proc/PID/maps answers
// the PROCMAP_QUERY ioctl (include/uapi/linux/fs.h): the mapping at or
// after an address whose permissions match, with its file's device, inode,
// offset and path. Asking for executable mappings only, one call each,
// costs a third to a quarter of reading the whole file (a process of 105
// mappings, 19 of them executable: 34-40 µs of CPU against 102-176 µs),
// whose lines the kernel formats and the reader then skips: under process
// churn the reads of new processes' maps were the agent's largest cost
// (bench/churn case b, 14% of its CPU). Older kernels answer ENOTTY, and
// the file is read as before.

// procmapQuery is struct procmap_query.
type procmapQuery struct {
	size, queryFlags, queryAddr      uint64
	vmaStart, vmaEnd                 uint64
	vmaFlags, vmaPageSize, vmaOffset uint64
	inode                            uint64
	devMajor, devMinor               uint32
	vmaNameSize, buildIDSize         uint32
	vmaNameAddr, buildIDAddr         uint64
}

// procmapQuerySize is sizeof(struct procmap_query) as of Linux 6.11.
const procmapQuerySize = 104

// The request, _IOWR(PROCFS_IOCTL_MAGIC 'f', 17, struct procmap_query),
// in the generic ioctl encoding amd64 and arm64 use, and its flags.
const (
	procmapQueryRequest = 3<<30 | procmapQuerySize<<16 | 'f'<<8 | 17

	procmapQueryExecutable   = 0x04
	procmapQueryCoveringNext = 0x10
)

// procmapProbe asks the kernel once whether it answers PROCMAP_QUERY, on
// /proc/self/maps; procmapUnsupported is set if it does not (ENOTTY
// before 6.11, or a security module's refusal): every read then parses
// the file, without a query first. A file that is not the kernel's (a
// test's ProcRoot) answers ENOTTY too: only that file is read instead.
var (
	procmapProbe       sync.Once
	procmapUnsupported atomic.Bool
)

// errNoProcmapQuery is queryExecMaps's answer for a file that does not
// take the query.
var errNoProcmapQuery = errors.New("PROCMAP_QUERY not answered")

// probeProcmap sets procmapUnsupported on a kernel without PROCMAP_QUERY.
func probeProcmap() {
	var name [unix.PathMax]byte
	if _, err := queryExecMaps(nil, "/proc/self/maps", name[:], nil); errors.Is(err, errNoProcmapQuery) {
		procmapUnsupported.Store(true)
	}
}

// queryExecMaps appends the executable mappings of the maps file at path
// (/proc/PID/maps) to maps, as parseMaps with execOnly makes them from
// the file's text, asking the kernel for them one by one; name is the
// buffer for their paths (at least PATH_MAX bytes). A process whose
// memory is gone (a zombie) has none, as its file is empty. When the
// first query fails (ENOTTY on a kernel without it), it returns an error
// that is errNoProcmapQuery, nothing appended: the file's text is to be
// read instead.
//
// The one difference with the file: x86-64's legacy [vsyscall] page,
// which is not a mapping of the process, is not listed.
func queryExecMaps(maps []mapping, path string, name []byte, paths *interner) ([]mapping, error) {
	fd, err := rawsys.Open(path)
	if err != nil {
		return maps, err
	}
	defer rawsys.Close(fd)
	first := len(maps)
	q := procmapQuery{size: procmapQuerySize, queryFlags: procmapQueryExecutable | procmapQueryCoveringNext}
	for {
		q.queryAddr = q.vmaEnd
		q.vmaNameSize, q.buildIDSize = uint32(len(name)), 0
		q.vmaNameAddr, q.buildIDAddr = uint64(uintptr(unsafe.Pointer(&name[0]))), 0
		errno := rawsys.Ioctl(fd, procmapQueryRequest, unsafe.Pointer(&q))
		switch {
		case errno == syscall.ENOENT:
			return maps, nil // no executable mapping after the last one
		case errno == syscall.ESRCH && len(maps) == first:
			return maps, nil // no memory, as an empty file says
		case errno == 0:
		case len(maps) == first:
			// ENOTTY before 6.11 or on a file that is not the
			// kernel's; anything else the first query meets (a
			// security module's EPERM, a kernel that refuses the
			// structure) falls back to the text as well.
			return maps, fmt.Errorf("%w: %s: %w", errNoProcmapQuery, path, errno)
		default:
			return maps[:first], &fs.PathError{Op: "PROCMAP_QUERY", Path: path, Err: errno}
		}
		if q.vmaEnd <= q.queryAddr || q.vmaEnd < q.vmaStart || q.vmaNameSize > uint32(len(name)) {
			return maps[:first], fmt.Errorf("PROCMAP_QUERY %s at %#x: mapping %#x-%#x, name of %d bytes", path, q.queryAddr, q.vmaStart, q.vmaEnd, q.vmaNameSize)
		}
		m := mapping{start: q.vmaStart, end: q.vmaEnd, offset: q.vmaOffset, dev: unix.Mkdev(q.devMajor, q.devMinor), inode: q.inode, exec: true}
		if q.vmaNameSize > 0 {
			p := name[:q.vmaNameSize-1] // without its NUL
			if s, ok := bytes.CutSuffix(p, []byte(deletedSuffix)); ok {
				p, m.deleted = s, true
			}
			m.path = paths.string(p)
		}
		maps = append(maps, m)
	}
}

// readExecMaps appends the executable mappings of the maps file at path
// to sc.maps: by query where the kernel has it (queryExecMaps), else from
// the file's text, read into sc.data.
func readExecMaps(sc *mapsScratch, path string, paths *interner) error {
	procmapProbe.Do(probeProcmap)
	if !procmapUnsupported.Load() {
		var err error
		if sc.maps, err = queryExecMaps(sc.maps, path, sc.name[:], paths); !errors.Is(err, errNoProcmapQuery) {
			return err
		}
	}
	var err error
	if sc.data, err = rawsys.ReadFile(path, sc.data); err != nil {
		return err
	}
	if sc.maps, err = parseMaps(sc.maps, sc.data, true, paths); err != nil {
		return fmt.Errorf("parse %s: %w", path, err)
	}
	return nil
}
