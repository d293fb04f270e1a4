package recorder

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/bpftest"
	"github.com/heatscope/heatscope/internal/pyfixture"
	"github.com/heatscope/heatscope/profiler"
	"github.com/heatscope/heatscope/pyinterp"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/symbolize"
)

// TestInterpretersReadOnce: the sampler, setting a Python process up, and
// the symbolizer, naming its Python frames, both look its interpreter up,
// and the binary is read once: each file of the process that may be an
// interpreter (Debian's python3.11: the executable alone) is read one
// time, however many samples and lookups. Each used to keep a cache of
// its own, and read every Python binary twice.
func TestInterpretersReadOnce(t *testing.T) {
	bpftest.Require(t)
	py := pyfixture.Interpreters[0]
	busy := pyfixture.Start(t, py, "busy.py")
	maps, err := symbolize.ReadExecMappings(fmt.Sprintf("/proc/%d/maps", busy.PID))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]bool{}
	for _, m := range maps {
		if pyinterp.MayBeInterpreter(m.Path) {
			files[m.Path] = true
		}
	}
	cfg := profiler.Config{Frequency: 99, PIDs: []uint32{uint32(busy.PID)}, Unwind: profiler.UnwindDWARF, UnwindCacheDir: t.TempDir()}
	rec, err := Open(cfg, symbolize.Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("open recorder: %v", err)
	}
	defer rec.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	named := 0 // samples with a named Python frame
	err = rec.Run(ctx, func(s *sample.Sample) {
		for _, f := range s.Stack {
			if f.Kind == sample.KindPython && f.Function == "inner" {
				named++
				break
			}
		}
		if named == 10 {
			cancel()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if named == 0 {
		t.Fatalf("no sample of busy.py (%s) had its Python frame inner named in 20 s: the test shows nothing", py.Name)
	}
	st, err := rec.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Unwind.Python.Processes == 0 {
		t.Fatalf("the sampler set no Python process up (%+v), yet frames were named", st.Unwind.Python)
	}
	// Each consumer counts the files it read itself; a binary read by
	// one is found in the cache by the other.
	sampler, symbolizer := st.Unwind.Python.Binaries, rec.SymbolizerStats().PythonBinaries
	if sampler+symbolizer != uint64(len(files)) || rec.interpreters.Reads() != uint64(len(files)) {
		t.Errorf("files read for their interpreter: %d by the sampler, %d by the symbolizer, %d through the recorder's cache; the process maps %d that may be interpreters (%v): want each read once, for both",
			sampler, symbolizer, rec.interpreters.Reads(), len(files), files)
	}
}
