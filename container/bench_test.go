package container

import (
	"path/filepath"
	"testing"
)

// BenchmarkLookup is the per-sample cost of labelling: a lookup of a cgroup
// already resolved (the steady state), among 200 cached cgroups.
func BenchmarkLookup(b *testing.B) {
	root := cgroupRoot(b)
	r, err := NewResolver(Options{CgroupRoot: root})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	id := inode(b, root)
	ids := make([]uint64, 200)
	for i := range ids {
		ids[i] = 1<<40 + uint64(i) // unresolved: cached as such
		r.Lookup(ids[i])
	}
	ids[0] = id
	r.Lookup(id)
	b.ResetTimer()
	for i := range b.N {
		r.Lookup(ids[i%len(ids)])
	}
}

// BenchmarkResolve is the cost of a cgroup's first sample: finding its
// path (by file handle, or a walk of the tree) and parsing it.
func BenchmarkResolve(b *testing.B) {
	root := cgroupRoot(b)
	id := inode(b, filepath.Clean(root))
	for _, handles := range []bool{true, false} {
		name := "handle"
		if !handles {
			name = "walk"
		}
		b.Run(name, func(b *testing.B) {
			r, err := NewResolver(Options{CgroupRoot: root})
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			if handles && !r.UsesHandles() {
				b.Skip("no file handles here (needs CAP_DAC_READ_SEARCH)")
			}
			if !handles {
				r.Close()
			}
			for range b.N {
				r.cur, r.old, r.walked, r.lastWalk = map[uint64]entry{}, map[uint64]entry{}, nil, r.lastWalk.AddDate(-1, 0, 0)
				if r.Lookup(id) == nil {
					b.Fatal("the root cgroup did not resolve")
				}
			}
		})
	}
}

// BenchmarkParse parses a systemd-driver containerd path.
func BenchmarkParse(b *testing.B) {
	path := "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uid_ + ".slice/cri-containerd-" + id1 + ".scope"
	for range b.N {
		Parse(path)
	}
}
