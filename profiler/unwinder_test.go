package profiler

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/heatscope/heatscope/bpf"
	"github.com/heatscope/heatscope/internal/bpftest"
	"github.com/heatscope/heatscope/symbolize"
	"github.com/heatscope/heatscope/unwind"
)

// TestFillRowsThroughMemory fills a table map as load does, through its
// memory, with more rows than fit a page and their index, and reads every
// row and index entry back with the map's own lookup (what the BPF
// program's bpf_map_lookup_elem sees), as struct hs_row and struct
// hs_bucket (three uint32).
func TestFillRowsThroughMemory(t *testing.T) {
	bpftest.Require(t)
	if got := binary.Size(bpf.ProfileHsRow{}); got != unwind.RowSize {
		t.Fatalf("struct hs_row is %d bytes, unwind.RowSize %d", got, unwind.RowSize)
	}
	rows := make([]unwind.Row, 1000) // 16 000 bytes: four pages
	for i := range rows {
		rows[i] = unwind.Row{PC: uint64(0x1000 + 16*i), CFA: unwind.CFARSP, CFAOffset: int32(8 * (i%7 + 1)), RBP: unwind.RBPAtCFA, RBPOffset: -int32(16 + i%5*8)}
	}
	rows[999] = unwind.Row{PC: 0xfffffff0, CFA: unwind.CFAPLT, CFAOffset: 8, Threshold: 11}
	index := unwind.BuildIndex(rows)
	slots := unwind.IndexSlots(rows)
	if slots == 0 {
		t.Fatal("no index for 1000 rows")
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{
		Type: ebpf.Array, KeySize: 4, ValueSize: unwind.RowSize,
		MaxEntries: uint32(len(rows) + slots), Flags: unix.BPF_F_INNER_MAP | unix.BPF_F_MMAPABLE,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := fillRows(m, rows, index); err != nil {
		t.Fatal(err)
	}
	for i, r := range rows {
		var got bpf.ProfileHsRow
		if err := m.Lookup(uint32(i), &got); err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
		want := bpf.ProfileHsRow{Pc: uint32(r.PC), CfaOff: int16(r.CFAOffset), RbpOff: int16(r.RBPOffset), Cfa: uint8(r.CFA), Rbp: uint8(r.RBP), Arg: r.Threshold}
		if got != want {
			t.Fatalf("row %d reads back as %+v, want %+v", i, got, want)
		}
	}
	last := len(index.First) - 1
	for j := range slots {
		var got [3]uint32
		if err := m.Lookup(uint32(len(rows)+j), &got); err != nil {
			t.Fatalf("index entry %d: %v", j, err)
		}
		for k, v := range got {
			if want := index.First[min(2*j+k, last)]; v != want {
				t.Fatalf("index entry %d word %d reads back as %d, want %d", j, k, v, want)
			}
		}
	}
}

// TestBuildBudget: the worker starts with a full credit of buildBurst,
// spends it on estimates, refills it at buildRate, and lets a table
// estimated beyond buildBurst go only on a full credit, which it empties
// (the credit never goes below zero).
func TestBuildBudget(t *testing.T) {
	u := &unwinder{}
	now := time.Now()
	steps := []struct {
		after time.Duration // since the previous step
		est   time.Duration
		want  bool
	}{
		{0, 300 * time.Millisecond, true},                // full: 1 s
		{0, 800 * time.Millisecond, false},               // 700 ms left
		{20 * time.Second, 800 * time.Millisecond, true}, // 700 + 20 s × 0.5%
		{0, 2 * time.Second, false},                      // 0 ms left
		{199 * time.Second, 2 * time.Second, false},      // 995 ms: not full
		{time.Second, 2 * time.Second, true},             // full again
		{10 * time.Second, time.Millisecond, true},       // 0 + 50 ms
		{0, 50 * time.Millisecond, false},                // 49 ms left
	}
	for i, st := range steps {
		now = now.Add(st.after)
		got := u.afford(st.est, now)
		if got != st.want {
			t.Fatalf("step %d: afford(%v) with a credit of %v = %v, want %v", i, st.est, u.credit, got, st.want)
		}
		if got {
			u.charge(st.est, now)
		}
	}
}

// TestBuildBudgetAfterHugeTable builds tables through build, into a real
// unwind_tables map. A table estimated far beyond buildBurst (50 MB of
// CFI: 5 s) takes at most the whole credit: after it, a table in the cache
// loads at once (it is not charged, and overtakes an uncached one waiting
// for the credit), and one of libc's size (150 KB: 15 ms) within 3 s, its
// estimate at buildRate. Charging the whole estimate left the credit at
// -4 s, which held up every table for about 1000 s. A table whose
// processes are all gone before it is built costs nothing.
func TestBuildBudgetAfterHugeTable(t *testing.T) {
	bpftest.Require(t)
	spec, err := bpf.LoadProfile()
	if err != nil {
		t.Fatal(err)
	}
	tablesSpec := spec.Maps[bpf.ProfileMapUnwindTables]
	tableSpec := tableMapSpec(tablesSpec)
	tables, err := ebpf.NewMap(tablesSpec)
	if err != nil {
		t.Fatal(err)
	}
	defer tables.Close()
	u := &unwinder{
		tables: tables, tableSpec: tableSpec, cache: unwind.Cache{Dir: t.TempDir()}, maxBytes: DefaultUnwindMaxBytes,
		log: slog.New(slog.DiscardHandler), periodNs: func() int64 { return int64(time.Second) / 99 },
		loaded: map[string]*loadedTable{}, failed: map[string]bool{}, deferred: map[string]time.Time{},
		procList: map[uint32]*procState{1: {complete: true}, 2: {complete: true}}, queue: map[string]*buildJob{},
		heat: map[uint32]uint64{1: 1, 2: 1 << 30},
	}
	defer func() {
		for _, lt := range u.loaded {
			_ = tables.Delete(lt.id)
		}
	}()
	if _, _, err := u.cache.Load("/bin/ls"); err != nil { // in the cache from now on
		t.Fatal(err)
	}
	start := time.Now()
	// queue queues a table for process pid (its path), waited for long
	// enough, by a process that kept running, to be worth building
	// (worthIt).
	queue := func(key, path string, pid uint32, cfi uint64, cached bool) {
		u.queue[key] = &buildJob{cfi: cfi, cached: cached, waiters: map[uint32]string{pid: path}, queued: start.Add(-time.Hour), waited: 1 << 30, later: 1 << 30}
	}
	// step builds at start+at and checks which tables are loaded.
	step := func(at time.Duration, want map[string]bool) {
		t.Helper()
		u.state.Lock() // the worker's, released while it loads a table
		u.build(start.Add(at))
		u.state.Unlock()
		for k, w := range want {
			if got := u.loaded[k] != nil; got != w {
				t.Fatalf("at %v: table %s loaded %v, want %v (credit %v, queued %d)", at, k, got, w, u.credit, len(u.queue))
			}
		}
	}
	queue("huge", "/bin/true", 1, 50<<20, false)
	step(0, map[string]bool{"huge": true})
	if u.credit != 0 {
		t.Fatalf("after a table estimated at %v the credit is %v, want 0", time.Duration(50<<20*compileNsPerByte), u.credit)
	}
	queue("cached", "/bin/ls", 1, 10<<20, true)
	queue("small", "/bin/cat", 1, 150_000, false)
	step(time.Millisecond, map[string]bool{"cached": true, "small": false})
	step(2*time.Second, map[string]bool{"small": false}) // 10 ms of credit
	step(3*time.Second+time.Millisecond, map[string]bool{"small": true})

	queue("gone", "/nonexistent/bin/true", 1, 150_000, false)
	u.refill(start.Add(20 * time.Second))
	credit := u.credit
	step(20*time.Second, map[string]bool{"gone": false})
	if u.credit != credit || len(u.queue) != 0 {
		t.Fatalf("a table whose processes are gone: the credit went from %v to %v, %d tables queued, want it unchanged and none", credit, u.credit, len(u.queue))
	}

	// An uncached table waiting for a full credit, first in order (its
	// process is the hottest), holds up uncached ones, not cached ones.
	queue("huge2", "/bin/true", 2, 50<<20, false)
	queue("cached2", "/bin/ls", 1, 10<<20, true)
	queue("small2", "/bin/cat", 1, 150_000, false)
	step(21*time.Second, map[string]bool{"huge2": false, "cached2": true, "small2": false})

	// A table no waiting process's stacks passed through stays queued,
	// however long it waited and whatever the credit; once one's have,
	// it goes at once.
	clear(u.queue)
	queue("unused", "/bin/cat", 1, 150_000, false)
	u.queue["unused"].unusedBy = map[uint32]bool{1: true}
	step(300*time.Second, map[string]bool{"unused": false})
	delete(u.queue["unused"].unusedBy, 1)
	step(300*time.Second+time.Millisecond, map[string]bool{"unused": true})
}

// TestTakeFallsBack: when the batch call on unwind_pending fails, take
// warns once, with the error, and takes the requests entry by
// entry, emptying the map, so that processes still get their tables. The
// failure is forced with a values buffer shorter than the keys' (cilium/ebpf
// refuses it before the system call): no kernel the table walk runs on
// (5.17 or later) fails the call itself for a hash map.
func TestTakeFallsBack(t *testing.T) {
	bpftest.Require(t)
	pending, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: maxPending})
	if err != nil {
		t.Fatal(err)
	}
	defer pending.Close()
	var logs bytes.Buffer
	u := &unwinder{
		pending: pending, log: slog.New(slog.NewTextHandler(&logs, nil)),
		asks: map[uint32]ask{}, pendKeys: make([]uint32, maxPending), pendVals: make([]uint64, 1),
	}
	for round := range 3 {
		want := map[uint32]uint64{}
		for i := range 3 {
			pid, mm := uint32(100*round+i+1), uint64(0x1000*(round+i+1))
			if err := pending.Put(pid, mm); err != nil {
				t.Fatal(err)
			}
			want[pid] = mm
		}
		u.take(false)
		u.takeAsks(time.Now())
		for pid, mm := range want {
			if a, ok := u.asks[pid]; !ok || a.mm != mm {
				t.Errorf("round %d: process %d asked for mm %#x; asks hold %+v (present %v)", round, pid, mm, a, ok)
			}
		}
		var key uint32
		if err := pending.NextKey(nil, &key); !errors.Is(err, ebpf.ErrKeyNotExist) {
			t.Errorf("round %d: unwind_pending still holds process %d (%v), want it empty", round, key, err)
		}
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 || !strings.Contains(logs.String(), "same length") {
		t.Errorf("%d warnings, want 1 with the batch call's error:\n%s", n, logs.String())
	}
}

// TestReadExecMaps reads this process's executable mappings and checks
// them against its /proc/self/maps lines whose permissions have x: the
// test binary's text and the vdso at least.
func TestReadExecMaps(t *testing.T) {
	maps, err := symbolize.ReadExecMappings("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		// [vsyscall], x86-64's legacy page, is no mapping of the process:
		// the kernel's query (symbolize, PROCMAP_QUERY) does not list it.
		if f := strings.Fields(line); len(f) >= 5 && strings.Contains(f[1], "x") && (len(f) < 6 || f[5] != "[vsyscall]") {
			want = append(want, f[0])
		}
	}
	if len(maps) != len(want) || len(want) < 2 {
		t.Fatalf("%d executable mappings read, want %d of /proc/self/maps (at least 2):\n%s", len(maps), len(want), data)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for i, m := range maps {
		if got := fmt.Sprintf("%08x-%08x", m.Start, m.End); got != want[i] {
			t.Errorf("mapping %d is %s, want %s", i, got, want[i])
		}
		found = found || m.Path == self
	}
	if !found {
		t.Errorf("no executable mapping of %s among %+v", self, maps)
	}
}

// TestProcessTakesRecentMaps: the unwinder writes a process's entry from
// the mappings another reader read (Config.RecentMaps) when that read
// started after the request was first taken, and after the latest one
// for an image it already knows (a dlopen); otherwise it reads
// /proc/PID/maps itself. The entries are checked in a real unwind_procs
// map.
func TestProcessTakesRecentMaps(t *testing.T) {
	bpftest.Require(t)
	procs := newProcsMap(t, 16)
	own, err := symbolize.ReadExecMappings("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	// The other reader's mappings: anonymous, so that no table is
	// looked for, and unlike this process's.
	theirs := []symbolize.ExecMapping{{Start: 0x10000, End: 0x20000}, {Start: 0x30000, End: 0x38000}}
	var readAt time.Time // when the other reader read them
	var asked []time.Time
	u := &unwinder{
		procs: procs, log: slog.New(slog.DiscardHandler), procRoot: "/proc",
		procList: map[uint32]*procState{}, files: map[fileKey]*mappedFile{},
		recentMaps: func(dst []symbolize.ExecMapping, pid uint32, since time.Time) ([]symbolize.ExecMapping, bool) {
			if !since.IsZero() { // not takeUse's look at any earlier read
				asked = append(asked, since)
			}
			if readAt.Before(since) {
				return dst, false
			}
			return append(dst, theirs...), true
		},
	}
	pid := uint32(os.Getpid())
	entry := func() []symbolize.ExecMapping {
		t.Helper()
		var e bpf.ProfileHsProc
		if err := procs.Lookup(pid, &e); err != nil {
			t.Fatal(err)
		}
		var got []symbolize.ExecMapping
		for _, m := range e.M[:e.Count] {
			got = append(got, symbolize.ExecMapping{Start: m.Start, End: m.End})
		}
		return got
	}
	starts := func(ms []symbolize.ExecMapping) []uint64 {
		var v []uint64
		for _, m := range ms {
			v = append(v, m.Start)
		}
		return v
	}
	t0 := time.Now()
	step := func(name string, a ask, read time.Time, wantShared bool, wantSince time.Time) {
		t.Helper()
		readAt, asked = read, nil
		before := u.stats
		if err := u.process(pid, a, t0); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(asked) != 1 || !asked[0].Equal(wantSince) {
			t.Errorf("%s: the other reader was asked for a read since %v, want one since %v", name, asked, wantSince)
		}
		want := own
		if wantShared {
			want = theirs
		}
		if got := entry(); !slices.Equal(starts(got), starts(want)) {
			t.Errorf("%s: the entry maps %x, want %x", name, starts(got), starts(want))
		}
		if u.stats.MapsReads != before.MapsReads+1 || u.stats.MapsShared-before.MapsShared != map[bool]uint64{false: 0, true: 1}[wantShared] {
			t.Errorf("%s: maps reads %d→%d, shared %d→%d", name, before.MapsReads, u.stats.MapsReads, before.MapsShared, u.stats.MapsShared)
		}
	}
	first, later := t0.Add(-time.Second), t0.Add(-100*time.Millisecond)
	// A new process: any read since its first request will do.
	step("new, read after the request", ask{mm: 1, since: first, last: later}, first.Add(time.Millisecond), true, first)
	// The same image asks again (a pc in no mapping): the read must
	// follow the latest request.
	step("known, read before the latest request", ask{mm: 1, since: first, last: later}, first.Add(time.Millisecond), false, later)
	step("known, read after the latest request", ask{mm: 1, since: first, last: later}, later, true, later)
	// An exec: a new image, whose first request bounds the read.
	step("exec, read before the request", ask{mm: 2, since: later, last: later}, first, false, later)
}

// TestTakeAsksWaitsForDrain: a request the ring reader took before a
// drain reaches the worker once that drain is over (the symbolizer has
// then read the mappings of the new processes among its records), or a
// selfPoll after it was taken; one the worker took itself at once.
func TestTakeAsksWaitsForDrain(t *testing.T) {
	bpftest.Require(t)
	pending, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: maxPending})
	if err != nil {
		t.Fatal(err)
	}
	defer pending.Close()
	u := &unwinder{
		pending: pending, log: slog.New(slog.DiscardHandler),
		asks: map[uint32]ask{}, pendKeys: make([]uint32, maxPending), pendVals: make([]uint64, maxPending),
	}
	put := func(pid uint32) {
		t.Helper()
		if err := pending.Put(pid, uint64(0x1000)); err != nil {
			t.Fatal(err)
		}
	}
	has := func(pid uint32) bool { _, ok := u.asks[pid]; return ok }
	put(1)
	u.take(true) // the reader, before its drain
	u.takeAsks(time.Now())
	if has(1) {
		t.Fatal("a request reached the worker while its drain went on")
	}
	u.drained()
	u.takeAsks(time.Now())
	if !has(1) {
		t.Fatal("a request did not reach the worker after its drain")
	}
	// A drain held up: the request goes after a selfPoll.
	put(2)
	u.take(true)
	u.takeAsks(time.Now())
	if has(2) {
		t.Fatal("a request reached the worker while its drain went on")
	}
	u.takeAsks(time.Now().Add(selfPoll))
	if !has(2) {
		t.Fatal("a request of a drain held up for a selfPoll did not reach the worker")
	}
	// The reader held up before taking: the worker takes, and the
	// request is its own at once.
	put(3)
	u.takeAsks(time.Now().Add(selfPoll))
	if !has(3) {
		t.Fatal("the worker did not take a request the reader left for half a selfPoll")
	}
	if a := u.asks[3]; a.mm != 0x1000 || a.since.IsZero() || !a.since.Equal(a.last) {
		t.Errorf("request %+v, want mm 0x1000 first and last taken at once", a)
	}
}

// newProcsMap makes an unwind_procs map of n entries for a test.
func newProcsMap(t testing.TB, n uint32) *ebpf.Map {
	t.Helper()
	procs, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: uint32(binary.Size(bpf.ProfileHsProc{})), MaxEntries: n})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { procs.Close() })
	return procs
}

