package profiler

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/bpftest"
)

func TestParseCgroup(t *testing.T) {
	if id, err := ParseCgroup(""); id != 0 || err != nil {
		t.Errorf(`ParseCgroup("") = %d, %v`, id, err)
	}
	if id, err := ParseCgroup("1234"); id != 1234 || err != nil {
		t.Errorf(`ParseCgroup("1234") = %d, %v`, id, err)
	}
	if _, err := ParseCgroup("/no/such/cgroup"); err == nil {
		t.Error("a missing cgroup directory parsed")
	}
	file := filepath.Join(t.TempDir(), "f")
	os.WriteFile(file, nil, 0o644)
	if _, err := ParseCgroup(file); err == nil {
		t.Error("a plain file parsed as a cgroup")
	}
	if _, err := ParseCgroup(t.TempDir()); err == nil {
		t.Error("a directory outside cgroupfs parsed as a cgroup")
	}
}

func TestCgroupFilter(t *testing.T) {
	bpftest.Require(t)
	root, err := CgroupV2Root()
	if err != nil {
		t.Skipf("no cgroup v2 here to filter on: %v", err)
	}
	dir, err := os.MkdirTemp(root, "heatscope-test-")
	if err != nil {
		t.Fatalf("create a cgroup under %s: %v", root, err)
	}
	spin := startSpinner(t, "spin-cgroup")
	startSpinner(t, "spin-outside")
	t.Cleanup(func() {
		spin.Process.Kill()
		spin.Wait()
		os.Remove(dir)
	})
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(spin.Process.Pid)), 0o644); err != nil {
		t.Fatalf("move the spinner into %s: %v", dir, err)
	}
	id, err := ParseCgroup(dir)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Open(Config{Frequency: 99, CgroupID: id})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cpuBefore := bpftest.ProcessCPU(t, spin.Process.Pid)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	n := 0
	err = p.Run(ctx, func(r *Record, _ int64) {
		n++
		if r.CgroupID != id || r.Comm != "spin-cgroup" {
			t.Errorf("sample of %q in cgroup %d passed the filter for cgroup %d", r.Comm, r.CgroupID, id)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	cpu := bpftest.ProcessCPU(t, spin.Process.Pid) - cpuBefore
	if want := bpftest.ExpectedSamples(cpu, 99); want < 10 || int64(n) < want*7/10 {
		t.Errorf("%d samples of a process in the cgroup that used %v of CPU at 99 Hz, want about %d", n, cpu, want)
	}
}
