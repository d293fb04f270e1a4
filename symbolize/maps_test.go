package symbolize

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const mapsText = `55d0c0a00000-55d0c0a01000 r--p 00000000 fe:01 1048602                    /usr/bin/cat
55d0c0a01000-55d0c0a05000 r-xp 00001000 fe:01 1048602                    /usr/bin/cat
55d0c1e2a000-55d0c1e4b000 rw-p 00000000 00:00 0                          [heap]
7f3a1c000000-7f3a1c021000 rwxp 00000000 00:00 0 
7f3a1c400000-7f3a1c428000 r-xp 00028000 fe:01 1054345                    /opt/my app/lib with spaces.so
7f3a1c500000-7f3a1c501000 r-xp 00000000 00:19 77                         /tmp/fixture (deleted)
7f3a1c600000-7f3a1c601000 r-xp 00000000 00:01 2048                       /memfd:jit-code (deleted)
7f3a1c700000-7f3a1c701000 r-xp 00000000 00:00 0                          [anon:v8 code]
7ffd4e1f3000-7ffd4e1f5000 r-xp 00000000 00:00 0                          [vdso]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
`

func TestParseMaps(t *testing.T) {
	maps, err := parseMaps(nil, []byte(mapsText), false, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		m     mapping
		class mappingClass
	}{
		{mapping{start: 0x55d0c0a00000, end: 0x55d0c0a01000, dev: unix.Mkdev(0xfe, 0x01), inode: 1048602, path: "/usr/bin/cat"}, classFile},
		{mapping{start: 0x55d0c0a01000, end: 0x55d0c0a05000, offset: 0x1000, exec: true, dev: unix.Mkdev(0xfe, 0x01), inode: 1048602, path: "/usr/bin/cat"}, classFile},
		{mapping{start: 0x55d0c1e2a000, end: 0x55d0c1e4b000, path: "[heap]"}, classAnon},
		{mapping{start: 0x7f3a1c000000, end: 0x7f3a1c021000, exec: true}, classAnon},
		{mapping{start: 0x7f3a1c400000, end: 0x7f3a1c428000, offset: 0x28000, exec: true, dev: unix.Mkdev(0xfe, 0x01), inode: 1054345, path: "/opt/my app/lib with spaces.so"}, classFile},
		{mapping{start: 0x7f3a1c500000, end: 0x7f3a1c501000, exec: true, dev: unix.Mkdev(0, 0x19), inode: 77, path: "/tmp/fixture", deleted: true}, classFile},
		{mapping{start: 0x7f3a1c600000, end: 0x7f3a1c601000, exec: true, dev: unix.Mkdev(0, 0x01), inode: 2048, path: "/memfd:jit-code", deleted: true}, classAnon},
		{mapping{start: 0x7f3a1c700000, end: 0x7f3a1c701000, exec: true, path: "[anon:v8 code]"}, classAnon},
		{mapping{start: 0x7ffd4e1f3000, end: 0x7ffd4e1f5000, exec: true, path: "[vdso]"}, classPseudo},
		{mapping{start: 0xffffffffff600000, end: 0xffffffffff601000, exec: true, path: "[vsyscall]"}, classPseudo},
	}
	if len(maps) != len(want) {
		t.Fatalf("got %d mappings, want %d", len(maps), len(want))
	}
	for i, w := range want {
		if maps[i] != w.m {
			t.Errorf("line %d: got %+v, want %+v", i+1, maps[i], w.m)
		}
		if c := maps[i].class(); c != w.class {
			t.Errorf("line %d: class %d, want %d", i+1, c, w.class)
		}
	}
}

func TestParseMapsErrors(t *testing.T) {
	for _, line := range []string{
		"55d0c0a00000 r--p 00000000 fe:01 1 /x",
		"55d0c0a01000-55d0c0a00000 r--p 00000000 fe:01 1 /x",
		"55d0c0a00000-55d0c0a01000 r-p 00000000 fe:01 1 /x",
		"55d0c0a00000-55d0c0a01000 r--p zz fe:01 1 /x",
		"55d0c0a00000-55d0c0a01000 r--p 00000000 fe01 1 /x",
		"55d0c0a00000-55d0c0a01000 r--p 00000000 fe:0g 1 /x",
		"55d0c0a00000-55d0c0a01000 r--p 00000000 :01 1 /x",
		"55d0c0a00000-55d0c0a01000 r--p 00000000 fe:01 inode /x",
		"55d0c0a00000-55d0c0a01000",
	} {
		if _, err := parseMaps(nil, []byte(line+"\n"), false, nil); err == nil {
			t.Errorf("parseMaps(%q) succeeded", line)
		} else if !strings.Contains(err.Error(), "line 1") {
			t.Errorf("error %q does not name the line", err)
		}
	}
}

func FuzzMaps(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		maps, err := parseMaps(nil, data, false, nil)
		if err != nil {
			return
		}
		var exec []mapping
		for _, m := range maps {
			if m.end < m.start {
				t.Fatalf("mapping %+v ends before it starts", m)
			}
			m.class()
			if m.exec {
				exec = append(exec, m)
			}
		}
		// Only executable mappings, as the symbolizer reads them.
		got, err := parseMaps(nil, data, true, &interner{})
		if err != nil {
			t.Fatalf("all lines parse, the executable ones fail: %v", err)
		}
		if len(got) != len(exec) {
			t.Fatalf("%d executable mappings, want %d", len(got), len(exec))
		}
		for i := range got {
			if got[i] != exec[i] {
				t.Fatalf("executable mapping %d = %+v, want %+v", i, got[i], exec[i])
			}
		}
	})
}

