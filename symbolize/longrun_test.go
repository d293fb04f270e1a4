package symbolize

import (
	"debug/elf"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/heatscope/heatscope/sample"
)

// realLib is a real ELF shared library on this machine and where a
// process would map its code.
type realLib struct {
	path            string
	st              syscall.Stat_t
	offset, vaddr   uint64 // the executable PT_LOAD's page-aligned file offset and address
	size            uint64 // its length, page-aligned
	start, end, pc0 uint64 // where the fake processes map it, and an address in it
}

// realLibs returns up to n distinct shared libraries of this machine with
// an executable segment, each placed at its own address.
func realLibs(t *testing.T, n int) []realLib {
	paths, _ := filepath.Glob("/usr/lib/x86_64-linux-gnu/*.so.*")
	slices.Sort(paths)
	var libs []realLib
	for _, p := range paths {
		if len(libs) == n {
			break
		}
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() {
			continue // symlinks name the same files
		}
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		var lib realLib
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_LOAD && prog.Flags&elf.PF_X != 0 && prog.Memsz > 0x1000 {
				lib.offset, lib.vaddr = prog.Off&^0xfff, prog.Vaddr&^0xfff
				lib.size = (prog.Vaddr + prog.Memsz - lib.vaddr + 0xfff) &^ 0xfff
				break
			}
		}
		f.Close()
		if lib.size == 0 || syscall.Stat(p, &lib.st) != nil {
			continue
		}
		lib.path = p
		lib.start = 0x7f0000000000 + uint64(len(libs))<<32
		lib.end = lib.start + lib.size
		lib.pc0 = lib.start + lib.size/2
		libs = append(libs, lib)
	}
	return libs
}

// mapsLine is lib's executable mapping as /proc/PID/maps shows it.
func (l *realLib) mapsLine() string {
	dev := uint64(l.st.Dev)
	return fmt.Sprintf("%x-%x r-xp %08x %02x:%02x %d %s\n", l.start, l.end, l.offset, unix.Major(dev), unix.Minor(dev), l.st.Ino, l.path)
}

// snapshot is lib's executable mapping as an exit snapshot gives it.
func (l *realLib) snapshot() SnapshotMapping {
	return SnapshotMapping{Start: l.start, End: l.end, Offset: l.offset, Dev: uint64(l.st.Dev), Inode: l.st.Ino, CtimeNs: l.st.Ctim.Nano()}
}

// longrunProcesses is how many processes TestShortLivedProcessesBounded
// drives through the symbolizer: 50 000 in `make test`, a million with
//
//	go test ./symbolize -run TestShortLivedProcessesBounded -timeout 2h -args -longrun.processes=1000000
var longrunProcesses = flag.Int("longrun.processes", 50_000, "processes TestShortLivedProcessesBounded drives through the symbolizer")