// sleepWithLibc starts a sleep(1) for the test's life and returns its pid
// and executable mappings once it has exec'd and mapped libc.
func sleepWithLibc(t *testing.T) (uint32, []symbolize.ExecMapping) {
	t.Helper()
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleep.Process.Kill(); sleep.Wait() })
	pid := uint32(sleep.Process.Pid)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		maps, err := symbolize.ReadExecMappings(fmt.Sprintf("/proc/%d/maps", pid))
		if err == nil && slices.ContainsFunc(maps, func(m symbolize.ExecMapping) bool { return strings.Contains(m.Path, "/libc.so") }) {
			return pid, maps
		}
	}
	t.Fatalf("sleep (pid %d) did not map libc in 5 s", pid)
	return 0, nil
}

// TestOwnProcessGetsNoTables: the agent's own process gets an entry whose
// mappings have no table (its stacks are walked with frame pointers), and
// no table is queued for it; any other process mapping the same files
// gets their tables queued. A sleep(1) stands for the agent (the test
// binary has no CFI: go test links it without DWARF).
func TestOwnProcessGetsNoTables(t *testing.T) {
	bpftest.Require(t)
	procs := newProcsMap(t, 4)
	pid, maps := sleepWithLibc(t)
	u := &unwinder{
		procs: procs, log: slog.New(slog.DiscardHandler), procRoot: "/proc", self: pid,
		procList: map[uint32]*procState{}, files: map[fileKey]*mappedFile{}, loaded: map[string]*loadedTable{},
		failed: map[string]bool{}, deferred: map[string]time.Time{}, queue: map[string]*buildJob{}, heat: map[uint32]uint64{},
	}
	for _, self := range []bool{true, false} {
		if !self {
			u.self = 0 // as if another process mapped the same files
		}
		if err := u.process(pid, ask{mm: 1, since: time.Now()}, time.Now()); err != nil {
			t.Fatal(err)
		}
		var e bpf.ProfileHsProc
		if err := procs.Lookup(pid, &e); err != nil {
			t.Fatal(err)
		}
		if self && len(u.queue) > 0 {
			t.Errorf("the agent's own process: %d tables queued, want none", len(u.queue))
		}
		if !self && len(u.queue) == 0 {
			t.Errorf("another process: no table queued (the test shows nothing); mappings %+v", maps)
		}
		for _, m := range e.M[:e.Count] {
			if self && m.Table != noTable {
				t.Errorf("the agent's own mapping %#x-%#x has table %d", m.Start, m.End, m.Table)
			}
		}
	}
}

