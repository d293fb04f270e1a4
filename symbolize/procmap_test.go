package symbolize

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestProcmapQuerySize(t *testing.T) {
	if got := unsafe.Sizeof(procmapQuery{}); got != procmapQuerySize {
		t.Fatalf("procmapQuery is %d bytes, struct procmap_query %d", got, procmapQuerySize)
	}
}

// needProcmapQuery skips a test on a kernel without PROCMAP_QUERY.
func needProcmapQuery(t *testing.T) {
	t.Helper()
	procmapProbe.Do(probeProcmap)
	if procmapUnsupported.Load() {
		t.Skip("this kernel has no PROCMAP_QUERY (Linux 6.11): its maps are read from the file's text")
	}
}

// execMapsOfText returns the executable mappings of a maps file as the
// text gives them, [vsyscall] (no mapping of the process) left out.
func execMapsOfText(t *testing.T, path string) []mapping {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	maps, err := parseMaps(nil, data, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := maps[:0]
	for _, m := range maps {
		if m.path != "[vsyscall]" {
			out = append(out, m)
		}
	}
	return out
}

// TestQueryExecMapsMatchesText checks that the query finds the executable
// mappings the file's text lists, field by field: a binary whose file was
// deleted (and whose path has a space), anonymous executable memory, the
// vDSO and the libraries of this test binary.
func TestQueryExecMapsMatchesText(t *testing.T) {
	needProcmapQuery(t)
	// Anonymous executable memory in this process, as a JIT makes.
	mem, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_EXEC, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	// A process whose binary was deleted after it started.
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary to run:", err)
	}
	bin, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(t.TempDir(), "a dir", "sleep copy")
	if err := os.MkdirAll(filepath.Dir(copyPath), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(copyPath, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(copyPath, "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	child := "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/maps"
	// Wait for its exec and dynamic loading: its binary mapped, and libc.
	deadline := time.Now().Add(10 * time.Second)
	for {
		maps := execMapsOfText(t, child)
		if len(maps) >= 3 && maps[0].path == copyPath {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the child's executable mappings never showed its binary: %+v", maps)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := os.Remove(copyPath); err != nil {
		t.Fatal(err)
	}

	var name [unix.PathMax]byte
	var paths interner
	for _, tc := range []struct {
		path string
		want func(t *testing.T, got []mapping)
	}{
		{"/proc/self/maps", func(t *testing.T, got []mapping) {
			start := uint64(uintptr(unsafe.Pointer(&mem[0])))
			for _, m := range got {
				if m.start <= start && start < m.end {
					if m.path != "" || m.inode != 0 || m.dev != 0 || m.offset != 0 {
						t.Errorf("anonymous executable memory: %+v", m)
					}
					return
				}
			}
			t.Errorf("the anonymous executable mapping at %#x is not among %+v", start, got)
		}},
		{child, func(t *testing.T, got []mapping) {
			if !got[0].deleted || got[0].path != copyPath {
				t.Errorf("the deleted binary: %+v, want path %q, deleted", got[0], copyPath)
			}
		}},
	} {
		t.Run(tc.path, func(t *testing.T) {
			// This process's mappings may change between the two reads
			// (the Go runtime maps memory): try a few times.
			for try := 0; ; try++ {
				want := execMapsOfText(t, tc.path)
				got, err := queryExecMaps(nil, tc.path, name[:], &paths)
				if err != nil {
					t.Fatal(err)
				}
				if reflect.DeepEqual(got, want) {
					if !reflect.DeepEqual(execMapsOfText(t, tc.path), want) {
						continue // changed meanwhile
					}
					tc.want(t, got)
					return
				}
				if try == 5 {
					t.Fatalf("the query found\n%+v\nthe file lists\n%+v", got, want)
				}
			}
		})
	}
}

// TestReadExecMapsWithoutQuery checks that the symbolizer's read gives the
// same mappings with the query and from the text (kernels before 6.11),
// and that a file that does not take the query (a test's proc root) is
// read from its text.
func TestReadExecMapsWithoutQuery(t *testing.T) {
	needProcmapQuery(t)
	read := func(path string) []mapping {
		sc := &mapsScratch{}
		if err := readExecMaps(sc, path, nil); err != nil {
			t.Fatal(err)
		}
		return sc.maps
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep binary to run:", err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	path := "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/maps"
	var queried []mapping
	for try := 0; ; try++ {
		queried = read(path)
		if len(queried) >= 3 || try == 500 {
			break // its libraries are mapped
		}
		time.Sleep(10 * time.Millisecond)
	}
	procmapUnsupported.Store(true)
	text := read(path)
	procmapUnsupported.Store(false)
	text = slices.DeleteFunc(text, func(m mapping) bool { return m.path == "[vsyscall]" }) // the query's one difference
	if !reflect.DeepEqual(queried, execMapsOfText(t, path)) || !reflect.DeepEqual(text, execMapsOfText(t, path)) {
		t.Fatalf("queried\n%+v\nread from the text\n%+v\nthe file lists\n%+v", queried, text, execMapsOfText(t, path))
	}

	// A regular file answers ENOTTY: it is read as maps text.
	fake := filepath.Join(t.TempDir(), "maps")
	line := "55d0c0a00000-55d0c0a21000 r-xp 00002000 08:01 1234                       /usr/bin/true\n"
	if err := os.WriteFile(fake, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	want := []mapping{{start: 0x55d0c0a00000, end: 0x55d0c0a21000, offset: 0x2000, dev: unix.Mkdev(8, 1), inode: 1234, path: "/usr/bin/true", exec: true}}
	if got := read(fake); !reflect.DeepEqual(got, want) {
		t.Fatalf("a maps file that takes no query: %+v, want %+v", got, want)
	}
	if procmapUnsupported.Load() {
		t.Fatal("a file that takes no query turned the query off for /proc")
	}
}

// TestQueryExecMapsZombie checks that a process whose memory is gone has
// no executable mapping by query, as its empty file says, without error.
func TestQueryExecMapsZombie(t *testing.T) {
	needProcmapQuery(t)
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Skip("no true binary to run:", err)
	}
	defer cmd.Wait()
	pid := cmd.Process.Pid
	// A zombie until waited for: wait for its exit without reaping it.
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	path := "/proc/" + strconv.Itoa(pid) + "/maps"
	if text := execMapsOfText(t, path); len(text) != 0 {
		t.Fatalf("a zombie's maps list %+v", text)
	}
	var name [unix.PathMax]byte
	got, err := queryExecMaps(nil, path, name[:], nil)
	if err != nil || len(got) != 0 {
		t.Fatalf("a zombie's query: %+v, %v; want none, no error", got, err)
	}
	// And a process gone: the open fails, as the read's does.
	if _, err := queryExecMaps(nil, "/proc/0/maps", name[:], nil); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("no such process: %v, want not exist", err)
	}
}