// TestShortLivedProcessesBounded drives the symbolizer through many
// distinct processes (-longrun.processes; a million is what a node under
// churn sees in a few hours): one in 50
// is first seen alive (its /proc/PID/maps read from a procfs of real-format
// files naming real libraries of this machine), the others are known only
// from their exit snapshots (SetMaps), and every one is symbolized in a
// few of those libraries. Exited processes are forgotten as the recorder
// does (ForgetExited), and the binary cache is set small so that its
// bounds bite. Every 10 000 processes it checks that every cache stays
// within its configured bound, that no cached process keeps a symbol
// table the binary cache evicted, and at the end that the Go heap is where
// it was after the first fifth.
func TestShortLivedProcessesBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("50 000 processes take a minute or two; skipped with -short")
	}
	total := *longrunProcesses
	if total < 50_000 || total%50_000 != 0 {
		t.Fatalf("-longrun.processes=%d: want a multiple of 50 000", total)
	}
	const (
		maxProcs     = 4096
		maxBins      = 8
		maxBinBytes  = 4 << 20
		aliveEvery   = 50
		checkEvery   = 10_000
		forgetEvery  = 2_000
		heapBoundMiB = 8
	)
	libs := realLibs(t, 16)
	if len(libs) < 2*maxBins {
		t.Skipf("%d shared libraries with code in /usr/lib/x86_64-linux-gnu, want %d to overflow the binary cache", len(libs), 2*maxBins)
	}
	root := t.TempDir()
	s := New(nil, Options{ProcRoot: root, MaxProcesses: maxProcs, MaxBinaries: maxBins, MaxBinaryBytes: maxBinBytes})
	var (
		maxSeenProcs, maxSeenBins int
		maxSeenBytes              int64
		heapAtFifth, heapEnd      uint64
	)
	for i := range total {
		pid := uint32(100_000 + i) // distinct: never reused in the test's life
		// Three hot libraries, as libc and the loader are, and two that
		// change every few hundred processes: the working set fits the
		// binary cache for a while, then evicts from it.
		rest := len(libs) - 3
		picked := []*realLib{&libs[(i/7)%3], &libs[3+(i/500)%rest], &libs[3+(i/3001)%rest]}
		if i%aliveEvery == 0 {
			// Seen alive: its maps are read from "/proc".
			dir := filepath.Join(root, strconv.Itoa(int(pid)))
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			var maps string
			for _, l := range picked {
				maps += l.mapsLine()
			}
			if err := os.WriteFile(filepath.Join(dir, "maps"), []byte(maps), 0o644); err != nil {
				t.Fatal(err)
			}
			if !s.Observe(pid, "test") {
				t.Fatalf("pid %d: no executable mapping read from %s", pid, maps)
			}
			// A sample while it lives loads its libraries' symbols and
			// names their files for the snapshots that follow.
			symbolizeIn(t, s, pid, picked)
		}
		// The exit snapshot: the same mappings, by device and inode.
		var snap []SnapshotMapping
		for _, l := range picked {
			snap = append(snap, l.snapshot())
		}
		slices.SortFunc(snap, func(a, b SnapshotMapping) int { return int(a.Start>>32) - int(b.Start>>32) })
		snap = slices.CompactFunc(snap, func(a, b SnapshotMapping) bool { return a.Start == b.Start })
		s.SetMaps(pid, snap)
		if i%aliveEvery == 0 {
			os.RemoveAll(filepath.Join(root, strconv.Itoa(int(pid)))) // it exited
		}
		symbolizeIn(t, s, pid, picked) // its last samples, read after it exited
		if i%forgetEvery == forgetEvery/2 {
			s.ForgetExited(0)
		}
		if i%checkEvery != checkEvery-1 {
			continue
		}
		st := checkSymbolizerBounds(t, s, maxProcs, maxBins, maxBinBytes)
		maxSeenProcs, maxSeenBins, maxSeenBytes = max(maxSeenProcs, st.Processes), max(maxSeenBins, st.Binaries), max(maxSeenBytes, st.BinaryBytes)
		switch i + 1 {
		case total / 5:
			heapAtFifth = liveHeap()
		case total:
			heapEnd = liveHeap()
		}
	}
	st := s.Stats()
	t.Logf("%d processes (%d seen alive, the rest from exit snapshots), %d libraries: %d binary loads, %d hits, %d /proc maps reads, %d snapshots (%d naming files no /proc read named)",
		total, total/aliveEvery, len(libs), st.BinaryMisses, st.BinaryHits, st.MapsReads, st.Snapshots, st.SnapshotUnknownFiles)
	t.Logf("at most %d processes cached (bound %d), %d binaries (bound %d), %d bytes of symbol tables (bound %d); Go heap %.2f MB after %d processes, %.2f MB after %d",
		maxSeenProcs, maxProcs, maxSeenBins, maxBins, maxSeenBytes, maxBinBytes, float64(heapAtFifth)/(1<<20), total/5, float64(heapEnd)/(1<<20), total)
	if st.BinaryMisses <= uint64(maxBins) || st.Snapshots != uint64(total) || st.FramesResolved == 0 {
		t.Fatalf("the test did not exercise the caches: %d binary loads (bound %d), %d snapshots, %d frames resolved", st.BinaryMisses, maxBins, st.Snapshots, st.FramesResolved)
	}
	if heapEnd > heapAtFifth+heapBoundMiB<<20 {
		t.Fatalf("the Go heap grew from %.2f MB after %d processes to %.2f MB after %d", float64(heapAtFifth)/(1<<20), total/5, float64(heapEnd)/(1<<20), total)
	}
}

// symbolizeIn symbolizes a user stack of pid with an address in each of
// libs.
func symbolizeIn(t *testing.T, s *Symbolizer, pid uint32, libs []*realLib) {
	user := make([]uint64, 0, len(libs))
	for j, l := range libs {
		user = append(user, l.pc0+uint64(j*16))
	}
	if frames := s.Symbolize(pid, nil, user); len(frames) != len(user) {
		t.Fatalf("pid %d: %d frames for %d addresses", pid, len(frames), len(user))
	}
}

