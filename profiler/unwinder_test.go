package profiler

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/heatscope/heatscope/bpf"
	"github.com/heatscope/heatscope/internal/bpftest"
	"github.com/heatscope/heatscope/unwind"
)

// TestFillRowsThroughMemory fills a table map as load does, through its
// memory, with more rows than fit a page, and reads every row back with
// the map's own lookup (what the BPF program's bpf_map_lookup_elem sees),
// as struct hs_row.
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
	m, err := ebpf.NewMap(&ebpf.MapSpec{
		Type: ebpf.Array, KeySize: 4, ValueSize: unwind.RowSize,
		MaxEntries: uint32(len(rows)), Flags: unix.BPF_F_INNER_MAP | unix.BPF_F_MMAPABLE,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := fillRows(m, rows); err != nil {
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
	tables, err := ebpf.NewMap(&ebpf.MapSpec{
		Type: ebpf.ArrayOfMaps, KeySize: 4, ValueSize: 4, MaxEntries: maxTables,
		InnerMap: &ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: unwind.RowSize, MaxEntries: 1, Flags: unix.BPF_F_INNER_MAP | unix.BPF_F_MMAPABLE},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer tables.Close()
	u := &unwinder{
		tables: tables, cache: unwind.Cache{Dir: t.TempDir()}, maxBytes: DefaultUnwindMaxBytes,
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
	// enough to be worth building (worthIt).
	queue := func(key, path string, pid uint32, cfi uint64, cached bool) {
		u.queue[key] = &buildJob{cfi: cfi, cached: cached, waiters: map[uint32]string{pid: path}, queued: start.Add(-time.Hour)}
	}
	// step builds at start+at and checks which tables are loaded.
	step := func(at time.Duration, want map[string]bool) {
		t.Helper()
		u.build(start.Add(at))
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
}

// TestTakePendingFallsBack: when the batch call on unwind_pending fails,
// takePending warns once, with the error, and takes the requests entry by
// entry, emptying the map, so that processes still get their tables. The
// failure is forced with a values buffer shorter than the keys' (cilium/ebpf
// refuses it before the system call): no kernel the table walk runs on
// (5.17 or later) fails the call itself for a hash map.
func TestTakePendingFallsBack(t *testing.T) {
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
		u.takePending(time.Now())
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
	maps, err := readExecMaps("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if f := strings.Fields(line); len(f) >= 5 && strings.Contains(f[1], "x") {
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
		if got := fmt.Sprintf("%08x-%08x", m.start, m.end); got != want[i] {
			t.Errorf("mapping %d is %s, want %s", i, got, want[i])
		}
		found = found || m.path == self
	}
	if !found {
		t.Errorf("no executable mapping of %s among %+v", self, maps)
	}
}
