package profiler

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/bpftest"
)

// BenchmarkPythonWalkCost records, for 3 s each, the same Python program
// (testdata/pychains.py, two threads, chains 4 and 6 frames deep) with the
// Python walk and without it, and a shell loop (a native process), each
// alone (PIDs), and reports the BPF program's run time per sample:
// run_time_ns over the samples taken (the runs the pid filter skipped,
// which cost a lookup each, are counted in run_time_ns but not in the
// samples; the same for each case).
func BenchmarkPythonWalkCost(b *testing.B) {
	bpftest.Require(b)
	if err := dwarfSupported(); err != nil {
		b.Skipf("the Python walk runs in the table-walking program, which this kernel cannot run: %v", err)
	}
	py := "/usr/bin/python3.11"
	if _, err := os.Stat(py); err != nil {
		b.Skipf("no %s: %v", py, err)
	}
	for range b.N {
		prog := startPython(b, "python3.11", py).Pid
		spin := uint32(startSpinner(b, "spin-bench").Process.Pid)
		for _, c := range []struct {
			name     string
			pid      uint32
			noPython bool
		}{
			{"python-walk", prog, false},
			{"python-native-only", prog, true},
			{"shell-loop", spin, false},
		} {
			p, err := Open(Config{Frequency: 499, Unwind: UnwindDWARF, BPFStats: true, PIDs: []uint32{c.pid}, noPython: c.noPython})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			var walked, withFrames uint64
			err = p.Run(ctx, func(r *Record, _ int64) {
				if len(r.Python) > 0 {
					withFrames++
				}
				if r.PythonWalk.Has(PythonWalked) {
					walked++
				}
			})
			cancel()
			st, serr := p.Stats()
			p.Close()
			if err != nil || serr != nil {
				b.Fatal(err, serr)
			}
			if st.Samples == 0 {
				b.Fatalf("%s: no samples", c.name)
			}
			b.ReportMetric(float64(st.BPFRunTime.Nanoseconds())/float64(st.Samples), c.name+"-ns/sample")
			b.ReportMetric(float64(st.BPFRunTime.Nanoseconds())/float64(st.BPFRunCount), c.name+"-ns/run")
			b.Logf("%s: %d samples (%d walked, %d with Python frames), %d runs, %v", c.name, st.Samples, walked, withFrames, st.BPFRunCount, st.BPFRunTime)
		}
	}
}
