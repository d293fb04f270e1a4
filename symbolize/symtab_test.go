package symbolize

import (
	"debug/elf"
	"fmt"
	"math"
	"strings"
	"testing"
)

func TestBuildSymtab(t *testing.T) {
	tab := buildSymtab([]candidate{
		{addr: 0x3000, name: "last_unsized"},
		{addr: 0x1000, size: 0x10, name: "local_alias", bind: elf.STB_LOCAL},
		{addr: 0x1000, size: 0x10, name: "global", bind: elf.STB_GLOBAL},
		{addr: 0x1000, size: 0x10, name: "weak_alias", bind: elf.STB_WEAK},
		{addr: 0x2000, name: "unsized"},
		{addr: 0x1800, size: 1 << 40, name: "huge"},
	}, nil, true)
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
	tab := buildSymtab(nil, nil, true)
	if _, ok := tab.lookup(0x1000); ok {
		t.Error("lookup in an empty table succeeded")
	}
}

// TestAliasBeats checks perf's choose_best_symbol rule, one criterion at a
// time, each one deciding before the next.
func TestAliasBeats(t *testing.T) {
	const (
		local  = elf.STB_LOCAL
		global = elf.STB_GLOBAL
		weak   = elf.STB_WEAK
	)
	for _, tc := range []struct {
		why  string
		a, b alias // a is listed first
		want bool  // whether b beats a
	}{
		{"sized beats unsized", alias{"a", false, global}, alias{"b", true, weak}, true},
		{"unsized loses to sized", alias{"a", true, weak}, alias{"b", false, global}, false},
		{"non-weak beats weak", alias{"__write", true, weak}, alias{"__GI___libc_write", true, local}, true},
		{"weak loses to non-weak", alias{"__nanosleep", true, global}, alias{"nanosleep", true, weak}, false},
		{"global beats local", alias{"__do_sys_getpid", true, local}, alias{"__x64_sys_getpid", true, global}, true},
		{"local loses to global", alias{"read", true, global}, alias{"__libc_read", true, local}, false},
		{"GNU unique is neither weak nor global", alias{"u", true, elf.STB_LOOS}, alias{"g", true, global}, true},
		{"fewer leading underscores", alias{"__write", true, weak}, alias{"write", true, weak}, true},
		{"more leading underscores", alias{"malloc", true, global}, alias{"__libc_malloc", true, global}, false},
		{"longer name", alias{"free", true, global}, alias{"cfree", true, global}, true},
		{"shorter name", alias{"open64", true, weak}, alias{"open", true, weak}, false},
		{"a tie keeps the first", alias{"__ia32_sys_getpid", true, global}, alias{"__x64_sys_getpid", true, global}, false},
		{"a tie keeps the first, unsized", alias{"one", false, global}, alias{"two", false, global}, false},
	} {
		if got := tc.b.beats(tc.a); got != tc.want {
			t.Errorf("%s: %+v beats %+v = %v, want %v", tc.why, tc.b, tc.a, got, tc.want)
		}
	}
}

