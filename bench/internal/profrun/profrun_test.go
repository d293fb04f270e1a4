package profrun

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestProcessCPUKeepsExitedThreads spins a thread for 300 ms of CPU, reads
// this process's CPU time, lets the thread exit and reads it again: the
// time may only grow, the exited thread's included.
func TestProcessCPUKeepsExitedThreads(t *testing.T) {
	pid := os.Getpid()
	spun, read, gone := make(chan error), make(chan struct{}), make(chan int)
	var spin func()
	spin = func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		if unix.Gettid() == pid {
			// The main thread never exits: spin on another, which this
			// goroutine, locked here, keeps off the main thread.
			done := make(chan struct{})
			go func() { spin(); close(done) }()
			<-done
			runtime.UnlockOSThread()
			return
		}
		var ts unix.Timespec
		for {
			if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
				spun <- err
				return
			}
			if time.Duration(ts.Nano()) >= 300*time.Millisecond {
				break
			}
		}
		spun <- nil
		<-read
		gone <- unix.Gettid()
	}
	go spin()
	if err := <-spun; err != nil {
		t.Fatal(err)
	}
	from, err := ProcessCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	close(read)
	task := fmt.Sprintf("/proc/%d/task/%d", pid, <-gone)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(task); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still there 10 s after its goroutine ended", task)
		}
	}
	to, err := ProcessCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	if from < 300*time.Millisecond || to < from {
		t.Fatalf("process CPU %v with the spinning thread, %v after it exited: want at least 300ms, then no less", from, to)
	}
}

// TestParseSummary reads heatscope record's summary, with and without the
// exit snapshot program, and says what is missing.
func TestParseSummary(t *testing.T) {
	with := "recorded 30.2s: 4190 samples on 2 CPUs, 3 dropped, 0 kernel and 0 user stack errors\n" +
		"agent: 0.631s CPU (2.090% of one CPU), peak RSS 69.0 MB; BPF program: 4190 runs, 0.075s (17.9 µs/run, 0.248% of one CPU); exit snapshots: 1017 runs, 0.005s (0.016% of one CPU)\n"
	got, err := ParseSummary(with)
	want := Summary{Received: 4190, Dropped: 3, BPFRuns: 4190, ExitRuns: 1017, BPFTime: 0.075, ExitTime: 0.005, Recorded: 30.2}
	if err != nil || got != want {
		t.Errorf("ParseSummary = %+v, %v; want %+v", got, err, want)
	}
	without := strings.Replace(with, "; exit snapshots: 1017 runs, 0.005s (0.016% of one CPU)", "", 1)
	want.ExitRuns, want.ExitTime = 0, 0
	if got, err := ParseSummary(without); err != nil || got != want {
		t.Errorf("without exit snapshots: %+v, %v; want %+v", got, err, want)
	}
	if _, err := ParseSummary("recorded 30.2s: 4190 samples on 2 CPUs, 3 dropped"); err == nil {
		t.Error("a summary without the BPF program's line: no error")
	}
}

func TestPerfEventVerified(t *testing.T) {
	for _, c := range []struct {
		fdinfo string
		want   int
		ok     bool
	}{
		{"pos:\t0\nflags:\t02000002\nprog_type:\t7\nprog_jited:\t1\nprog_tag:\t4a3d1f0c\nmemlock:\t69632\nprog_id:\t12945\nrun_time_ns:\t0\nrun_cnt:\t0\nrecursion_misses:\t0\nverified_insns:\t25325\n", 25325, true},
		{"pos:\t0\nprog_type:\t26\nverified_insns:\t120\n", 0, false}, // a tracing program
		{"pos:\t0\nprog_type:\t7\n", 0, false},                        // before Linux 5.16
		{"pos:\t0\nflags:\t02\nmap_type:\t27\n", 0, false},            // a map
		{"", 0, false},
	} {
		if n, ok := perfEventVerified([]byte(c.fdinfo)); n != c.want || ok != c.ok {
			t.Errorf("%q: %d, %v; want %d, %v", c.fdinfo, n, ok, c.want, c.ok)
		}
	}
}
