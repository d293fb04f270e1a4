// Package bpftest decides whether tests that need BPF and perf events can
// run here. They skip with the reason when they cannot, unless
// HEATSCOPE_REQUIRE_BPF=1 (as in CI), where a skip would hide a broken
// sampler and so fails the test instead.
package bpftest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/needs"
)

// Require skips or fails t when this process cannot load BPF programs.
func Require(t testing.TB) {
	t.Helper()
	if reason := unavailable(); reason != "" {
		needs.Missing(t, "HEATSCOPE_REQUIRE_BPF", "needs BPF and perf events: "+reason)
	}
}

func unavailable() string {
	if os.Geteuid() != 0 {
		return "not running as root"
	}
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		return "kernel BTF missing: " + err.Error()
	}
	return ""
}

// ProcessCPU returns the user plus system CPU time process pid has used so
// far. Sampling tests compare the samples a process got with the CPU time
// it really had, so a loaded machine that starves the workload does not
// look like lost samples.
func ProcessCPU(t testing.TB, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatalf("read the CPU time of pid %d: %v", pid, err)
	}
	// Fields after the parenthesised comm; utime and stime are 14 and 15.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		t.Fatalf("/proc/%d/stat has %d fields after comm", pid, len(f))
	}
	utime, err1 := strconv.Atoi(f[11])
	stime, err2 := strconv.Atoi(f[12])
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}

// ExpectedSamples is how many samples at hz a process that used cpu of CPU
// time should get.
func ExpectedSamples(cpu time.Duration, hz float64) int64 {
	return int64(cpu.Seconds() * hz)
}
