package profiler

import (
	"encoding/binary"
	"fmt"
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
// estimated beyond buildBurst go only on a full credit.
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
		{10 * time.Second, time.Millisecond, false},      // -1 s + 50 ms
	}
	for i, st := range steps {
		now = now.Add(st.after)
		got := u.afford(st.est, now)
		if got != st.want {
			t.Fatalf("step %d: afford(%v) with a credit of %v = %v, want %v", i, st.est, u.credit, got, st.want)
		}
		if got {
			u.credit -= st.est
		}
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
