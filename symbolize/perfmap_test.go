package symbolize

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

func TestParsePerfMap(t *testing.T) {
	tab, err := parsePerfMap(strings.NewReader(`7f0010000000 40 jit_plain
0x7f0010000040 0x20 LazyCompile:*render /srv/app.js:12:3
7f0010000100 10 first_occupant
not a line
7f0010000200 zz bad_size
7f0010000300 10
7f0010000100 8 second_occupant
7F0010000400  0X10   padded name  
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr uint64
		name string // "" for a miss
	}{
		{0x7f0010000000, "jit_plain"},
		{0x7f001000003f, "jit_plain"},
		{0x7f0010000040, "LazyCompile:*render /srv/app.js:12:3"},
		{0x7f0010000060, ""},
		{0x7f0010000104, "second_occupant"},
		{0x7f0010000108, ""},
		{0x7f0010000200, ""},
		{0x7f0010000300, ""},
		{0x7f001000040f, "padded name"},
		{0x7f0010000410, ""},
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
}

// TestPerfMapNamesPlain checks that a perf map's names are stored whole,
// not front-coded: its JIT frames are looked up on every sample, with no
// cache of names in front, so a lookup must neither decode nor allocate.
func TestPerfMapNamesPlain(t *testing.T) {
	var b strings.Builder
	for i := range 40 {
		fmt.Fprintf(&b, "%x 10 LazyCompile:*handler%02d /srv/app.js:%d\n", 0x7f0010000000+i*0x10, i, i)
	}
	tab, err := parsePerfMap(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if tab.prefixed {
		t.Fatal("a perf map's names are front-coded")
	}
	addr := uint64(0x7f0010000000 + 37*0x10)
	want := "LazyCompile:*handler37 /srv/app.js:37"
	if i, ok := tab.lookup(addr); !ok || tab.name(i) != want {
		t.Fatalf("lookup(%#x) = %q, %v, want %q", addr, tab.name(i), ok, want)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if i, ok := tab.lookup(addr); ok {
			_ = tab.name(i)
		}
	})
	if allocs != 0 {
		t.Errorf("a perf map lookup allocates %.0f times, want 0", allocs)
	}
}

func TestPerfMapMissingFile(t *testing.T) {
	p := newPerfMap(t.TempDir() + "/perf-1.map")
	if name, ok := p.lookup(0x1000); ok {
		t.Errorf("lookup in a missing perf map found %q", name)
	}
}

func FuzzPerfMap(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		tab, err := parsePerfMap(bytes.NewReader(data))
		if err != nil {
			return
		}
		for i, s := range tab.syms {
			if i > 0 && s.addr <= tab.syms[i-1].addr {
				t.Fatalf("entry %d at %#x is not above the one before", i, s.addr)
			}
			if tab.name(i) == "" {
				t.Fatalf("entry %d has no name", i)
			}
			if j, ok := tab.lookup(s.addr); !ok || j != i {
				t.Fatalf("lookup(%#x) = %d, %v, want %d", s.addr, j, ok, i)
			}
		}
	})
}