// checkSymbolizerBounds asserts every cache of s is within its bound,
// through Stats and the caches themselves.
func checkSymbolizerBounds(t *testing.T, s *Symbolizer, maxProcs, maxBins int, maxBinBytes int64) Stats {
	t.Helper()
	st := s.Stats()
	s.mu.Lock()
	procs, bins, ids, files := len(s.procs.items), len(s.bins.items), len(s.ids.items), len(s.files.items)
	orderP, orderB := s.procs.order.Len(), s.bins.order.Len()
	var counted int64
	for _, e := range s.bins.items {
		counted += e.Value.(*lruEntry[binKey, *binEntry]).val.bytes
	}
	binBytes := s.binBytes
	cached := map[*binaryFile]bool{}
	for _, e := range s.bins.items {
		if bin := e.Value.(*lruEntry[binKey, *binEntry]).val.bin.Load(); bin != nil {
			cached[bin] = true
		}
	}
	var cachedProcs []*process
	s.procs.each(func(_ uint32, p *process) { cachedProcs = append(cachedProcs, p) })
	s.mu.Unlock()
	// No cached process keeps a symbol table the binary cache let go:
	// the tables in memory are the cache's, within its bounds.
	for _, p := range cachedProcs {
		p.mu.Lock()
		for _, m := range p.maps {
			if m.bin == nil {
				continue
			}
			if bin := m.bin.bin.Load(); bin != nil && !cached[bin] {
				p.mu.Unlock()
				t.Fatalf("pid %d holds the symbol table of %s, which the binary cache evicted", p.pid, m.path)
			}
		}
		p.mu.Unlock()
	}
	s.paths.mu.Lock()
	paths := len(s.paths.strs)
	s.paths.mu.Unlock()
	switch {
	case st.Processes > maxProcs || procs != orderP || procs != st.Processes:
		t.Fatalf("process cache: %d (%d in its LRU list), Stats %d, bound %d", procs, orderP, st.Processes, maxProcs)
	case st.Binaries > maxBins || bins != orderB:
		t.Fatalf("binary cache: %d binaries (%d in its LRU list), bound %d", st.Binaries, orderB, maxBins)
	case binBytes != counted || st.BinaryBytes != binBytes:
		t.Fatalf("binary cache: counts %d bytes, holds %d, Stats %d", binBytes, counted, st.BinaryBytes)
	case st.BinaryBytes > maxBinBytes && st.Binaries > 1:
		t.Fatalf("binary cache: %d bytes in %d binaries, bound %d", st.BinaryBytes, st.Binaries, maxBinBytes)
	case ids > 4*maxBins || files > 4*maxBins:
		t.Fatalf("file identities: %d ids and %d files cached, bound %d each", ids, files, 4*maxBins)
	case paths > maxInterned:
		t.Fatalf("%d paths interned, bound %d", paths, maxInterned)
	}
	return st
}

// liveHeap is the Go heap's live bytes after two collections.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestEvictedSymbolTableIsFreed checks that once the binary cache evicts a
// binary, nothing the symbolizer handed out or kept keeps its symbol table
// in memory: not the frames of its stacks (kept by the caller and by the
// stack cache), not the processes that mapped it.
func TestEvictedSymbolTableIsFreed(t *testing.T) {
	libs := realLibs(t, 2)
	if len(libs) < 2 {
		t.Skipf("%d shared libraries with code in /usr/lib/x86_64-linux-gnu, want 2", len(libs))
	}
	root := t.TempDir()
	s := New(nil, Options{ProcRoot: root, MaxBinaries: 1})
	var kept [][]sample.Frame
	freed := make(chan struct{})
	for i := range libs {
		pid := uint32(1000 + i)
		dir := filepath.Join(root, strconv.Itoa(int(pid)))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "maps"), []byte(libs[i].mapsLine()), 0o644); err != nil {
			t.Fatal(err)
		}
		frames := s.Symbolize(pid, nil, []uint64{libs[i].pc0})
		if frames[0].Module != libs[i].path || strings.HasPrefix(frames[0].Function, "[") {
			t.Fatalf("%s: %+v, want a named frame", libs[i].path, frames[0])
		}
		kept = append(kept, frames)
		if i == 0 {
			s.mu.Lock()
			e, _ := s.bins.oldest()
			names := e.bin.Load().tab.names
			s.mu.Unlock()
			runtime.AddCleanup(unsafe.StringData(names), func(ch chan struct{}) { close(ch) }, freed)
		}
	}
	if st := s.Stats(); st.Binaries != 1 || st.Processes != 2 {
		t.Fatalf("%d binaries and %d processes cached, want the second binary only, and both processes", st.Binaries, st.Processes)
	}
	for range 10 {
		runtime.GC()
		select {
		case <-freed:
			if kept[0][0].Function == "" {
				t.Fatal("the first frame lost its name")
			}
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("the symbol table of %s, evicted, is still in memory: a frame or a process keeps it", libs[0].path)
}
