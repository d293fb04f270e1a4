package symbolize

import (
	"math"
	"testing"
)

func TestBuildSymtab(t *testing.T) {
	tab, _ := buildSymtab([]candidate{
		{addr: 0x3000, name: "last_unsized"},
		{addr: 0x1000, size: 0x10, name: "local_alias", rank: rankLocal},
		{addr: 0x1000, size: 0x10, name: "global", rank: rankGlobal},
		{addr: 0x1000, size: 0x10, name: "weak_alias", rank: rankWeak},
		{addr: 0x2000, name: "unsized"},
		{addr: 0x1800, size: 1 << 40, name: "huge"},
	})
	if tab.len() != 4 {
		t.Fatalf("len() = %d, want 4 (one per address)", tab.len())
	}
	for _, tc := range []struct {
		addr uint64
		name string
	}{
		{0xfff, ""},
		{0x1000, "global"},
		{0x100f, "global"},
		{0x1010, ""}, // past global's size
		{0x1fff, "huge"},
		{0x2000, "unsized"},
		{0x2fff, "unsized"}, // up to the next symbol
		{0x3000, "last_unsized"},
		{math.MaxUint64, "last_unsized"}, // the last unsized symbol is open-ended
	} {
		i, ok := tab.lookup(tc.addr)
		got := ""
		if ok {
			got = tab.name(i)
		}
		if got != tc.name {
			t.Errorf("lookup(%#x) = %q, want %q", tc.addr, got, tc.name)
		}
	}
	if size := tab.syms[1].size; size != math.MaxUint32 {
		t.Errorf("a size beyond 4 GiB is kept as %#x, want it clamped", size)
	}
}

func TestEmptySymtab(t *testing.T) {
	tab, _ := buildSymtab(nil)
	if _, ok := tab.lookup(0x1000); ok {
		t.Error("lookup in an empty table succeeded")
	}
}
