// Package profiler runs heatscope's eBPF sampler: it opens one cpu-clock
// perf event per online CPU at a fixed period, attaches the BPF program of
// package bpf to each, and reads the variable-length records the program
// writes to a BPF ring buffer.
//
// Records are written without a wakeup (BPF_RB_NO_WAKEUP) and read by
// polling the ring at a fixed interval (100 ms by default), which keeps the
// agent's CPU cost and the wakeup IPIs out of the profile. Between polls the
// reader parks in Go's netpoller, not in a blocking epoll_wait (see
// fdWaiter for the measurement behind that). The one exception
// is the first record of a process the program has not seen before: it forces
// a wakeup so the agent can read /proc/PID/maps while the process still
// lives (short-lived processes would otherwise be gone before the next poll).
//
// Kernel time (CLOCK_MONOTONIC, from bpf_ktime_get_ns) is converted to wall
// time with an offset measured at start and re-measured every 10 s, so a
// clock step (NTP) shows up within 10 s.
package profiler
