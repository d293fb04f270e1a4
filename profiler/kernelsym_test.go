package profiler

import (
	"bufio"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf/btf"

	"github.com/heatscope/heatscope/internal/bpftest"
	"github.com/heatscope/heatscope/symbolize"
)

// TestExitProgramSymbol: the exit snapshot program, once loaded, is named
// to OnProgram where /proc/kallsyms has it, under the same name, so that
// the symbolizer needs no read of kallsyms for its frames.
func TestExitProgramSymbol(t *testing.T) {
	bpftest.Require(t)
	var got []symbolize.ProgramSymbol
	p, err := Open(Config{Frequency: 99, PIDs: []uint32{uint32(os.Getpid())}, OnProgram: func(s symbolize.ProgramSymbol) { got = append(got, s) }})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.enableSnapshots(); err != nil {
		t.Skipf("this kernel cannot snapshot exiting processes (before 6.16): %v", err)
	}
	if len(got) != 1 {
		t.Fatalf("OnProgram told of %d symbols, want the exit program's: %+v", len(got), got)
	}
	sym := got[0]
	listed, err := ListPrograms()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(listed, sym) {
		t.Errorf("ListPrograms %+v lacks the exit program %+v", listed, sym)
	}
	if !strings.HasPrefix(sym.Name, "bpf_prog_") || !strings.HasSuffix(sym.Name, "_on_exit") || sym.Size == 0 {
		t.Fatalf("symbol %+v: want bpf_prog_<tag>_on_exit with a size", sym)
	}
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Other agents (other tests, other recorders) may have loaded the
	// same program: one of the lines of its name is this one's.
	sc := bufio.NewScanner(f)
	var seen []string
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || fields[2] != sym.Name {
			continue
		}
		seen = append(seen, sc.Text())
		if addr, err := strconv.ParseUint(fields[0], 16, 64); err == nil && addr == sym.Addr && fields[3] == "[bpf]" {
			return
		}
	}
	t.Errorf("kallsyms has no %s at %#x in module [bpf]; its lines of that name: %q", sym.Name, sym.Addr, seen)
}

// TestExitProgramLoadParsesBTFOnce: loading the exit snapshot program
// parses the kernel's BTF once, shared by the check of the tracepoint's
// arguments and the program's relocations and attach target (each parsed
// it, before: 8.1 MB allocated where one parse allocates 3.9). Measured by
// the heap the load allocates, against one parse.
func TestExitProgramLoadParsesBTFOnce(t *testing.T) {
	bpftest.Require(t)
	allocated := func(f func()) uint64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	parse := allocated(func() {
		spec, err := btf.LoadKernelSpec()
		if err != nil {
			t.Fatal(err)
		}
		if err := exitTracepointSeesMM(spec, nil); err != nil {
			t.Skipf("this kernel cannot snapshot exiting processes (before 6.16): %v", err)
		}
	})
	p, err := Open(Config{Frequency: 99, PIDs: []uint32{uint32(os.Getpid())}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var loadErr error
	load := allocated(func() { loadErr = p.enableSnapshots() })
	if loadErr != nil {
		t.Fatal(loadErr)
	}
	t.Logf("loading the exit program allocated %d KiB; one parse of the kernel's BTF %d KiB", load>>10, parse>>10)
	if load >= 3*parse/2 {
		t.Errorf("loading the exit program allocated %d KiB, one parse of the kernel's BTF %d KiB: it parsed the BTF more than once", load>>10, parse>>10)
	}
	if p.btfCache != nil {
		t.Error("the kernel's BTF is still held after the exit program was loaded")
	}
}