// TestEntryGenerations: every unwind_procs entry written, of the same
// process or another, has a generation of its own, from 1 (0 marks an
// empty slot of the BPF walk's cache, walk_cache, whose rows are kept
// under the entry's generation): an entry rewritten after an exec, a
// dlopen or an eviction must not find the rows cached for the old one.
func TestEntryGenerations(t *testing.T) {
	bpftest.Require(t)
	procs := newProcsMap(t, 4)
	u := &unwinder{procs: procs}
	seen := map[uint64]bool{}
	for i, pid := range []uint32{7, 7, 8, 7} {
		if err := u.writeEntry(pid, &procState{mm: 0x1000}, time.Now()); err != nil {
			t.Fatal(err)
		}
		var got bpf.ProfileHsProc
		if err := procs.Lookup(pid, &got); err != nil {
			t.Fatal(err)
		}
		if got.Gen == 0 || seen[got.Gen] {
			t.Fatalf("write %d (process %d): generation %d, want a new one above 0 (seen %v)", i, pid, got.Gen, seen)
		}
		seen[got.Gen] = true
	}
}

// TestTablesOnlyForUsedMappings: with mappings that say which ones the
// process's stacks passed through (symbolize.ExecMapping.Used, the symbolizer's),
// only those get their tables queued; a table already loaded serves a
// mapping of its file anyway; and once a stack passes through another
// (checkUse, at the process's next sample) its table is queued too. A
// sleep(1) stands for the process: its executable is used, libc and the
// dynamic loader are not, at first.
func TestTablesOnlyForUsedMappings(t *testing.T) {
	bpftest.Require(t)
	procs := newProcsMap(t, 4)
	pid, maps := sleepWithLibc(t)
	exe, libc := -1, -1
	for i, m := range maps {
		switch {
		case strings.HasSuffix(m.Path, "/sleep"):
			exe = i
		case strings.Contains(m.Path, "/libc.so"):
			libc = i
		}
	}
	if exe < 0 || libc < 0 {
		t.Fatalf("no sleep and libc among the mappings %+v", maps)
	}
	maps[exe].Used = true
	u := &unwinder{
		procs: procs, log: slog.New(slog.DiscardHandler), procRoot: "/proc",
		procList: map[uint32]*procState{}, files: map[fileKey]*mappedFile{}, loaded: map[string]*loadedTable{},
		failed: map[string]bool{}, deferred: map[string]time.Time{}, queue: map[string]*buildJob{}, heat: map[uint32]uint64{},
		recentMaps: func(dst []symbolize.ExecMapping, _ uint32, _ time.Time) ([]symbolize.ExecMapping, bool) {
			return append(dst, maps...), true
		},
	}
	// waiting lists the tables queued to be built for the process:
	// those of mappings its stacks passed through.
	waiting := func() []string {
		var paths []string
		for _, job := range u.queue {
			if p, ok := job.waiters[pid]; ok && !job.unusedBy[pid] {
				paths = append(paths, p[strings.LastIndexByte(p, '/')+1:])
			}
		}
		slices.Sort(paths)
		return paths
	}
	if err := u.process(pid, ask{mm: 1, since: time.Now()}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := waiting(); len(got) != 1 || got[0] != "sleep" {
		t.Fatalf("tables queued for %v, want sleep's alone", got)
	}
	// Nothing new in the stacks: nothing more.
	if err := u.checkUse(pid, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := waiting(); len(got) != 1 {
		t.Fatalf("tables queued for %v after a sample through the same mappings, want sleep's alone", got)
	}
	// A stack through libc.
	maps[libc].Used = true
	if err := u.checkUse(pid, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := waiting(); len(got) != 2 || !strings.HasPrefix(got[0], "libc") || got[1] != "sleep" {
		t.Fatalf("tables queued for %v after a sample through libc, want libc's and sleep's", got)
	}
	if !u.procList[pid].unused {
		t.Error("the dynamic loader's mapping, which no stack passed through, is not left out")
	}
	// The loader's table loaded (for another process): this one's
	// entry uses it, unused as it is.
	ld := slices.IndexFunc(maps, func(m symbolize.ExecMapping) bool { return strings.Contains(m.Path, "/ld-linux") })
	if ld < 0 {
		t.Fatalf("no dynamic loader among %+v", maps)
	}
	f, err := elf.Open(maps[ld].Path)
	if err != nil {
		t.Fatal(err)
	}
	key := "build-id:" + unwind.BuildID(f)
	f.Close()
	u.loaded[key] = &loadedTable{id: 7, rows: 100, key: key}
	if err := u.writeEntry(pid, u.procList[pid], time.Now()); err != nil {
		t.Fatal(err)
	}
	var e bpf.ProfileHsProc
	if err := procs.Lookup(pid, &e); err != nil {
		t.Fatal(err)
	}
	if m := e.M[ld]; m.Start != maps[ld].Start || m.Table != 7 {
		t.Errorf("the loader's mapping in the entry: %+v, want table 7", m)
	}
	if got := waiting(); slices.ContainsFunc(got, func(p string) bool { return strings.HasPrefix(p, "ld-linux") }) {
		t.Errorf("tables queued for %v: the loader's is loaded", got)
	}
}
