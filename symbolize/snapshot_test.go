package symbolize

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
)

// snapshotOf takes the snapshot the sampler would take of pid as it exits:
// its executable mappings, files named by device, inode and change time.
func snapshotOf(t *testing.T, pid uint32) []SnapshotMapping {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	maps, err := parseMaps(nil, data, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	var snap []SnapshotMapping
	for _, m := range maps {
		if m.path == "[vsyscall]" {
			continue
		}
		sm := SnapshotMapping{Start: m.start, End: m.end, Offset: m.offset, Dev: m.dev, Inode: m.inode, VDSO: m.path == "[vdso]"}
		if m.inode != 0 {
			var st syscall.Stat_t
			if err := syscall.Stat(fmt.Sprintf("/proc/%d/map_files/%x-%x", pid, m.start, m.end), &st); err != nil {
				t.Fatal(err)
			}
			sm.CtimeNs = st.Ctim.Nano()
		}
		snap = append(snap, sm)
	}
	return snap
}

// TestSymbolizeFromSnapshot symbolizes a process that exited before its
// /proc/PID/maps was read, from its exit snapshot: a binary another
// process's /proc read named resolves; one no read named stays unknown.
func TestSymbolizeFromSnapshot(t *testing.T) {
	first := startC(t)
	s := New(nil, Options{})
	s.Observe(first.pid, "test")
	firstStack, _, _ := cChain(t, first)
	if f := s.Symbolize(first.pid, nil, firstStack)[0]; f.Function != "hot_c_function" {
		t.Fatalf("first process: %+v", f)
	}

	second := start(t, first.bin)
	stack, vaddrs, names := cChain(t, second)
	snap := snapshotOf(t, second.pid)
	second.kill()
	waitGone(t, second.pid)
	if s.Has(second.pid, "fixture") {
		t.Fatal("the second process is tracked before its snapshot")
	}
	s.SetMaps(second.pid, snap)
	frames := s.Symbolize(second.pid, nil, stack)
	for i, f := range frames {
		if f.Function != names[i] || f.Module != first.bin || f.Address != vaddrs[i] {
			t.Errorf("frame %d: %+v, want %s at %#x in %s", i, f, names[i], vaddrs[i], first.bin)
		}
	}
	st := s.Stats()
	if st.MapsReads != 1 || st.Snapshots != 1 {
		t.Errorf("stats %+v: want the first process's maps read, the second's from its snapshot", st)
	}

	// A binary no /proc read named: its frames name no function.
	other := startC(t)
	otherStack, _, _ := cChain(t, other)
	otherSnap := snapshotOf(t, other.pid)
	other.kill()
	waitGone(t, other.pid)
	s.SetMaps(other.pid, otherSnap)
	f := s.Symbolize(other.pid, nil, otherStack)[0]
	if f.Module != moduleUnnamed || !strings.HasPrefix(f.Function, "[unnamed file+0x") {
		t.Errorf("a file no read named: %+v", f)
	}
	if st := s.Stats(); st.MapsReads != 1 || st.SnapshotUnknownFiles == 0 {
		t.Errorf("stats %+v: want no more maps reads, and the unnamed file counted", st)
	}
	// Exited processes known from snapshots are forgotten without a stat.
	if n := s.ForgetExited(0); n != 2 {
		t.Errorf("ForgetExited forgot %d processes, want the 2 from snapshots", n)
	}
}