// TestMapsDeviceMatchesStat checks that the device and inode read from
// the maps are those stat reports for the file, as openMapped compares
// them.
func TestMapsDeviceMatchesStat(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(exe)
	if err != nil {
		t.Fatal(err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	maps, err := readMapsFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range maps {
		if m.path == exe && m.exec {
			if m.dev != sys.Dev || m.inode != sys.Ino {
				t.Errorf("maps: device %#x inode %d; stat: %#x, %d", m.dev, m.inode, sys.Dev, sys.Ino)
			}
			return
		}
	}
	t.Fatalf("no executable mapping of %s", exe)
}

func TestProcessFind(t *testing.T) {
	p := &process{maps: []userMapping{
		{mapping: mapping{start: 0x1000, end: 0x2000, path: "/a"}},
		{mapping: mapping{start: 0x3000, end: 0x4000, path: "/b"}},
	}}
	for addr, want := range map[uint64]string{
		0: "", 0xfff: "", 0x1000: "/a", 0x1fff: "/a", 0x2000: "", 0x2fff: "",
		0x3000: "/b", 0x3fff: "/b", 0x4000: "", math.MaxUint64: "",
	} {
		got := ""
		if m := p.find(addr); m != nil {
			got = m.path
		}
		if got != want {
			t.Errorf("find(%#x) = %q, want %q", addr, got, want)
		}
	}
}

// TestProcessesShareMappedPaths checks that the mappings of two processes
// of one binary share one copy of each path.
func TestProcessesShareMappedPaths(t *testing.T) {
	a, b := startC(t), startC(t)
	s := New(nil, Options{})
	pa, pb := s.process(a.pid), s.process(b.pid)
	shared := 0
	for i := range pa.maps {
		for j := range pb.maps {
			if pa.maps[i].path != "" && pa.maps[i].path == pb.maps[j].path {
				if unsafe.StringData(pa.maps[i].path) != unsafe.StringData(pb.maps[j].path) {
					t.Errorf("path %q is copied for each process", pa.maps[i].path)
				}
				shared++
			}
		}
	}
	if shared == 0 {
		t.Fatalf("the fixtures share no mapped path: %+v and %+v", pa.maps, pb.maps)
	}
}

// TestRecentExecMappings: the symbolizer hands on its last read of a
// process's maps, the executable mappings in order with " (deleted)" cut
// and marked, only if that read started at or after the time asked; it
// reads nothing itself, and a process known only from an exit snapshot
// has no read to hand on.
func TestRecentExecMappings(t *testing.T) {
	root := t.TempDir()
	const pid = 4243
	maps := filepath.Join(root, "4243", "maps")
	if err := os.Mkdir(filepath.Dir(maps), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, maps, "00400000-00452000 r-xp 00000000 08:02 173521 /usr/bin/dbus-daemon\n"+
		"00651000-00652000 rw-p 00051000 08:02 173521 /usr/bin/dbus-daemon\n"+
		"7f2c56000000-7f2c56021000 rwxp 00000000 00:00 0 \n"+
		"7f2c5a000000-7f2c5a020000 r-xp 00002000 08:02 99 /usr/lib/libgone.so (deleted)\n"+
		"7ffe0c5f6000-7ffe0c5f8000 r-xp 00000000 00:00 0 [vdso]\n")
	s := New(nil, Options{ProcRoot: root})
	before := time.Now()
	if got, ok := s.RecentExecMappings(nil, pid, before); ok || len(got) != 0 {
		t.Fatalf("an unknown process: %+v, %v; want nothing", got, ok)
	}
	if st := s.Stats(); st.MapsReads != 0 || st.Processes != 0 {
		t.Fatalf("asking read the maps or tracked the process: %+v", st)
	}
	s.Observe(pid, "dbus-daemon")
	want := []ExecMapping{
		{Start: 0x400000, End: 0x452000, Dev: 0x802, Inode: 173521, Path: "/usr/bin/dbus-daemon"},
		{Start: 0x7f2c56000000, End: 0x7f2c56021000},
		{Start: 0x7f2c5a000000, End: 0x7f2c5a020000, Offset: 0x2000, Dev: 0x802, Inode: 99, Path: "/usr/lib/libgone.so", Deleted: true},
		{Start: 0x7ffe0c5f6000, End: 0x7ffe0c5f8000, Path: "[vdso]"},
	}
	dst := []ExecMapping{{Start: 1}} // appended to
	got, ok := s.RecentExecMappings(dst, pid, before)
	if !ok || !slices.Equal(got[1:], want) || got[0].Start != 1 {
		t.Fatalf("after a read since: %+v, %v; want %+v after the first", got, ok, want)
	}
	if got, ok := s.RecentExecMappings(nil, pid, time.Now()); ok || len(got) != 0 {
		t.Errorf("a read before the time asked: %+v, %v; want nothing", got, ok)
	}
	// A sample with an address in the executable: its mapping is used.
	s.Symbolize(pid, nil, []uint64{0x400123})
	want[0].Used = true
	if got, _ := s.RecentExecMappings(nil, pid, before); !slices.Equal(got, want) {
		t.Errorf("after a sample in %s: %+v, want %+v", want[0].Path, got, want)
	}
	if st := s.Stats(); st.MapsReads != 1 {
		t.Errorf("%d reads, want 1", st.MapsReads)
	}
	// An exit snapshot replaces the read: nothing from /proc to hand on.
	s.SetMaps(pid, []SnapshotMapping{{Start: 0x400000, End: 0x452000, Dev: 0x802, Inode: 173521}})
	if got, ok := s.RecentExecMappings(nil, pid, before); ok || len(got) != 0 {
		t.Errorf("after an exit snapshot: %+v, %v; want nothing", got, ok)
	}
}
