package container

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heatscope/heatscope/profiler"
	"github.com/heatscope/heatscope/sample"
)

// Options configures a Resolver.
type Options struct {
	// CgroupRoot is where cgroup v2 is mounted; "" finds it.
	CgroupRoot string
	// Dirs are where Kubernetes names are read from; the zero value reads
	// none (DefaultDirs are the kubelet's).
	Dirs Dirs
	// MaxEntries bounds the cache of resolved cgroups (default 65536).
	MaxEntries int
	// NegativeTTL is how long a cgroup id that could not be resolved, or
	// whose Kubernetes names were not found, is left alone before trying
	// again (default 10 s).
	NegativeTTL time.Duration
}

// Stats counts a Resolver's work.
type Stats struct {
	// Lookups counts calls to Lookup; Resolved the cgroups resolved to a
	// path, Unresolved those that could not be (gone, or not found).
	Lookups, Resolved, Unresolved uint64
	// Walks counts walks of the cgroup tree (when file handles cannot be
	// used).
	Walks uint64
	// Entries is about the number of cached cgroups (an entry moving
	// between the cache's generations may count twice).
	Entries int
}

const (
	defaultMaxEntries  = 1 << 16
	defaultNegativeTTL = 10 * time.Second
	// walkInterval is the least time between two walks of the cgroup tree.
	walkInterval = time.Second
	// fileidKernfs is the file handle type of kernfs (cgroupfs): 8 bytes,
	// the node id, which is also the cgroup id.
	fileidKernfs = 0xfe
)

// Resolver maps cgroup ids (bpf_get_current_cgroup_id, the inode number of
// a cgroup v2 directory) to what the cgroup's path says about a container.
//
// A cgroup is resolved the first time its id is looked up, while its
// processes run and so while it exists, and the answer is kept: cgroup ids
// are never reused, so a cgroup that has since vanished keeps its labels.
// The path comes from open_by_handle_at(2) on the id (one system call; it
// needs CAP_DAC_READ_SEARCH), or else from a walk of the cgroup tree, at
// most once a second. Ids that resolve to nothing are remembered as such
// for NegativeTTL. The cache holds at most MaxEntries cgroups, in two
// generations: when the newer fills, the older is dropped.
//
// A Resolver is not safe for concurrent use, except Stats.
type Resolver struct {
	root     string
	mountFD  int // -1: no file handles
	names    *names
	max      int
	ttl      time.Duration
	cur, old map[uint64]entry
	walked   map[uint64]string // inode -> path, from the last walk
	lastWalk time.Time

	lookups, resolved, unresolved, walks atomic.Uint64
	entries                              atomic.Int64
}

// entry is a cached answer: c, or nil for none; retry, when not zero, is
// when (Unix ns) to resolve again.
type entry struct {
	c     *sample.Container
	retry int64
}

// NewResolver opens the cgroup v2 hierarchy.
func NewResolver(opts Options) (*Resolver, error) {
	root := opts.CgroupRoot
	if root == "" {
		var err error
		if root, err = profiler.CgroupV2Root(); err != nil {
			return nil, fmt.Errorf("container metadata: %w", err)
		}
	}
	if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("container metadata: cgroup root %s is not a directory", root)
	}
	r := &Resolver{root: filepath.Clean(root), mountFD: -1, names: newNames(opts.Dirs),
		max: opts.MaxEntries, ttl: opts.NegativeTTL, cur: map[uint64]entry{}, old: map[uint64]entry{}}
	if r.max <= 0 {
		r.max = defaultMaxEntries
	}
	if r.ttl <= 0 {
		r.ttl = defaultNegativeTTL
	}
	r.mountFD = openHandles(r.root)
	return r, nil
}

// openHandles returns a descriptor of root to open cgroups by id from, or
// -1 when this kernel or these privileges do not allow it.
func openHandles(root string) int {
	h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, root, 0)
	if err != nil || h.Type() != fileidKernfs || len(h.Bytes()) != 8 {
		return -1
	}
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	// Try it on the root itself: without CAP_DAC_READ_SEARCH it fails.
	if _, err := pathByHandle(fd, binary.LittleEndian.Uint64(h.Bytes())); err != nil {
		unix.Close(fd)
		return -1
	}
	return fd
}

// pathByHandle returns the absolute path of the cgroup with this id.
func pathByHandle(mountFD int, id uint64) (string, error) {
	fd, err := unix.OpenByHandleAt(mountFD, unix.NewFileHandle(fileidKernfs, binary.LittleEndian.AppendUint64(nil, id)), unix.O_PATH|unix.O_CLOEXEC)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	return os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
}

