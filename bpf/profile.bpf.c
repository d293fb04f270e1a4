//go:build ignore

// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// heatscope's sampler: a perf_event program that runs on every cpu-clock tick
// of every CPU and sends one variable-length record per sample to a ring
// buffer: time, CPU, tgid, tid, comm, cgroup id, kernel and user frames.
//
// The record layout is decoded by hand in profiler/record.go: keep the two in
// step (a test checks the header size against the generated Go type).

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#define MAX_FRAMES 127
// Room for two full stacks plus the slack the verifier needs: the user stack
// is written at a variable offset of at most 1023 bytes (see below), so the
// array must hold 1023 + MAX_FRAMES * 8 bytes past its start.
#define FRAME_SLOTS 256

struct hs_sample {
	__u64 ktime_ns;       // bpf_ktime_get_ns(): CLOCK_MONOTONIC
	__u64 cgroup_id;      // cgroup v2 id of the current task
	__u32 tgid;           // process id
	__u32 tid;            // thread id
	__u32 cpu;
	__u16 kernel_frames;  // number of kernel frames at frames[0]
	__u16 user_frames;    // number of user frames after the kernel ones
	char comm[16];
	__u64 frames[FRAME_SLOTS];
};

// Per-CPU counters, summed by the agent. Every lost sample is counted.
struct hs_counters {
	__u64 samples;        // program runs that passed the filters
	__u64 lost;           // records the ring buffer had no room for
	__u64 kernel_stack_errors;
	__u64 user_stack_errors;
	__u64 filtered;       // program runs skipped by the pid/cgroup filters
};

// Load-time options, rewritten by the agent before loading.
volatile const __u8 filter_pids = 0;      // only tgids in target_pids
volatile const __u64 filter_cgroup_id = 0; // only this cgroup (0: any)
volatile const __u8 collect_kernel = 1;
volatile const __u8 collect_user = 1;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20); // resized by the agent before loading
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hs_sample);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hs_counters);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u8);
} target_pids SEC(".maps");

// Processes already announced to the agent. A pid's first record wakes the
// agent at once so that it reads /proc/PID/maps while the process lives;
// every other record is written without a wakeup and read by polling.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} seen_pids SEC(".maps");

SEC("perf_event")
int profile(struct bpf_perf_event_data *ctx)
{
	__u32 zero = 0;
	struct hs_counters *c = bpf_map_lookup_elem(&stats, &zero);
	if (!c)
		return 0;

	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	if (filter_pids && !bpf_map_lookup_elem(&target_pids, &tgid)) {
		c->filtered++;
		return 0;
	}
	__u64 cgroup_id = bpf_get_current_cgroup_id();
	if (filter_cgroup_id && cgroup_id != filter_cgroup_id) {
		c->filtered++;
		return 0;
	}

	struct hs_sample *s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		return 0;
	c->samples++;

	s->ktime_ns = bpf_ktime_get_ns();
	s->cgroup_id = cgroup_id;
	s->tgid = tgid;
	s->tid = (__u32)id;
	s->cpu = bpf_get_smp_processor_id();
	bpf_get_current_comm(s->comm, sizeof(s->comm));

	long kbytes = 0;
	if (collect_kernel) {
		kbytes = bpf_get_stack(ctx, s->frames, MAX_FRAMES * 8, 0);
		if (kbytes < 0) {
			c->kernel_stack_errors++;
			kbytes = 0;
		}
	}
	// The mask gives the verifier a bound on the offset the user stack is
	// written at; bpf_get_stack never returns more than MAX_FRAMES * 8.
	kbytes &= 1023;

	long ubytes = 0;
	if (collect_user && tgid != 0) {
		ubytes = bpf_get_stack(ctx, (void *)s->frames + kbytes,
				       MAX_FRAMES * 8, BPF_F_USER_STACK);
		if (ubytes < 0) {
			c->user_stack_errors++;
			ubytes = 0;
		}
	}
	ubytes &= 1023;

	s->kernel_frames = kbytes / 8;
	s->user_frames = ubytes / 8;

	__u64 flags = BPF_RB_NO_WAKEUP;
	__u8 one = 1;
	if (bpf_map_update_elem(&seen_pids, &tgid, &one, BPF_NOEXIST) == 0)
		flags = BPF_RB_FORCE_WAKEUP;

	__u64 size = offsetof(struct hs_sample, frames) + kbytes + ubytes;
	if (bpf_ringbuf_output(&events, s, size, flags) < 0)
		c->lost++;
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
