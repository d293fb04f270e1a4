package profiler

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/bpftest"
)

// startSpinner starts a shell that burns CPU until the test ends. Its comm
// is "spin-<suffix>" so tests can tell it apart.
func startSpinner(t testing.TB, comm string) *exec.Cmd {
	t.Helper()
	link := filepath.Join(t.TempDir(), comm)
	if err := os.Symlink("/bin/sh", link); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(link, "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

type collected struct {
	pid, tid, cpu uint32
	comm          string
	wall          int64
	kernel, user  int
}

func record(t *testing.T, cfg Config, d time.Duration) ([]collected, Stats) {
	t.Helper()
	p, err := Open(cfg)
	if err != nil {
		t.Fatalf("open profiler: %v", err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var got []collected
	err = p.Run(ctx, func(r *Record, wall int64) {
		got = append(got, collected{r.PID, r.TID, r.CPU, r.Comm, wall, len(r.Kernel), len(r.User)})
	})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	st, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return got, st
}

func testSamplesProcess(t *testing.T, forceIoctl bool) {
	bpftest.Require(t)
	spin := startSpinner(t, "spin-test")
	pid := uint32(spin.Process.Pid)
	start := time.Now()
	cpuBefore := bpftest.ProcessCPU(t, int(pid))
	const hz, secs = 99, 2
	got, st := record(t, Config{Frequency: hz, PIDs: []uint32{pid}, forceIoctl: forceIoctl, BPFStats: true}, secs*time.Second)
	cpuTime := bpftest.ProcessCPU(t, int(pid)) - cpuBefore
	end := time.Now()

	if st.Lost != 0 || st.DecodeErrors != 0 {
		t.Errorf("lost %d records, %d decode errors", st.Lost, st.DecodeErrors)
	}
	if st.Received != st.Samples {
		t.Errorf("received %d records but the program sent %d: a clean stop must drain the ring", st.Received, st.Samples)
	}
	// cpu-clock samples every 1/hz s of CPU time the process used; the
	// process's own CPU time (10 ms ticks) says how many to expect.
	// The CPU time is read at 10 ms ticks, around a window slightly wider
	// than the sampling: allow 15% and three samples either way.
	want := float64(bpftest.ExpectedSamples(cpuTime, hz))
	if n := float64(len(got)); want < 20 || n < want*0.85-3 || n > want*1.15+3 {
		t.Errorf("got %.0f samples of a process that used %v of CPU at %d Hz, want %.0f ±15%%", n, cpuTime, hz, want)
	}
	if st.BPFRunCount == 0 || st.BPFRunTime == 0 {
		t.Errorf("BPF stats empty: %v runs, %v", st.BPFRunCount, st.BPFRunTime)
	}
	cpus, _ := OnlineCPUs()
	for _, s := range got {
		if s.pid != pid || s.tid != pid {
			t.Fatalf("sample of pid %d tid %d, filter is pid %d", s.pid, s.tid, pid)
		}
		if s.comm != "spin-test" {
			t.Fatalf("comm %q, want spin-test", s.comm)
		}
		if !slices.Contains(cpus, int(s.cpu)) {
			t.Fatalf("CPU %d not online (%v)", s.cpu, cpus)
		}
		// Wall time must fall inside the recording, to a few ms.
		if s.wall < start.Add(-5*time.Millisecond).UnixNano() || s.wall > end.Add(5*time.Millisecond).UnixNano() {
			t.Fatalf("sample at %v outside the recording [%v, %v]", time.Unix(0, s.wall), start, end)
		}
		if s.user == 0 {
			t.Fatalf("sample without user frames: %+v", s)
		}
	}
}

func TestSamplesProcessWithLink(t *testing.T)  { testSamplesProcess(t, false) }
func TestSamplesProcessWithIoctl(t *testing.T) { testSamplesProcess(t, true) }

func TestKernelOnlyStacks(t *testing.T) {
	bpftest.Require(t)
	spin := startSpinner(t, "spin-kernel")
	got, _ := record(t, Config{Frequency: 199, PIDs: []uint32{uint32(spin.Process.Pid)}, Stacks: StacksKernel}, time.Second)
	if len(got) == 0 {
		t.Fatal("no samples")
	}
	for _, s := range got {
		if s.user != 0 {
			t.Fatalf("kernel-only recording has %d user frames", s.user)
		}
	}
}

// TestKernelModeSamplesHaveKernelFrames checks, with both samplers, that
// a process that spends its time in the kernel (dd copying /dev/zero to
// /dev/null) has kernel frames in most samples: the sampler asks for a
// kernel stack only where the tick interrupted kernel code.
func TestKernelModeSamplesHaveKernelFrames(t *testing.T) {
	for _, unwind := range []Unwind{UnwindFP, UnwindDWARF} {
		t.Run(unwind.String(), func(t *testing.T) {
			bpftest.Require(t)
			dd := exec.Command("dd", "if=/dev/zero", "of=/dev/null", "bs=1M")
			if err := dd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { dd.Process.Kill(); dd.Wait() })
			got, _ := record(t, Config{Frequency: 199, PIDs: []uint32{uint32(dd.Process.Pid)}, Unwind: unwind}, 2*time.Second)
			withKernel := 0
			for _, s := range got {
				if s.kernel > 0 {
					withKernel++
				}
			}
			// dd's time is nearly all in read(2) and write(2): clearing
			// and copying 1 MB buffers.
			// Whatever CPU a loaded machine leaves it, 10 samples
			// are enough to tell most from none.
			if len(got) < 10 || withKernel < len(got)*3/4 {
				t.Fatalf("%d of %d samples of dd have kernel frames", withKernel, len(got))
			}
		})
	}
}

func TestAllCPUsAllProcesses(t *testing.T) {
	bpftest.Require(t)
	startSpinner(t, "spin-a")
	startSpinner(t, "spin-b")
	got, st := record(t, Config{Frequency: 99}, 2*time.Second)
	seen := map[uint32]int{}
	comms := map[string]bool{}
	for _, s := range got {
		seen[s.cpu]++
		comms[s.comm] = true
	}
	cpus, _ := OnlineCPUs()
	if len(seen) != len(cpus) {
		t.Errorf("samples from CPUs %v, want all of %v", seen, cpus)
	}
	if !comms["spin-a"] || !comms["spin-b"] {
		t.Errorf("busy processes missing from comms %v", comms)
	}
	if len(st.PerCPU) != len(cpus) {
		t.Errorf("per-CPU counters for %d CPUs, want %d", len(st.PerCPU), len(cpus))
	}
}

func TestBadConfig(t *testing.T) {
	for name, cfg := range map[string]Config{
		"zero frequency": {Frequency: 0},
		"huge frequency": {Frequency: MaxFrequency + 1},
		"ring not pow2":  {Frequency: 99, RingBufferSize: 3 << 20},
	} {
		if _, err := Open(cfg); err == nil {
			t.Errorf("%s: Open succeeded", name)
		}
	}
}

func TestBadBTFFile(t *testing.T) {
	garbage := filepath.Join(t.TempDir(), "vmlinux.btf")
	os.WriteFile(garbage, []byte("not BTF"), 0o644)
	_, err := Open(Config{Frequency: 99, BTFPath: garbage})
	if err == nil || !strings.Contains(err.Error(), garbage) {
		t.Fatalf("Open with a garbage BTF file: %v, want an error naming it", err)
	}
}

func TestCheckBTFHeader(t *testing.T) {
	bpftest.Require(t)
	if err := checkBTFHeader(kernelBTFPath); err != nil {
		t.Fatalf("the running kernel's BTF: %v", err)
	}
	dir := t.TempDir()
	notBTF := filepath.Join(dir, "vmlinux")
	os.WriteFile(notBTF, []byte("ELF"), 0o644)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o644)
	for _, path := range []string{notBTF, empty, filepath.Join(dir, "missing")} {
		if err := checkBTFHeader(path); err == nil {
			t.Errorf("checkBTFHeader(%s) passed", path)
		}
	}
}
