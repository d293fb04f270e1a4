package container

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/heatscope/heatscope/sample"
)

// TestTenThousandCgroups runs the resolver through 10 000 real cgroups over
// the test's life (2 000 more when it walks the tree), as a node running many short-lived pods does: batches
// of 100 pods, each a cgroup of one container with its kubelet log
// directory, are created, looked up while they exist, then deleted. After
// every batch, every table the resolver keeps must be within its bound:
// the cache of resolved cgroups within MaxEntries, the walked index within
// the tree that exists, the pod index within the pods that exist. It runs
// with file handles (when privileged) and by walking the tree.
func TestTenThousandCgroups(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 12 000 cgroups; skipped with -short")
	}
	const (
		batch      = 100
		maxEntries = 1024
		// slack covers the cgroups other programs on the machine create
		// while the test runs (systemd scopes, other tests).
		slack = 2000
	)
	root := cgroupRoot(t)
	base, err := os.MkdirTemp(root, "heatscope-test-")
	if err != nil {
		t.Skipf("cannot create a cgroup under %s (needs root): %v", root, err)
	}
	t.Cleanup(func() { removeCgroups(base) })
	node := newFakeNode(t)

	for _, handles := range []bool{true, false} {
		// By file handle, as a privileged agent resolves, 10 000; by
		// walking the tree, which a walk a batch makes slower, 2 000.
		total := 10_000
		if !handles {
			total = 2_000
		}
		r, ok := resolverFor(t, Options{CgroupRoot: root, Dirs: node.dirs, MaxEntries: maxEntries}, handles)
		if !ok {
			continue
		}
		before := countCgroups(root)
		maxCached, maxWalked, maxPods := 0, 0, 0
		for first := 0; first < total; first += batch {
			type pod struct {
				uid, cid, dir, logDir string
				id                    uint64
			}
			pods := make([]pod, batch)
			for j := range pods {
				n := first + j
				p := &pods[j]
				p.uid = fmt.Sprintf("%08x-0000-4000-8000-%012x", n, n)
				p.cid = fmt.Sprintf("%064x", uint64(n)+1<<40)
				p.dir = filepath.Join(base, "kubepods", "besteffort", "pod"+p.uid, p.cid)
				if err := os.MkdirAll(p.dir, 0o755); err != nil {
					t.Fatalf("cgroup %d: %v", n, err)
				}
				p.id = inode(t, p.dir)
				node.pod("ns", fmt.Sprintf("web-%d", n), p.uid, "app")
				p.logDir = filepath.Join(node.dirs.LogPods, fmt.Sprintf("ns_web-%d_%s", n, p.uid))
			}
			// The batch's pods are new: let the resolver walk and list
			// the pods now rather than wait for their intervals.
			r.lastWalk, r.names.podsScan = time.Time{}, time.Time{}
			found := make([]*sample.Container, batch)
			for j, p := range pods {
				c := r.Lookup(p.id)
				want := fmt.Sprintf("web-%d", first+j)
				if c == nil || c.PodUID != p.uid || c.ID != p.cid || c.Namespace != "ns" || c.Pod != want || c.Name != "app" {
					t.Fatalf("handles=%v: cgroup %d: Lookup = %+v, want container %s of ns/%s/app", handles, first+j, c, p.cid, want)
				}
				found[j] = c
			}
			for _, p := range pods {
				if err := os.Remove(p.dir); err != nil {
					t.Fatal(err)
				}
				if err := os.Remove(filepath.Dir(p.dir)); err != nil {
					t.Fatal(err)
				}
				if err := os.RemoveAll(p.logDir); err != nil {
					t.Fatal(err)
				}
			}
			// Gone, they keep what was learnt while they lived.
			for j, p := range pods {
				if c := r.Lookup(p.id); c != found[j] {
					t.Fatalf("handles=%v: cgroup %d after it was deleted: %+v, want the labels learnt before", handles, first+j, c)
				}
			}
			cached := len(r.cur) + len(r.old)
			maxCached, maxWalked, maxPods = max(maxCached, cached), max(maxWalked, len(r.walked)), max(maxPods, len(r.names.pods))
			switch {
			case cached > maxEntries || r.Stats().Entries > maxEntries:
				t.Fatalf("handles=%v after %d cgroups: %d cgroups cached (Stats %d), bound %d", handles, first+batch, cached, r.Stats().Entries, maxEntries)
			case len(r.walked) > before+batch+slack:
				t.Fatalf("handles=%v after %d cgroups: the walked index holds %d cgroups, the tree had %d before the test and the test at most %d more", handles, first+batch, len(r.walked), before, batch)
			case len(r.names.pods) > batch:
				t.Fatalf("handles=%v after %d cgroups: %d pods indexed, at most %d existed at once", handles, first+batch, len(r.names.pods), batch)
			case len(r.names.containers) != 0:
				t.Fatalf("handles=%v: %d containers indexed from an empty log directory", handles, len(r.names.containers))
			}
		}
		st := r.Stats()
		t.Logf("handles=%v: %d cgroups, %d lookups, %d resolved, %d walks; at most %d cached (bound %d), %d in the walked index (tree: %d before), %d pods indexed",
			handles, total, st.Lookups, st.Resolved, st.Walks, maxCached, maxEntries, maxWalked, before, maxPods)
		if st.Resolved < uint64(total) || maxCached < maxEntries/2 {
			t.Fatalf("handles=%v: %d resolved, at most %d cached: the test did not fill the cache", handles, st.Resolved, maxCached)
		}
		r.Close()
	}
}

// countCgroups counts the cgroups under root.
func countCgroups(root string) int {
	n := 0
	filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			n++
		}
		return nil
	})
	return n
}
