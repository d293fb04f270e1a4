//go:build ignore

// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// heatscope's sampler: a perf_event program that runs on every cpu-clock tick
// of every CPU and sends one variable-length record per sample to a ring
// buffer: time, CPU, tgid, tid, comm, cgroup id, kernel and user frames.
//
// The first record of a process the program has not seen wakes the agent at
// once, so that it reads /proc/PID/maps while the process lives. Under
// process churn the agent switches to exit snapshots instead (mode): a
// second program, on the sched_process_exit tracepoint, writes the
// executable mappings of each sampled process to a second ring as it exits,
// while they are still there, and a new process no longer wakes the agent.
// The agent symbolizes a process that lived less than a poll interval from
// its snapshot, and reads /proc/PID/maps only of those still alive at the
// next poll. (Before Linux 6.16 the tracepoint fires after the mm is gone,
// and before 6.7 there is no task_vma iterator: no snapshots there.) The
// sampler itself needs no kernel BTF; the exit program does (CO-RE), which
// is why it is loaded only once churn calls for it.
//
// The record layouts are decoded by hand in profiler/record.go and
// profiler/maps.go: keep them in step (tests check the header sizes against
// the generated Go types).

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

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

// Executable mappings of one process image. kind is one of HS_MAP_*.
#define HS_MAP_FILE 0
#define HS_MAP_ANON 1
#define HS_MAP_VDSO 2
struct hs_mapping {
	__u64 start, end;
	__u64 offset;         // file offset mapped at start
	__u64 dev;            // the file's device (kernel dev_t); 0 without a file
	__u64 ino;
	__u64 ctime_ns;       // the inode's change time: a rewritten file is new
	__u32 kind;
	__u32 _pad;
};

#define MAX_MAPPINGS 128
#define HS_MAPS_TRUNCATED 1  // more than MAX_MAPPINGS executable mappings
#define HS_MAPS_FAILED 2     // the address space could not be walked (busy)
struct hs_maps {
	__u32 tgid;
	__u16 count;
	__u8 flags;
	__u8 _pad;
	struct hs_mapping m[MAX_MAPPINGS];
};

// Load-time options, rewritten by the agent before loading.
volatile const __u8 filter_pids = 0;      // only tgids in target_pids
volatile const __u64 filter_cgroup_id = 0; // only this cgroup (0: any)
volatile const __u8 collect_kernel = 1;
volatile const __u8 collect_user = 1;
extern int bpf_iter_task_vma_new(struct bpf_iter_task_vma *it,
				 struct task_struct *task, __u64 addr) __weak __ksym;
extern struct vm_area_struct *bpf_iter_task_vma_next(struct bpf_iter_task_vma *it) __weak __ksym;
extern void bpf_iter_task_vma_destroy(struct bpf_iter_task_vma *it) __weak __ksym;

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

// Processes already announced to the agent. Every record but a process's
// first is written without a wakeup and read by polling. on_exit forgets a
// process as it exits, so that a reused pid is new again.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} seen_pids SEC(".maps");

// mode[0] is 1 once the agent has attached on_exit: new processes are then
// marked pending instead of waking the agent.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} mode SEC(".maps");

// Sampled processes whose mappings on_exit snapshots.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} pending_pids SEC(".maps");

// Mapping snapshots, read by the agent before the samples at every poll.
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 18);
} maps_ring SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hs_maps);
} maps_scratch SEC(".maps");

// snapshot writes the executable mappings of the current task's address
// space to maps_ring.
static __always_inline void snapshot(__u32 tgid, struct task_struct *task)
{
	__u32 zero = 0;
	struct hs_maps *out = bpf_map_lookup_elem(&maps_scratch, &zero);
	if (!out)
		return;
	out->tgid = tgid;
	out->count = 0;
	out->flags = 0;
	out->_pad = 0;
	__u64 vdso = (__u64)BPF_CORE_READ(task, mm, context.vdso);
	struct bpf_iter_task_vma it;
	struct vm_area_struct *vma;
	// The loop keeps its state in the map value, not in registers, so
	// that the verifier sees every iteration alike and checks it once.
	if (bpf_iter_task_vma_new(&it, task, 0) == 0) {
		while ((vma = bpf_iter_task_vma_next(&it))) {
			if (!(vma->vm_flags & 0x4)) // VM_EXEC
				continue;
			__u32 i = out->count;
			if (i >= MAX_MAPPINGS) {
				out->flags |= HS_MAPS_TRUNCATED;
				break;
			}
			out->count = i + 1;
			struct hs_mapping *m = &out->m[i];
			m->start = vma->vm_start;
			m->end = vma->vm_end;
			m->offset = (__u64)vma->vm_pgoff << 12;
			m->dev = m->ino = m->ctime_ns = 0;
			m->_pad = 0;
			struct file *f = vma->vm_file;
			if (!f) {
				m->kind = m->start == vdso ? HS_MAP_VDSO : HS_MAP_ANON;
				continue;
			}
			m->kind = HS_MAP_FILE;
			struct inode *inode = f->f_inode;
			m->dev = inode->i_sb->s_dev;
			m->ino = inode->i_ino;
			// The top bits of i_ctime_nsec are flags (multigrain
			// timestamps' I_CTIME_QUERIED), not nanoseconds.
			if (bpf_core_field_exists(inode->i_ctime_sec))
				m->ctime_ns = (__u64)inode->i_ctime_sec * 1000000000 +
					      (inode->i_ctime_nsec & ((1U << 30) - 1));
		}
	} else {
		out->flags |= HS_MAPS_FAILED;
	}
	bpf_iter_task_vma_destroy(&it);
	__u64 size = offsetof(struct hs_maps, m) + (__u64)(out->count & (MAX_MAPPINGS * 2 - 1)) * sizeof(struct hs_mapping);
	if (size > sizeof(*out))
		size = sizeof(*out);
	bpf_ringbuf_output(&maps_ring, out, size, BPF_RB_NO_WAKEUP);
}

// on_exit runs as each thread exits, its mm still whole (since Linux 6.16
// the tracepoint comes before exit_mm): it snapshots the mappings of a
// sampled process the first time one of its threads exits, and forgets the
// process when its last thread does.
SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct *task, bool group_dead)
{
	__u32 tgid = task->tgid;
	if (group_dead)
		bpf_map_delete_elem(&seen_pids, &tgid);
	if (!task->mm || bpf_map_delete_elem(&pending_pids, &tgid) != 0)
		return 0;
	snapshot(tgid, task);
	return 0;
}

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
	// Look before inserting: an LRU hash update takes a free node (and
	// may evict) before it finds the key exists, on every sample.
	if (collect_user && tgid != 0 && !bpf_map_lookup_elem(&seen_pids, &tgid) &&
	    bpf_map_update_elem(&seen_pids, &tgid, &one, BPF_NOEXIST) == 0) {
		__u32 *snapshots = bpf_map_lookup_elem(&mode, &zero);
		if (snapshots && *snapshots)
			bpf_map_update_elem(&pending_pids, &tgid, &one, BPF_ANY);
		else
			flags = BPF_RB_FORCE_WAKEUP;
	}

	__u64 size = offsetof(struct hs_sample, frames) + kbytes + ubytes;
	if (bpf_ringbuf_output(&events, s, size, flags) < 0)
		c->lost++;
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