// TestBuildSymtabAliases checks which of several symbols at one address
// buildSymtab keeps, against what perf shows for the same symbols.
func TestBuildSymtabAliases(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cands []candidate // all at address 0x1000
		want  string
	}{
		{
			// glibc's .symtab (libc6-dbg): perf shows __GI___libc_write.
			name: "glibc write",
			cands: []candidate{
				{size: 157, name: "__GI___write", bind: elf.STB_LOCAL},
				{size: 157, name: "__GI_write", bind: elf.STB_LOCAL},
				{size: 157, name: "__GI___libc_write", bind: elf.STB_LOCAL},
				{size: 157, name: "__libc_write", bind: elf.STB_LOCAL},
				{size: 157, name: "__write", bind: elf.STB_WEAK},
				{size: 157, name: "write", bind: elf.STB_WEAK},
			},
			want: "__GI___libc_write",
		},
		{
			name: "glibc free in .dynsym",
			cands: []candidate{
				{size: 257, name: "__libc_free", bind: elf.STB_GLOBAL},
				{size: 257, name: "cfree", bind: elf.STB_GLOBAL},
				{size: 257, name: "free", bind: elf.STB_GLOBAL},
			},
			want: "cfree",
		},
		{
			// perf sizes an unsized symbol up to the next one, so the last
			// of unsized aliases is sized and wins.
			name: "unsized aliases",
			cands: []candidate{
				{name: "global_first", bind: elf.STB_GLOBAL},
				{name: "_weak_last", bind: elf.STB_WEAK},
			},
			want: "_weak_last",
		},
		{
			name: "a sized symbol beats an unsized one listed before",
			cands: []candidate{
				{name: "unsized", bind: elf.STB_GLOBAL},
				{size: 8, name: "__sized", bind: elf.STB_WEAK},
			},
			want: "__sized",
		},
		{
			name: "the last unsized alias counts as sized",
			cands: []candidate{
				{size: 8, name: "__sized", bind: elf.STB_WEAK},
				{name: "unsized", bind: elf.STB_GLOBAL},
			},
			want: "unsized",
		},
		{
			name: "the rank decides first",
			cands: []candidate{
				{size: 8, name: "elf_name", bind: elf.STB_GLOBAL},
				{size: 8, name: "main.goName", rank: rankGo},
			},
			want: "main.goName",
		},
	} {
		for i := range tc.cands {
			tc.cands[i].addr = 0x1000
		}
		// Another symbol after them, so that the last alias is not the
		// last symbol of the table.
		tab := buildSymtab(append(tc.cands, candidate{addr: 0x2000, size: 1, name: "next"}), nil, true)
		if i, ok := tab.lookup(0x1000); !ok || tab.name(i) != tc.want {
			t.Errorf("%s: kept %q, want %q", tc.name, tab.name(i), tc.want)
		}
	}
}

// TestSymtabFrontCoded checks that every name of a front-coded table
// decodes to the one it was built from, across runs, shared prefixes
// longer than a length byte holds, names that share nothing and empty
// names; and that it saves what it should on a real Go binary's names.
func TestSymtabFrontCoded(t *testing.T) {
	long := strings.Repeat("github.com/example/a/very/long/package/path/", 8) // 352 bytes
	var cands []candidate
	var want []string
	for i := range 100 {
		var name string
		switch {
		case i%7 == 3:
			name = fmt.Sprintf("x%d", i) // shares nothing with its neighbour
		case i%16 >= 5 && i%16 <= 8:
			name = long + fmt.Sprintf("f%03d", i) // neighbours sharing over 255 bytes
		case i%13 == 0:
			name = ""
		default:
			name = fmt.Sprintf("github.com/heatscope/heatscope/store.(*Writer).method%03d", i)
		}
		cands = append(cands, candidate{addr: uint64(0x1000 + 16*i), size: 16, name: name})
		want = append(want, name)
	}
	tab := buildSymtab(cands, nil, true)
	if !tab.prefixed || tab.len() != len(want) {
		t.Fatalf("prefixed %v, %d symbols, want a front-coded table of %d", tab.prefixed, tab.len(), len(want))
	}
	for i, w := range want {
		if got := tab.name(i); got != w {
			t.Errorf("name %d = %q, want %q", i, got, w)
		}
	}

	bin, err := loadBinary(openTestBinary(t), "", "")
	if err != nil {
		t.Fatal(err)
	}
	plain := 0
	for i := range bin.tab.len() {
		plain += len(bin.tab.name(i))
	}
	t.Logf("this test binary's %d names: %d bytes front-coded, %d plain", bin.tab.len(), len(bin.tab.names), plain)
	if len(bin.tab.names)*10 >= plain*6 {
		t.Errorf("front-coded names take %d bytes, %d plain: want less than 60%%", len(bin.tab.names), plain)
	}
}