// UsesHandles reports whether cgroups are opened by id (rather than found
// by walking the tree).
func (r *Resolver) UsesHandles() bool { return r.mountFD >= 0 }

// Lookup returns what is known of cgroup id, nil when nothing is (id 0,
// a cgroup that vanished before its first lookup). The result is shared:
// do not modify it.
func (r *Resolver) Lookup(id uint64) *sample.Container {
	r.lookups.Add(1)
	if id == 0 {
		return nil
	}
	e, ok := r.cur[id]
	if !ok {
		if e, ok = r.old[id]; ok {
			r.put(id, e)
		}
	}
	if ok && e.retry == 0 {
		return e.c
	}
	now := time.Now()
	if ok && now.UnixNano() < e.retry {
		return e.c
	}
	c, retry := r.resolve(id, now)
	if c == nil && e.c != nil {
		c = e.c // gone since: keep what was learnt while it lived
		retry = 0
	}
	r.put(id, entry{c: c, retry: retry})
	return c
}

// resolve finds cgroup id's path and reads it. retry is when to try again
// (0: never), for ids not found and for pods whose names are missing.
func (r *Resolver) resolve(id uint64, now time.Time) (c *sample.Container, retry int64) {
	path, ok := r.path(id, now)
	if !ok {
		r.unresolved.Add(1)
		if r.mountFD < 0 && !r.lastWalk.Equal(now) {
			// Not looked for: the tree was walked less than a second ago.
			return nil, r.lastWalk.Add(walkInterval).UnixNano()
		}
		return nil, now.Add(r.ttl).UnixNano()
	}
	r.resolved.Add(1)
	in := Parse(path)
	c = &sample.Container{Cgroup: path, ID: in.ID, Runtime: in.Runtime, PodUID: in.PodUID, QoS: in.QoS}
	if in.PodUID == "" && in.ID == "" {
		return c, 0
	}
	r.names.fill(in, c, now)
	if in.PodUID != "" && (c.Namespace == "" || in.ID != "" && c.Name == "") {
		return c, now.Add(r.ttl).UnixNano()
	}
	return c, 0
}

// path returns cgroup id's path below the root ("/" for the root).
func (r *Resolver) path(id uint64, now time.Time) (string, bool) {
	if r.mountFD >= 0 {
		abs, err := pathByHandle(r.mountFD, id)
		if err == nil {
			if rel, ok := r.relative(abs); ok {
				return rel, true
			}
		}
		if err == nil || errors.Is(err, syscall.ESTALE) || errors.Is(err, syscall.ENOENT) {
			return "", false
		}
		// Anything else (privileges dropped?): walk from now on.
		unix.Close(r.mountFD)
		r.mountFD = -1
	}
	if p, ok := r.walked[id]; ok {
		return p, true
	}
	if now.Sub(r.lastWalk) < walkInterval {
		return "", false
	}
	r.lastWalk = now
	r.walk()
	p, ok := r.walked[id]
	return p, ok
}

// relative turns an absolute path under the root into "/..." below it.
func (r *Resolver) relative(abs string) (string, bool) {
	if abs == r.root {
		return "/", true
	}
	rest, ok := strings.CutPrefix(abs, r.root+"/")
	if !ok {
		return "", false
	}
	return "/" + rest, true
}

// walk indexes every cgroup under the root by inode number.
func (r *Resolver) walk() {
	r.walks.Add(1)
	walked := make(map[uint64]string, len(r.walked))
	filepath.WalkDir(r.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil // a cgroup removed during the walk, or a file
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			if rel, ok := r.relative(p); ok {
				walked[st.Ino] = rel
			}
		}
		return nil
	})
	r.walked = walked
}

// put caches e for id, dropping the older generation when the newer is
// full.
func (r *Resolver) put(id uint64, e entry) {
	if _, ok := r.cur[id]; !ok && len(r.cur) >= r.max/2 {
		r.old, r.cur = r.cur, make(map[uint64]entry, r.max/2)
	}
	r.cur[id] = e
	r.entries.Store(int64(len(r.cur) + len(r.old)))
}

// Stats returns the resolver's counters. It may be called concurrently with
// Lookup.
func (r *Resolver) Stats() Stats {
	return Stats{Lookups: r.lookups.Load(), Resolved: r.resolved.Load(), Unresolved: r.unresolved.Load(),
		Walks: r.walks.Load(), Entries: int(r.entries.Load())}
}

// Close releases the descriptor of the cgroup root.
func (r *Resolver) Close() error {
	if r.mountFD >= 0 {
		err := unix.Close(r.mountFD)
		r.mountFD = -1
		return err
	}
	return nil
}
