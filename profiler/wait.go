package profiler

import (
	"fmt"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fdWaiter waits in Go's network poller for a file descriptor to signal
// readable, without reading it and without a syscall of its own.
//
// Why: a goroutine blocked in a syscall keeps the Go runtime's sysmon thread
// waking every few milliseconds to retake its P. Measured here, sysmon was
// 89% of the agent's steady-state CPU (0.8% of one CPU at 99 Hz on 2 CPUs)
// while the reader blocked in cilium's epoll_wait for 100 ms at a time.
// Parked in the netpoller, the goroutine holds no P and sysmon sleeps.
//
// The netpoller registers descriptors edge-triggered, so every new
// readiness the kernel signals (a forced ring buffer wakeup) wakes one wait
// even though nothing is read. A timerfd is different: it re-arms only when
// read, so its waiter reads it (consume).
type fdWaiter struct {
	file *os.File
	conn syscall.RawConn
	// consume, when not nil, reads what fd has to read and reports
	// whether there was anything; wait returns when it does.
	consume func(fd uintptr) bool
}

// newFDWaiter registers fd, which it takes over, with the netpoller.
func newFDWaiter(fd int, name string) (*fdWaiter, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("make %s fd non-blocking: %w", name, err)
	}
	file := os.NewFile(uintptr(fd), name)
	conn, err := file.SyscallConn()
	if err == nil {
		// Fails with ErrNoDeadline when the fd is not in the netpoller.
		err = file.SetReadDeadline(time.Time{})
	}
	if err != nil {
		file.Close()
		return nil, fmt.Errorf("poll %s fd: %w", name, err)
	}
	return &fdWaiter{file: file, conn: conn}, nil
}

// newRingWaiter waits on a duplicate of the ring buffer map's fd. The map's
// poll reports readable after a record written with BPF_RB_FORCE_WAKEUP (a
// new pid) and stays quiet for BPF_RB_NO_WAKEUP ones.
func newRingWaiter(ringFD int) (*fdWaiter, error) {
	fd, err := unix.FcntlInt(uintptr(ringFD), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("duplicate ring buffer fd: %w", err)
	}
	return newFDWaiter(fd, "ringbuf")
}

// newPollTimer returns a waiter on a timerfd that expires every interval.
//
// Why not a time.Ticker: the runtime's sysmon thread, when every P is idle,
// sleeps only until the next Go timer, so a 100 ms ticker woke it ten times
// a second on top of the thread that runs the poll. A timerfd in the
// netpoller wakes only the thread that waits in epoll.
func newPollTimer(interval time.Duration) (*fdWaiter, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("create poll timer: %w", err)
	}
	ts := unix.NsecToTimespec(int64(interval))
	spec := unix.ItimerSpec{Interval: ts, Value: ts}
	if err := unix.TimerfdSettime(fd, 0, &spec, nil); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("start poll timer: %w", err)
	}
	w, err := newFDWaiter(fd, "poll timer")
	if err != nil {
		return nil, err
	}
	w.consume = readTimer
	return w, nil
}

// readTimer reads a timerfd's expiry count, which re-arms it, and reports
// whether it had expired. The read never blocks (the fd is non-blocking),
// so it is made as a raw syscall: an ordinary one would wake sysmon on
// every poll, the cost this file is about.
func readTimer(fd uintptr) bool {
	var expiries uint64
	_, _, errno := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&expiries)), unsafe.Sizeof(expiries))
	return errno != syscall.EAGAIN
}

// wait returns when the fd signals readable, or with an error once close
// has been called.
func (w *fdWaiter) wait() error {
	waited := false
	err := w.conn.Read(func(fd uintptr) bool {
		if w.consume != nil {
			return w.consume(fd)
		}
		done := waited
		waited = true
		return done // false the first time: wait for readiness
	})
	if err != nil {
		return fmt.Errorf("wait for %s: %w", w.file.Name(), err)
	}
	return nil
}

// close ends a wait in progress and releases the fd. Safe to call twice.
func (w *fdWaiter) close() error { return w.file.Close() }
