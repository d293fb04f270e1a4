package profrun

import (
	"errors"
	"fmt"
	"os"
	"runtime"
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
