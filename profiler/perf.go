package profiler

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// perfEvent is one cpu-clock sampling event with the BPF program attached.
type perfEvent struct {
	cpu  int
	fd   int
	link link.Link // nil when attached with the PERF_EVENT_IOC_SET_BPF ioctl
}

// openCPUClock opens a cpu-clock software event on one CPU that overflows
// every periodNs nanoseconds of CPU time. A fixed period, not frequency mode:
// the kernel's frequency mode starts with far too short intervals.
func openCPUClock(cpu int, periodNs uint64) (int, error) {
	attr := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_SOFTWARE,
		Config: unix.PERF_COUNT_SW_CPU_CLOCK,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Sample: periodNs,
	}
	fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return -1, perfOpenError(cpu, err)
	}
	return fd, nil
}

// attach attaches prog to the perf event fd with a BPF link, or with the
// PERF_EVENT_IOC_SET_BPF ioctl on kernels without perf links (< 5.15) or
// when forceIoctl is set.
func attach(fd int, prog *ebpf.Program, forceIoctl bool) (link.Link, error) {
	if !forceIoctl {
		l, err := link.AttachRawLink(link.RawLinkOptions{
			Target:  fd,
			Program: prog,
			Attach:  ebpf.AttachPerfEvent,
		})
		if err == nil {
			return l, nil
		}
		if !errors.Is(err, ebpf.ErrNotSupported) && !errors.Is(err, unix.EINVAL) {
			return nil, fmt.Errorf("attach BPF link: %w", err)
		}
	}
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_BPF, prog.FD()); err != nil {
		return nil, fmt.Errorf("attach with PERF_EVENT_IOC_SET_BPF: %w", err)
	}
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
		return nil, fmt.Errorf("enable perf event: %w", err)
	}
	return nil, nil
}

// setPeriod sets the event's sample period (ns of CPU time) in place.
func (e *perfEvent) setPeriod(periodNs uint64) error {
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(e.fd), unix.PERF_EVENT_IOC_PERIOD, uintptr(unsafe.Pointer(&periodNs)))
	if errno != 0 {
		return fmt.Errorf("set sample period on CPU %d: %w", e.cpu, errno)
	}
	return nil
}

// close detaches the program and closes the event.
func (e *perfEvent) close() error {
	var err error
	if e.link != nil {
		err = e.link.Close()
	} else {
		_ = unix.IoctlSetInt(e.fd, unix.PERF_EVENT_IOC_DISABLE, 0)
	}
	if cerr := unix.Close(e.fd); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("close perf event on CPU %d: %w", e.cpu, err)
	}
	return nil
}
