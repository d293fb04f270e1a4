package container

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/heatscope/heatscope/profiler"
)

// cgroupRoot returns the cgroup v2 mount, skipping when there is none.
func cgroupRoot(t testing.TB) string {
	t.Helper()
	root, err := profiler.CgroupV2Root()
	if err != nil {
		t.Skipf("no cgroup v2 hierarchy to resolve ids in: %v", err)
	}
	return root
}

func inode(t testing.TB, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// ownCgroup returns this process's cgroup v2 path from /proc/self/cgroup.
func ownCgroup(t *testing.T) string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p
		}
	}
	t.Skip("this process is in no cgroup v2 (no 0:: line in /proc/self/cgroup)")
	return ""
}

// resolverFor opens a resolver with opts that resolves by file handle
// (handles) or by walking the tree. ok is false, and the resolver closed,
// when file handles are not available here: the caller then tests the walk
// only.
func resolverFor(t *testing.T, opts Options, handles bool) (r *Resolver, ok bool) {
	t.Helper()
	r, err := NewResolver(opts)
	if err != nil {
		t.Fatal(err)
	}
	if handles && !r.UsesHandles() {
		t.Logf("no file handles here (needs CAP_DAC_READ_SEARCH): only the walk is tested")
		r.Close()
		return nil, false
	}
	if !handles {
		r.Close() // walk from now on
	}
	return r, true
}

// TestResolveOwnCgroup resolves this process's own cgroup, by file handle
// (when privileged) and by walking the tree.
func TestResolveOwnCgroup(t *testing.T) {
	root := cgroupRoot(t)
	path := ownCgroup(t)
	id := inode(t, filepath.Join(root, path))
	for _, handles := range []bool{true, false} {
		r, ok := resolverFor(t, Options{CgroupRoot: root}, handles)
		if !ok {
			continue
		}
		c := r.Lookup(id)
		if c == nil || c.Cgroup != path {
			t.Errorf("handles=%v: Lookup(%d) = %+v, want cgroup %q", handles, id, c, path)
		}
		if c2 := r.Lookup(id); c2 != c {
			t.Errorf("handles=%v: a second lookup did not come from the cache", handles)
		}
		if st := r.Stats(); st.Resolved != 1 || st.Lookups != 2 || (st.Walks > 0) == handles {
			t.Errorf("handles=%v: stats %+v, want one resolution, two lookups, walks only without handles", handles, st)
		}
		r.Close()
	}
}

// TestResolveVanished creates a container-like cgroup, resolves it, removes
// it: the labels stay. An id first seen after its cgroup is gone resolves to
// nothing, and stays unresolved without new work until the TTL passes.
func TestResolveVanished(t *testing.T) {
	root := cgroupRoot(t)
	base, err := os.MkdirTemp(root, "heatscope-test-")
	if err != nil {
		t.Skipf("cannot create a cgroup under %s (needs root): %v", root, err)
	}
	rel := "/kubepods/besteffort/pod" + uid + "/" + id1
	dir := filepath.Join(base, rel)
	t.Cleanup(func() { removeCgroups(base) })
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	id := inode(t, dir)
	gone := inode(t, base)
	node := newFakeNode(t)
	node.pod("ns1", "web-0", uid, "nginx")

	for _, handles := range []bool{true, false} {
		r, ok := resolverFor(t, Options{CgroupRoot: root, Dirs: node.dirs}, handles)
		if !ok {
			continue
		}
		c := r.Lookup(id)
		want := "/" + filepath.Base(base) + rel
		if c == nil || c.Cgroup != want || c.ID != id1 || c.PodUID != uid || c.QoS != BestEffort ||
			c.Namespace != "ns1" || c.Pod != "web-0" || c.Name != "nginx" {
			t.Fatalf("handles=%v: Lookup = %+v, want cgroup %s of container %s in ns1/web-0/nginx", handles, c, want, id1)
		}
		r.Close()
	}

	r, err := NewResolver(Options{CgroupRoot: root, Dirs: node.dirs})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := r.Lookup(id)
	removeCgroups(base)
	if _, err := os.Stat(dir); err == nil {
		t.Fatal("the cgroup is still there")
	}
	if again := r.Lookup(id); again != c {
		t.Errorf("after its cgroup vanished: %+v, want the labels learnt before %+v", again, c)
	}
	if c := r.Lookup(gone); c != nil {
		t.Errorf("an id whose cgroup is gone resolved to %+v", c)
	}
	before := r.Stats().Unresolved
	r.Lookup(gone)
	if st := r.Stats(); st.Unresolved != before {
		t.Errorf("an unresolved id was resolved again within its TTL: %+v", st)
	}
}

// removeCgroups removes a tree of empty cgroups, deepest first.
func removeCgroups(base string) {
	var dirs []string
	filepath.Walk(base, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		os.Remove(dirs[i])
	}
}

// TestResolverBound looks up more ids than the cache holds.
func TestResolverBound(t *testing.T) {
	r, err := NewResolver(Options{CgroupRoot: cgroupRoot(t), MaxEntries: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for id := uint64(1 << 40); id < 1<<40+100; id++ {
		if c := r.Lookup(id); c != nil {
			t.Fatalf("made-up id %d resolved to %+v", id, c)
		}
	}
	if n := len(r.cur) + len(r.old); n > 8 {
		t.Errorf("the cache holds %d entries, more than its bound of 8", n)
	}
}
