package unwind

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/heatscope/heatscope/internal/fixture"
)

// chainSource is the C fixture: a three-deep chain under main, built
// without frame pointers, with a frame large enough for a 16-bit offset
// and a libc call in the middle.
const chainSource = `#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) long leaf_work(long n) { volatile long s = 0; for (long i = 0; i < n; i++) s += i * i; return s; }
__attribute__((noinline)) long middle_layer(long n) { char buf[300]; snprintf(buf, sizeof buf, "%ld", n); return leaf_work(n + atoi(buf)) + 1; }
__attribute__((noinline)) long outer_layer(long n) { return middle_layer(n) * 2; }
int main(int argc, char **argv) { long t = 0; for (int i = 0; i < 3; i++) t += outer_layer(argc * 1000); printf("%ld\n", t); return 0; }
`

func compilePath(t testing.TB, path string) *Table {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tab, err := CompileFile(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return tab
}

// readelfRow is one row of readelf --debug-dump=frames-interp.
type readelfRow struct {
	pc       uint64
	cfa, rbp string
	ra       string
	signal   bool
	fdeEnd   uint64
}

// readelfFrames runs readelf and returns every FDE's rows (an FDE without
// rows of its own gets its CIE's initial row at its start).
func readelfFrames(t *testing.T, path string) []readelfRow {
	t.Helper()
	// readelf exits 1 after warnings it prints about other sections (a
	// missing separate debug file); the frames are printed all the same.
	out, err := exec.Command(fixture.Tool(t, "readelf"), "--debug-dump=frames-interp", path).Output()
	if err != nil && len(out) == 0 {
		t.Fatalf("readelf %s: %v", path, err)
	}
	type cie struct {
		row    readelfRow
		signal bool
	}
	cies := map[string]*cie{}
	var rows []readelfRow
	var cols []string
	var inCIE *cie  // the CIE whose initial row comes next
	var fdeCIE *cie // the FDE being read's CIE (nil: none)
	var fdeRows int // rows the FDE printed
	var begin, end uint64
	finishFDE := func() {
		if fdeCIE != nil && fdeRows == 0 {
			r := fdeCIE.row
			r.pc, r.fdeEnd, r.signal = begin, end, fdeCIE.signal
			rows = append(rows, r)
		}
		fdeCIE = nil
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := joinRegisterNames(strings.Fields(sc.Text()))
		switch {
		case len(f) >= 5 && f[3] == "CIE":
			finishFDE()
			inCIE = &cie{signal: strings.Contains(f[4], "S")}
			cies[f[0]] = inCIE
			cols = nil
		case len(f) >= 6 && f[3] == "FDE":
			finishFDE()
			inCIE = nil
			fdeCIE = cies[strings.TrimPrefix(f[4], "cie=")]
			if fdeCIE == nil {
				t.Fatalf("readelf: FDE %s of an unknown CIE", f[0])
			}
			lo, hi, _ := strings.Cut(strings.TrimPrefix(f[5], "pc="), "..")
			begin, _ = strconv.ParseUint(lo, 16, 64)
			end, _ = strconv.ParseUint(hi, 16, 64)
			fdeRows, cols = 0, nil
		case len(f) > 0 && f[0] == "LOC":
			cols = f
		case len(cols) > 0 && len(f) == len(cols) && len(f[0]) == 16:
			pc, err := strconv.ParseUint(f[0], 16, 64)
			if err != nil {
				continue
			}
			r := readelfRow{pc: pc, cfa: f[1], rbp: "u", ra: "u"}
			for i, c := range cols {
				switch c {
				case "rbp":
					r.rbp = f[i]
				case "ra":
					r.ra = f[i]
				}
			}
			switch {
			case inCIE != nil:
				inCIE.row = r
			case fdeCIE != nil:
				r.fdeEnd, r.signal = end, fdeCIE.signal
				rows = append(rows, r)
				fdeRows++
			}
		}
	}
	finishFDE()
	return rows
}

// joinRegisterNames joins readelf's "r9 (r9)" (a register rule) into one
// field.
func joinRegisterNames(f []string) []string {
	out := f[:0]
	for _, s := range f {
		if strings.HasPrefix(s, "(") && len(out) > 0 {
			out[len(out)-1] += " " + s
			continue
		}
		out = append(out, s)
	}
	return out
}

// expectRow is what readelf's row says the compiled row must be; ok is
// false for an expression CFA, which is checked by kind only.
func expectRow(r readelfRow) (want Row, expr bool) {
	want.PC = r.pc
	switch {
	case r.ra == "u":
		want.CFA = CFAEnd
		return want, false
	case r.signal:
		want.CFA = CFASignal
		return want, false
	case r.cfa == "exp":
		return want, true
	case r.ra != "c-8":
		want.CFA = CFAUnsupported
		return want, false
	}
	reg, off, ok := strings.Cut(r.cfa, "+")
	n, err := strconv.ParseInt(off, 10, 64)
	switch {
	case ok && err == nil && reg == "rsp" && fits(n):
		want.CFA, want.CFAOffset = CFARSP, int32(n)
	case ok && err == nil && reg == "rbp" && fits(n):
		want.CFA, want.CFAOffset = CFARBP, int32(n)
	default:
		want.CFA = CFAUnsupported
		return want, false
	}
	switch {
	case r.rbp == "u" || r.rbp == "s":
	case strings.HasPrefix(r.rbp, "c"):
		n, err := strconv.ParseInt(r.rbp[1:], 10, 64)
		if err != nil || !fits(n) {
			want.RBP = RBPUnsupported
		} else {
			want.RBP, want.RBPOffset = RBPAtCFA, int32(n)
		}
	default:
		want.RBP = RBPUnsupported
	}
	return want, false
}

// checkAgainstReadelf compares every row readelf prints with the table's
// row at that address, and every row of the table with readelf's.
func checkAgainstReadelf(t *testing.T, path string) *Table {
	t.Helper()
	tab := compilePath(t, path)
	rows := readelfFrames(t, path)
	if len(rows) == 0 {
		t.Fatalf("readelf printed no rows for %s", path)
	}
	pcs := map[uint64]bool{}
	ends := map[uint64]bool{}
	mismatches := 0
	for _, r := range rows {
		pcs[r.pc] = true
		ends[r.fdeEnd] = true
		want, expr := expectRow(r)
		got, ok := tab.Lookup(r.pc)
		if !ok {
			t.Errorf("%s: no row at %#x (readelf: %s)", path, r.pc, r.cfa)
			mismatches++
			continue
		}
		switch {
		case expr && (got.CFA == CFAPLT || got.CFA == CFAUnsupported):
		case expr:
			t.Errorf("%s: row at %#x: %v, readelf has an expression CFA", path, r.pc, got)
			mismatches++
		case !got.sameRule(want):
			t.Errorf("%s: row at %#x: %v, want %v (readelf: CFA %s rbp %s ra %s)", path, r.pc, got, want, r.cfa, r.rbp, r.ra)
			mismatches++
		}
		if mismatches > 20 {
			t.Fatal("too many mismatches")
		}
	}
	for _, r := range tab.Rows {
		if r.CFA == CFANone {
			if !ends[r.PC] {
				t.Errorf("%s: end row at %#x, not the end of an FDE", path, r.PC)
			}
			continue
		}
		if !pcs[r.PC] {
			t.Errorf("%s: row %v at an address readelf has no row at", path, r)
		}
	}
	return tab
}

func TestCompileMatchesReadelfOnFixture(t *testing.T) {
	bin := fixture.BuildC(t, "", "gcc", "chain", chainSource, "-O2", "-fomit-frame-pointer", "-g")
	tab := checkAgainstReadelf(t, bin)
	if tab.BuildID == "" {
		t.Error("no build id read from the fixture")
	}
	// Every function of the chain must be covered by an rsp-based row.
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, s := range syms {
		switch s.Name {
		case "leaf_work", "middle_layer", "outer_layer", "main":
			r, ok := tab.Lookup(s.Value)
			if !ok || r.CFA != CFARSP || r.CFAOffset != 8 {
				t.Errorf("%s at %#x: row %v, want rsp+8 at its entry", s.Name, s.Value, r)
			}
			found++
		}
	}
	if found != 4 {
		t.Fatalf("found %d of the fixture's 4 functions in its symbols", found)
	}
	// The PLT's expression is compiled as the PLT rule.
	plt := f.Section(".plt")
	if plt == nil {
		t.Fatal("the fixture has no .plt")
	}
	r, ok := tab.Lookup(plt.Addr + 16)
	if !ok || r.CFA != CFAPLT || r.CFAOffset != 8 || r.Threshold != 11 {
		t.Errorf("the first PLT entry at %#x: row %v, want plt(rsp+8,>=11)", plt.Addr+16, r)
	}
	if s := fmt.Sprint(tab.Stats); tab.Stats.FDEs == 0 {
		t.Errorf("stats %s: no FDE compiled", s)
	}
}

// libcPath is Debian's libc, built without frame pointers.
const libcPath = "/lib/x86_64-linux-gnu/libc.so.6"

func TestCompileMatchesReadelfOnLibc(t *testing.T) {
	if _, err := os.Stat(libcPath); err != nil {
		t.Skipf("no %s on this system: %v", libcPath, err)
	}
	tab := checkAgainstReadelf(t, libcPath)
	// __restore_rt's FDE (the 'S' augmentation) is a signal row.
	f, err := elf.Open(libcPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	signals := 0
	for _, r := range tab.Rows {
		if r.CFA == CFASignal {
			signals++
		}
	}
	if signals == 0 {
		t.Error("no signal frame row in libc (__restore_rt)")
	}
	qsort := false
	for _, s := range syms {
		if s.Name == "qsort" {
			r, ok := tab.Lookup(s.Value)
			qsort = ok && r.CFA == CFARSP
		}
	}
	if !qsort {
		t.Error("libc's qsort has no rsp-based row at its entry")
	}
}

func TestCompileMatchesReadelfOnCPlusPlus(t *testing.T) {
	const src = `#include <stdexcept>
#include <cstdio>
__attribute__((noinline)) int thrower(int n) { if (n > 2) throw std::runtime_error("big"); return n * 3; }
__attribute__((noinline)) int catcher(int n) { try { return thrower(n); } catch (const std::exception &e) { std::puts(e.what()); return -1; } }
int main(int argc, char **) { int s = 0; for (int i = 0; i < 5; i++) s += catcher(argc + i); return s > 1000; }
`
	bin := fixture.BuildC(t, "", "g++", "exc", src, "-O2", "-fomit-frame-pointer", "-fexceptions")
	checkAgainstReadelf(t, bin)
}

func TestCompileStripped(t *testing.T) {
	bin := fixture.BuildC(t, "", "gcc", "chain", chainSource, "-O2", "-fomit-frame-pointer", "-s")
	tab := checkAgainstReadelf(t, bin)
	if len(tab.Rows) < 8 {
		t.Errorf("a stripped binary keeps its .eh_frame: %d rows", len(tab.Rows))
	}
}

func TestCompileGoDebugFrame(t *testing.T) {
	goTool := fixture.Tool(t, "go")
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte("package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hi\") }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "gofix")
	cmd := exec.Command(goTool, "build", "-o", bin, src)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GO111MODULE=off", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	tab := checkAgainstReadelf(t, bin)
	if tab.Stats.DebugFrameBytes == 0 {
		t.Error("the Go binary's .debug_frame was not read")
	}
}

func TestCompileNoCFI(t *testing.T) {
	bin := fixture.BuildC(t, "", "gcc", "nocfi", "int main(void) { return 0; }\n", "-O2", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables", "-nostartfiles", "-e", "main", "-static", "-nostdlib")
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := CompileFile(f); err != ErrNoCFI {
		t.Fatalf("CompileFile of a binary without CFI: %v, want ErrNoCFI", err)
	}
}

// TestCompileAllocatesLittleBeyondItsRows: compiling libc's 28 000 rows
// allocates, besides the FDEs parsed before, at most 2.5 times the rows'
// own bytes (1.86 measured): the rows grow to the count the FDEs compiled so far project, not
// a quarter at a time (3.32 times the rows' bytes, all garbage once the
// table is in its BPF map, which made the agent's collector run several
// times per table under its memory limit).
func TestCompileAllocatesLittleBeyondItsRows(t *testing.T) {
	f, err := elf.Open(libcPath)
	if err != nil {
		t.Skipf("no %s on this system: %v", libcPath, err)
	}
	defer f.Close()
	data, err := f.Section(".eh_frame").Data()
	if err != nil {
		t.Fatal(err)
	}
	fdes, err := parseFrames(data, f.Section(".eh_frame").Addr)
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	tab := &Table{}
	runtime.ReadMemStats(&before)
	if err := tab.compile(fdes); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	rowBytes := uint64(len(tab.Rows)) * uint64(unsafe.Sizeof(Row{}))
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d rows of %d FDEs: %d bytes allocated, %.2f times the rows' %d", len(tab.Rows), len(fdes), allocated, float64(allocated)/float64(rowBytes), rowBytes)
	if len(tab.Rows) < 1000 {
		t.Fatalf("%d rows: libc should have thousands", len(tab.Rows))
	}
	if allocated > 5*rowBytes/2 {
		t.Errorf("compiling %d rows allocated %d bytes, %.2f times the rows' %d; want at most 2.5 times", len(tab.Rows), allocated, float64(allocated)/float64(rowBytes), rowBytes)
	}
}
