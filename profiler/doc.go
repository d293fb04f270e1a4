// Package profiler runs heatscope's eBPF sampler: it opens one cpu-clock
// perf event per online CPU at a fixed period, attaches the BPF program of
// package bpf to each, and reads the variable-length records the program
// writes to a BPF ring buffer.
//
// Records are written without a wakeup (BPF_RB_NO_WAKEUP) and read by
// polling the ring at a fixed interval (250 ms by default), which keeps the
// agent's CPU cost and the wakeup IPIs out of the profile. Between polls the
// reader parks in Go's netpoller, not in a blocking epoll_wait (see
// fdWaiter for the measurement behind that). A process that exits before
// the next poll leaves its executable mappings behind: a second program, on
// the sched_process_exit tracepoint, snapshots them into a second ring
// (Maps, OnMaps), read before the samples at each poll. On kernels that
// cannot take the snapshot (before Linux 6.16) the first record of each new
// process forces a wakeup instead, so the agent can read /proc/PID/maps
// while the process still lives.
//
// Kernel time (CLOCK_MONOTONIC, from bpf_ktime_get_ns) is converted to wall
// time with an offset measured at start and re-measured every 10 s, so a
// clock step (NTP) shows up within 10 s.
package profiler
