package profiler

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/bpftest"
	"github.com/heatscope/heatscope/symbolize"
)

// BenchmarkPythonWalkCost records, for 3 s each, the same Python program
// (testdata/pychains.py, two threads, chains 4 and 6 frames deep) with the
// Python walk and without it, one 40 calls deep (testdata/pydeep.py) with
// the walk, a shell loop (a native process), and a sleeping process, each
// alone (PIDs), and reports the BPF program's run time per sample. Every CPU tick runs the program, and the runs the pid
// filter skips cost a lookup each: the sleeping process's case (no sample)
// gives that cost per run, which is taken out of the others' run time
// before dividing by their samples.
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
		prog := startPython(b, "python3.11", py, "pychains.py").Pid
		deep := startPython(b, "python3.11", py, "pydeep.py", "40").Pid
		spin := uint32(startSpinner(b, "spin-bench").Process.Pid)
		sleeper := exec.Command("sleep", "60")
		if err := sleeper.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
		var filteredNs float64
		for _, c := range []struct {
			name     string
			pid      uint32
			noPython bool
		}{
			{"filtered", uint32(sleeper.Process.Pid), false},
			{"python-walk", prog, false},
			{"python-native-only", prog, true},
			{"python-deep-walk", deep, false},
			{"shell-loop", spin, false},
		} {
			p, err := Open(Config{Frequency: 499, Unwind: UnwindDWARF, BPFStats: true, PIDs: []uint32{c.pid}, noPython: c.noPython})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			var walked, withFrames, frames uint64
			err = p.Run(ctx, func(r *Record, _ int64) {
				if len(r.Python) > 0 {
					withFrames++
					frames += uint64(len(r.Python))
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
			if st.BPFRunCount == 0 {
				b.Fatalf("%s: the program never ran (BPF stats off?)", c.name)
			}
			runNs := float64(st.BPFRunTime.Nanoseconds())
			if c.name == "filtered" {
				filteredNs = runNs / float64(st.BPFRunCount)
				b.ReportMetric(filteredNs, "filtered-ns/run")
				continue
			}
			if st.Samples == 0 {
				b.Fatalf("%s: no samples", c.name)
			}
			perSample := (runNs - filteredNs*float64(st.BPFRunCount-st.Samples)) / float64(st.Samples)
			b.ReportMetric(perSample, c.name+"-ns/sample")
			b.Logf("%s: %d samples (%d walked, %d with Python frames, %.1f frames each), %d runs, %v: %.0f ns per sample",
				c.name, st.Samples, walked, withFrames, float64(frames)/float64(max(withFrames, 1)), st.BPFRunCount, st.BPFRunTime, perSample)
		}
	}
}

// BenchmarkPythonSetUp is the unwinder's own work to set up one new
// process at its first request (setUpOne: its entry written, its
// interpreter found, the write into unwind_procs), for a running Debian
// python3.11 and a running sleep(1), each binary seen before (the
// finder's cache and the files' stats warm, as for the tenth
// `python3 -c pass` of a churning node), its mappings handed on as the
// symbolizer's read (read once, outside the loop), no table loaded.
// Reported per process.
//
//	go test ./profiler/ -run '^$' -bench PythonSetUp -count 6
func BenchmarkPythonSetUp(b *testing.B) {
	bpftest.Require(b)
	const python = "/usr/bin/python3.11"
	if _, err := os.Stat(python); err != nil {
		b.Skipf("no %s: %v", python, err)
	}
	py := startPython(b, "debian-3.11", python, "pychains.py").Pid
	sleep := exec.Command("sleep", "600")
	if err := sleep.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sleep.Process.Kill(); sleep.Wait() })
	for _, c := range []struct {
		name string
		pid  uint32
	}{{"python3.11", py}, {"sleep", uint32(sleep.Process.Pid)}} {
		b.Run(c.name, func(b *testing.B) {
			maps, err := symbolize.ReadExecMappings(fmt.Sprintf("/proc/%d/maps", c.pid))
			if err != nil {
				b.Fatal(err)
			}
			procs := newProcsMap(b, 16)
			u := newSetUpTestUnwinder(b, procs)
			u.recentMaps = func(dst []symbolize.ExecMapping, _ uint32, _ time.Time) ([]symbolize.ExecMapping, bool) {
				return append(dst, maps...), true
			}
			// As newUnwinder wires it: the tables' stats, shared.
			u.python.identify = func(path string, id mappedID) (fileKey, bool) { return u.fileKeyOf(path, id, time.Now()) }
			now := time.Now()
			a := ask{mm: 0x1000, since: now, last: now}
			u.setUpOne(c.pid, a, now, "bench") // the binaries seen before
			if (u.procList[c.pid].pyRuntime != 0) != (c.name == "python3.11") {
				b.Fatalf("%s: interpreter %#x", c.name, u.procList[c.pid].pyRuntime)
			}
			b.ReportAllocs()
			for b.Loop() {
				delete(u.procList, c.pid)
				a.mm++
				u.setUpOne(c.pid, a, now, "bench")
			}
		})
	}
}
