//go:build ignore

// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// heatscope's sampler: a perf_event program that runs on every cpu-clock tick
// of every CPU and sends one variable-length record per sample to a ring
// buffer: time, CPU, tgid, tid, comm, cgroup id, kernel and user frames,
// and (profile_dwarf, for a process running a CPython the agent found) the
// thread's Python frames, read from the interpreter's own structures with
// the offsets package pyinterp gives per version (see walk_python).
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
// Python frames per sample (profile_dwarf), each two slots (struct
// hs_py_frame), after the user frames.
#define MAX_PY_FRAMES 96
// Room for the stacks plus the slack the verifier needs: the user stack is
// written at a variable offset of at most 1023 bytes (see below), the
// Python frames at one of at most 2047, so the array must hold 2047 +
// MAX_PY_FRAMES * 16 bytes past its start.
#define FRAME_SLOTS 448

struct hs_sample {
	__u64 ktime_ns;       // bpf_ktime_get_ns(): CLOCK_MONOTONIC
	__u64 cgroup_id;      // cgroup v2 id of the current task
	__u32 tgid;           // process id
	__u32 tid;            // thread id
	__u32 cpu;
	__u16 kernel_frames;  // number of kernel frames at frames[0]
	__u16 user_frames;    // number of user frames after the kernel ones
	char comm[16];
	// Bit i is set when user frame i+1 was found with an unwind table
	// (frame 0, the sampled pc, needs no unwinding); clear for frame
	// pointers. Only profile_dwarf sets bits.
	__u64 dwarf_frames[2];
	// Python frames (struct hs_py_frame) after the user frames, and
	// HS_PY_* flags saying how the walk of them ended.
	__u16 python_frames;
	__u16 python_flags;
	__u32 _pad;
	__u64 frames[FRAME_SLOTS];
};

// One Python frame, innermost first: the code object's address, the byte
// offset of the instruction being run in its co_code_adaptive (what
// PyCode_Addr2Line takes; 0xffffffff when the frame points before its
// code), HS_PYF_* flags.
#define HS_PYF_ENTRY 1      // the first frame of a _PyEval_EvalFrameDefault call
// The innermost frame of a _PyEval_EvalFrameDefault call, not a
// generator's: the one frame of a call that may still be being set up
// (incomplete: its instruction before its code's _co_firsttraceable),
// which the symbolizer tells from the code object it reads anyway.
#define HS_PYF_MAY_BE_INCOMPLETE 2
struct hs_py_frame {
	__u64 code;
	__u32 offset;
	__u32 flags;
};
// hs_sample.python_flags.
#define HS_PY_TRUNCATED 1   // more than MAX_PY_FRAMES frames: the outer ones left out
#define HS_PY_READ_ERROR 2  // a frame could not be read, or made no sense: the chain is cut there
#define HS_PY_NO_THREAD 4   // an interpreter, but no thread state for this thread
#define HS_PY_WALKED 8      // the process has an interpreter, and its thread was looked for

// Per-CPU counters, summed by the agent. Every lost sample is counted.
struct hs_counters {
	__u64 samples;        // program runs that passed the filters
	__u64 lost;           // records the ring buffer had no room for
	__u64 kernel_stack_errors;
	__u64 user_stack_errors;
	__u64 filtered;       // program runs skipped by the pid/cgroup filters
	// profile_dwarf only: user stacks walked with the process's tables,
	// and those walked with frame pointers because its tables were not
	// in yet; walks ended at an unsupported row, or at the frame limit.
	__u64 dwarf_walks;
	__u64 fp_walks;
	__u64 unsupported_rows;
	__u64 truncated_walks;
	// profile_dwarf only: samples of a process with a Python
	// interpreter; of those, the ones of a thread with no thread state
	// (a thread Python does not know, or not found within
	// MAX_PY_THREADS), whose frame chain a read cut, or longer than
	// MAX_PY_FRAMES.
	__u64 py_walks;
	__u64 py_no_thread;
	__u64 py_read_errors;
	__u64 py_truncated;
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
	__uint(max_entries, 1 << 19);
} maps_ring SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hs_maps);
} maps_scratch SEC(".maps");


// Unwind tables (profile_dwarf). Row kinds, as unwind.CFAKind/RBPKind.
#define HS_CFA_NONE 0
#define HS_CFA_RSP 1
#define HS_CFA_RBP 2
#define HS_CFA_PLT 3
#define HS_CFA_SIGNAL 4
#define HS_CFA_UNSUPPORTED 5
#define HS_CFA_END 6
#define HS_RBP_UNCHANGED 0
#define HS_RBP_AT_CFA 1

// One row of a binary's table (unwind.Row): from pc (an ELF address) to
// the next row's, CFA = (rsp or rbp) + cfa_off, the return address is at
// CFA - 8, the caller's rbp at CFA + rbp_off.
struct hs_row {
	__u32 pc;
	__s16 cfa_off;
	__s16 rbp_off;
	__u8 cfa;
	__u8 rbp;
	__u8 arg;             // HS_CFA_PLT: the (pc & 15) threshold
	__u8 _pad;
};

// Entries of a table's index (unwind.Index), after its rows: the
// addresses from index_pc on are cut into buckets of 1 << shift bytes, and
// bucket b's pc is covered by one of rows first[b] to first[b+1]. Entry j
// holds first[2j], first[2j+1] and first[2j+2].
struct hs_bucket {
	__u32 first[3];
};

// One executable mapping of a process: table is the index of its rows in
// unwind_tables, or HS_NO_TABLE (frame pointers).
#define HS_NO_TABLE 0xffffffff
struct hs_umap {
	__u64 start, end;
	__u64 bias;           // pc - bias is the ELF address
	__u32 table;
	__u32 rows;           // rows at keys 0 to rows-1, then the index
	__u32 index_pc;       // the first row's pc: bucket 0's start
	__u32 buckets;
	__u8 shift;
	__u8 _pad[7];
};

#define MAX_UMAPS 64
#define HS_PROC_TRUNCATED 1 // more executable mappings than MAX_UMAPS
// A process's executable mappings, sorted by start, filled by the agent.
struct hs_proc {
	__u64 mm;             // the mm they were read for: an exec changes it
	__u32 count;
	__u32 flags;
	// A number the agent gives each entry it writes, never twice, from
	// 1: what walk_cache's rows are kept under.
	__u64 gen;
	// The address of _PyRuntime in the process (0: no interpreter
	// known), and the index of its layout in py_layouts.
	__u64 py_runtime;
	__u32 py_layout;
	// The thread the Python walk found a thread state for last, and
	// that thread state: written by the BPF program (the agent writes
	// 0), checked at each use as py_threads' entries are. On the cache
	// line the walk reads anyway, where a py_threads lookup (a hash)
	// touched lines no other part of the sample did: 0.6-1.2 us a
	// sample in a VM at a load of 12-20.
	__u32 py_tid;
	__u64 py_tstate;
	struct hs_umap m[MAX_UMAPS];
};

// Each binary's rows are an array map of their own, sized to fit
// (BPF_F_INNER_MAP: inner maps of any size), created by the agent and
// filled through a memory mapping (BPF_F_MMAPABLE): a batch update of a
// 10 MB table cost the agent about 150 ms of system time, a copy into the
// mapping a few.
#define MAX_TABLES 4096
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, MAX_TABLES);
	__type(key, __u32);
	__array(values, struct {
		__uint(type, BPF_MAP_TYPE_ARRAY);
		__uint(map_flags, BPF_F_INNER_MAP | BPF_F_MMAPABLE);
		__uint(max_entries, 1);
		__type(key, __u32);
		__type(value, struct hs_row);
	});
} unwind_tables SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct hs_proc);
} unwind_procs SEC(".maps");

// Processes whose mappings the agent should (re)read: new ones, those
// that exec'd (another mm), those with a pc in no known mapping (dlopen).
// The value is the mm seen.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u64);
} unwind_pending SEC(".maps");

// asks counts the requests written to unwind_pending. The agent reads it
// through the memory mapping of .bss before each poll, and empties
// unwind_pending (a batch syscall over its 1024 buckets) only when it moved:
// on a node where no process is new that was most of the table walk's cost
// to the agent.
__u64 asks = 0;


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


// The state of one user stack walk, kept on the stack of the program
// that calls bpf_loop. Since Linux 6.7 the verifier checks a bpf_loop
// callback like a loop, until its state repeats: nothing here may be used
// to index memory (that makes the verifier track its exact value, and
// every frame a new state), so the frames go to walk_frames by key, and
// the per-frame method bits are set by shifts.
struct walk {
	struct hs_proc *proc; // the process's mappings, looked up once
	struct window *win;   // the CPU's stack_windows entry
	__u64 gen;            // proc->gen
	__u64 ip, sp, bp;
	__u64 dwarf_lo, dwarf_hi;
	__u32 key;            // walk_frames key of the next frame
	__u32 cache_base;     // the CPU's first walk_cache key
	__u32 n;              // user frames written
	__u32 unsupported;
	__u32 ended;          // the walk reached the outermost frame or gave up
	__u32 unknown_pc;     // a pc in no mapping of the process
};

// The frames of the walk in progress, MAX_WALK_FRAMES per CPU, copied into
// the sample when it is done. Sized by the agent (CPUs * MAX_WALK_FRAMES).
#define MAX_WALK_FRAMES 128
#define WALK_CHUNK 16         // frames copied into the record at once
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_WALK_FRAMES);
	__type(key, __u32);
	__type(value, __u64);
} walk_frames SEC(".maps");

// The rows the walk found last on each CPU, WALK_CACHE_SLOTS per CPU (sized
// by the agent), by pc and process entry (hs_proc.gen), in one slot per pc
// (a hash of it). A stack's frames above its leaf come back sample after
// sample; a hit reads one cache line where a search reads the process's
// mappings and the table's index and rows, in vmalloc'd memory the CPU has
// most likely not touched since its last sample (cache and TLB misses).
// An entry the agent rewrites has a new gen: its rows are not reused.
#define WALK_CACHE_BITS 8
#define WALK_CACHE_SLOTS (1 << WALK_CACHE_BITS)
struct hs_cached_row {
	__u64 pc;
	__u64 gen;            // 0: empty
	struct hs_row row;
	__u32 _pad;
};
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WALK_CACHE_SLOTS);
	__type(key, __u32);
	__type(value, struct hs_cached_row);
} walk_cache SEC(".maps");

// The row the walk found last for a stack's leaf (the sampled pc), with
// the range of pcs it covers (in the process's addresses, up to the next
// row or the mapping's end), per CPU in one of LEAF_CACHE_SLOTS slots by
// process entry (a hash of hs_proc.gen). A leaf's pc moves from sample to
// sample within a function (an interpreter's evaluation loop, a hot
// loop), so walk_cache, by exact pc, seldom has it and the walk searched
// the tables for it at nearly every sample of a Python process: this has
// it while the pc stays within one row.
#define LEAF_CACHE_BITS 4
#define LEAF_CACHE_SLOTS (1 << LEAF_CACHE_BITS)
struct hs_leaf_row {
	__u64 start, end;     // the pcs the row covers: start <= pc < end
	__u64 gen;            // 0: empty
	struct hs_row row;
	__u32 _pad;
};
struct hs_leaf_rows {
	__u64 pc;             // the pc sampled: the leaf of the walk in progress
	struct hs_leaf_row slot[LEAF_CACHE_SLOTS];
};
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hs_leaf_rows);
} leaf_cache SEC(".maps");

static __always_inline __u64 read_user(__u64 addr)
{
	__u64 v = 0;
	if (bpf_probe_read_user(&v, sizeof(v), (void *)addr) < 0)
		return 0;
	return v;
}

// User memory a walk reads, WINDOW bytes at a time: the user stack
// (stack_windows: a walk's return addresses and saved registers lie close
// together, so one read serves the words of several frames, where a
// bpf_probe_read_user per word, two per frame, was most of a walk's time)
// and the interpreter frames of the Python walk (py_windows). b has room past the window for the fields of a frame
// that starts in it (at most 255 bytes in). at and valid say what b
// holds; each walk starts with valid clear (the memory has moved since).
#define WINDOW 1024
struct window {
	__u64 at;             // the address b was read from
	__u32 valid;
	__u32 _pad;
	__u8 b[WINDOW + 256 + 8];
};
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct window);
} stack_windows SEC(".maps");

// window_at returns where in win->b the need bytes at addr are, reading a
// new window unless the one read last holds them, or -1 where they cannot
// be read. A new window starts `below` bytes below addr, or at addr's
// 4 KB block if that is higher, and ends within the block unless the bytes
// needed cross its end: it is readable whenever they are.
//
// It is a global function, checked once by the verifier on its own: the
// window's state lives in map memory, which the verifier does not track,
// and a walk sees one call with an unknown result (inlined in walk_step,
// with the window's address in struct walk, the verifier went through two
// thirds more instructions).
__noinline long window_at(struct window *win, __u64 addr, __u64 below, __u64 need)
{
	if (!win || need > WINDOW)
		return -1;
	if (win->valid && addr - win->at <= WINDOW - need)
		return addr - win->at;
	__u64 block = addr & ~4095ULL;
	__u64 at = addr - below;
	if (at < block || at > addr)
		at = block;
	if (at > block + 4096 - WINDOW)
		at = block + 4096 - WINDOW;
	if (addr - at > WINDOW - need)
		at = addr + need - WINDOW;
	if (bpf_probe_read_user(win->b, WINDOW, (void *)at) < 0) {
		win->valid = 0;
		return -1;
	}
	win->at = at;
	win->valid = 1;
	return addr - at;
}

// stack_word returns the 8-byte word at addr of the walk's user stack (0
// where it cannot be read), from a window read from a little below addr
// (a frame's saved rbp is below its return address) up. Global too, for
// the verifier's sake as window_at.
__noinline __u64 stack_word(struct window *win, __u64 addr)
{
	if (!win)
		return 0;
	if (addr & 7)
		return read_user(addr); // no frame's word: read alone
	long off = window_at(win, addr, 64, 8);
	if (off < 0)
		return 0;
	return *(__u64 *)&win->b[off & (WINDOW - 8)];
}

// A binary search for a process's mapping, run by bpf_loop.
struct umap_search {
	struct hs_proc *proc;
	__u32 lo, hi;         // the last mapping starting at or before pc is lo-1
	__u64 pc;
};

static long umap_search_step(__u64 i, struct umap_search *us)
{
	if (us->lo >= us->hi)
		return 1;
	__u32 mid = us->lo + (us->hi - us->lo) / 2;
	if (us->proc->m[mid & (MAX_UMAPS - 1)].start <= us->pc)
		us->lo = mid + 1;
	else
		us->hi = mid;
	return 0;
}

// find_umap returns the index of the process's mapping holding pc, or -1.
static __always_inline int find_umap(struct hs_proc *proc, __u64 pc)
{
	__u32 count = proc->count;
	if (count > MAX_UMAPS)
		count = MAX_UMAPS;
	struct umap_search us = {.proc = proc, .lo = 0, .hi = count, .pc = pc};
	bpf_loop(8, umap_search_step, &us, 0);
	if (us.lo == 0)
		return -1;
	__u32 idx = (us.lo - 1) & (MAX_UMAPS - 1);
	if (pc >= proc->m[idx].end)
		return -1;
	return idx;
}

// A binary search for a row, run by bpf_loop.
struct row_search {
	void *rows;
	__u32 lo, hi;         // the last row at or before pc is lo-1
	__u32 pc;
};

static long row_search_step(__u64 i, struct row_search *rs)
{
	if (rs->lo >= rs->hi)
		return 1;
	__u32 mid = rs->lo + (rs->hi - rs->lo) / 2;
	struct hs_row *r = bpf_map_lookup_elem(rs->rows, &mid);
	if (!r) {
		rs->lo = 0;
		return 1;
	}
	if (r->pc <= rs->pc)
		rs->lo = mid + 1;
	else
		rs->hi = mid;
	return 0;
}

// find_row returns the last row of a mapping's table at or before pc, or
// NULL. The table's index gives the few rows to search (about 6 for libc).
// *end is set to the next row's pc (the end of the pcs the row covers),
// or 0xffffffff after the last row.
static __always_inline struct hs_row *find_row(struct hs_umap *m, __u32 pc, __u32 *end)
{
	__u32 table = m->table;
	void *rows = bpf_map_lookup_elem(&unwind_tables, &table);
	if (!rows || pc < m->index_pc)
		return NULL;
	__u64 b = (__u64)(pc - m->index_pc) >> (m->shift & 63);
	__u32 lo, hi;
	if (b >= m->buckets) {
		// Past the last bucket: the last row.
		lo = m->rows - 1;
		hi = m->rows;
	} else {
		__u32 key = m->rows + (__u32)(b >> 1);
		struct hs_bucket *x = bpf_map_lookup_elem(rows, &key);
		if (!x)
			return NULL;
		if (b & 1) {
			lo = x->first[1];
			hi = x->first[2] + 1;
		} else {
			lo = x->first[0];
			hi = x->first[1] + 1;
		}
	}
	struct row_search rs = {.rows = rows, .lo = lo, .hi = hi, .pc = pc};
	bpf_loop(32, row_search_step, &rs, 0);
	if (rs.lo == 0)
		return NULL;
	__u32 idx = rs.lo - 1;
	*end = 0xffffffff;
	if (rs.lo < m->rows) {
		struct hs_row *next = bpf_map_lookup_elem(rows, &rs.lo);
		if (!next)
			return NULL;
		*end = next->pc;
	}
	return bpf_map_lookup_elem(rows, &idx);
}

// frame_row finds the row for pc in the process's tables, in the CPU's
// slice of walk_cache (from cache_base) or else by searching them (and
// then keeps it there), and copies it to out. It returns 1 for a row, 0
// for none (frame pointers), -1 for a pc in no mapping of the process.
// For the sampled pc (the leaf, which walk_user writes in the CPU's
// leaf_cache) the CPU's leaf_cache is looked in first, and kept too.
//
// It is a global function, which the verifier checks once on its own: in
// walk_step, a cache hit, skipping the searches' nested loops, made the
// walk's states at each frame differ beyond the verifier's limit of a
// million instructions. The leaf is told by its pc, kept in map memory,
// not by the caller: telling it by the frame's number in walk_step (a
// branch there, 951387a, reverted; or n passed in an argument) made the
// verifier go through 6 to 23 times more instructions (0.2 to 0.75 s of
// CPU at every load).
__noinline int frame_row(struct hs_proc *proc, __u64 pc, __u64 gen, __u32 cache_base, struct hs_row *out)
{
	if (!proc || !out)
		return 0;
	struct hs_leaf_row *leaf = NULL;
	__u32 zero = 0;
	struct hs_leaf_rows *leaves = bpf_map_lookup_elem(&leaf_cache, &zero);
	if (leaves && leaves->pc == pc) {
		leaf = &leaves->slot[(gen * 0x9E3779B97F4A7C15ULL) >> (64 - LEAF_CACHE_BITS)];
		if (leaf->gen == gen && pc >= leaf->start && pc < leaf->end) {
			*out = leaf->row;
			return 1;
		}
	}
	// Two ways: the pair of slots (one cache line) the pc's hash picks.
	__u32 ckey = cache_base + ((__u32)((pc * 0x9E3779B97F4A7C15ULL) >> (64 - WALK_CACHE_BITS)) & ~1U);
	struct hs_cached_row *cached = bpf_map_lookup_elem(&walk_cache, &ckey);
	ckey++;
	struct hs_cached_row *other = bpf_map_lookup_elem(&walk_cache, &ckey);
	if (!cached || !other)
		return 0;
	if (cached->pc == pc && cached->gen == gen) {
		*out = cached->row;
		return 1;
	}
	if (other->pc == pc && other->gen == gen) {
		*out = other->row;
		return 1;
	}
	// The row found goes to a way that holds nothing of this process
	// entry, else to either at random: two pcs of one stack whose hash
	// is the same end in the two ways after a few samples, where one
	// slot had them evict each other at every sample (a search each: 2.3 a
	// sample in one busy.py of ten measured, 0.4-0.6 in the others).
	if (other->gen != gen || (cached->gen == gen && (bpf_get_prandom_u32() & 1)))
		cached = other;
	int idx = find_umap(proc, pc);
	if (idx < 0)
		return (proc->flags & HS_PROC_TRUNCATED) ? 0 : -1;
	struct hs_umap *m = &proc->m[idx & (MAX_UMAPS - 1)];
	if (m->table == HS_NO_TABLE || pc - m->bias > 0xffffffffULL)
		return 0;
	__u32 end = 0;
	struct hs_row *r = find_row(m, (__u32)(pc - m->bias), &end);
	if (!r)
		return 0;
	*out = *r;
	// The row's pcs within this mapping only (a table covers the whole
	// binary, a mapping part of it).
	__u64 start = m->bias + r->pc, stop = m->bias + end;
	if (start < m->start)
		start = m->start;
	if (stop > m->end)
		stop = m->end;
	// The walk keeps proc from its start, and a hash map reuses a freed
	// element at once: if the agent replaced the process's entry since,
	// the element now holds another gen (the agent never reuses one), and
	// what was read from it is not this walk's. The walk goes on by frame
	// pointers for this frame.
	if (proc->gen != gen)
		return 0;
	if (leaf) {
		leaf->start = start;
		leaf->end = stop;
		leaf->gen = gen;
		leaf->row = *out;
	}
	if (cached) {
		cached->pc = pc;
		cached->gen = gen;
		cached->row = *out;
	}
	return 1;
}

// walk_step records the frame at w->ip and unwinds one frame: with the
// row of its binary's table where there is one, with the frame pointer
// otherwise. It returns 1 to stop the loop.
static long walk_step(__u64 i, struct walk *w)
{
	if (w->n >= MAX_FRAMES || w->ip == 0)
		goto stop;
	__u64 *slot = bpf_map_lookup_elem(&walk_frames, &w->key);
	if (!slot)
		goto stop;
	*slot = w->ip;
	w->key++;
	w->n++;
	// A return address points after its call; the call is what the
	// caller's row must cover (a call may be a function's last
	// instruction).
	__u64 pc = w->n == 1 ? w->ip : w->ip - 1;
	struct hs_row row = {};
	if (frame_row(w->proc, pc, w->gen, w->cache_base, &row) < 0)
		w->unknown_pc = 1;
	__u64 cfa;
	if (row.cfa != HS_CFA_NONE) {
		struct hs_row *r = &row;
		switch (r->cfa) {
		case HS_CFA_RSP:
			cfa = w->sp + r->cfa_off;
			break;
		case HS_CFA_RBP:
			if (w->bp == 0)
				goto stop;
			cfa = w->bp + r->cfa_off;
			break;
		case HS_CFA_PLT:
			cfa = w->sp + r->cfa_off + (((pc & 15) >= r->arg) ? 8 : 0);
			break;
		case HS_CFA_SIGNAL:
			// rsp points at the ucontext the kernel pushed:
			// uc_mcontext (struct sigcontext) is 40 bytes in,
			// and holds rbp at 80, rsp at 120, rip at 128.
			w->bp = stack_word(w->win, w->sp + 40 + 80);
			w->ip = stack_word(w->win, w->sp + 40 + 128);
			w->sp = stack_word(w->win, w->sp + 40 + 120);
			goto dwarf;
		case HS_CFA_UNSUPPORTED:
			w->unsupported = 1;
			goto stop;
		default: // HS_CFA_END: the outermost frame
			goto stop;
		}
		__u64 ra = stack_word(w->win, cfa - 8);
		if (r->rbp == HS_RBP_AT_CFA)
			w->bp = stack_word(w->win, cfa + r->rbp_off);
		else if (r->rbp != HS_RBP_UNCHANGED)
			w->bp = 0;
		w->sp = cfa;
		w->ip = ra;
		goto dwarf;
	}
	// Frame pointers: the caller's rbp at rbp, the return address above.
	if (w->bp == 0 || w->bp < w->sp)
		goto stop;
	w->ip = stack_word(w->win, w->bp + 8);
	w->sp = w->bp + 16;
	w->bp = stack_word(w->win, w->bp);
	return 0;
dwarf:
	// Frame n (the caller just found) has bit n-1.
	if (w->n <= 64)
		w->dwarf_lo |= 1ULL << ((w->n - 1) & 63);
	else
		w->dwarf_hi |= 1ULL << ((w->n - 65) & 63);
	return 0;
stop:
	w->ended = 1;
	return 1;
}

// request_maps asks the agent to read the process's mappings, and
// reports whether the request is new: none was waiting, or the one
// waiting was for another image (an exec since), which it replaces.
static __always_inline int request_maps(__u32 tgid, __u64 mm)
{
	if (bpf_map_update_elem(&unwind_pending, &tgid, &mm, BPF_NOEXIST) != 0) {
		__u64 *asked = bpf_map_lookup_elem(&unwind_pending, &tgid);
		if (!asked || *asked == mm)
			return 0;
		*asked = mm;
	}
	__sync_fetch_and_add(&asks, 1);
	return 1;
}

// runs_python reports whether the task's executable file's name starts
// with "python" (python3.11; python3 in a virtual environment; the file a
// symbolic link such as python3 names), as the agent's
// pyinterp.MayBeInterpreter looks for. A new image of one (a new
// process, or an exec) wakes the agent at its first request for its
// mappings: its Python frames are walked only once the agent has written
// its entry, and the next poll was up to a poll interval away (with exit
// snapshots on, a new process wakes nobody; an exec never did). Other
// processes wake nobody.
static __always_inline int runs_python(struct task_struct *task)
{
	struct file *exe = BPF_CORE_READ(task, mm, exe_file);
	if (!exe)
		return 0;
	const unsigned char *name = BPF_CORE_READ(exe, f_path.dentry, d_name.name);
	char b[6] = {};
	if (!name || bpf_probe_read_kernel(b, sizeof(b), name) < 0)
		return 0;
	return b[0] == 'p' && b[1] == 'y' && b[2] == 't' && b[3] == 'h' && b[4] == 'o' && b[5] == 'n';
}

// walk_user walks the current task's user stack with its tables into
// s->frames at byte offset kbytes, and returns the bytes written, or -1
// for a process whose tables are not in yet (the caller then uses frame
// pointers). It sets *wake for a new image of a Python executable
// (runs_python) that asked for its mappings.
static __always_inline long walk_user(struct hs_sample *s, __u32 tgid, long kbytes,
				      struct hs_counters *c, struct hs_proc **procp, __u64 *usp, int *wake)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 mm = (__u64)task->mm;
	if (!mm)
		return 0; // a kernel thread: no user stack
	struct hs_proc *proc = bpf_map_lookup_elem(&unwind_procs, &tgid);
	if (!proc || proc->mm != mm) {
		if (request_maps(tgid, mm) && runs_python(task))
			*wake = 1;
		return -1;
	}
	*procp = proc;
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
	if (!regs)
		return -1;
	__u32 zero = 0;
	struct window *win = bpf_map_lookup_elem(&stack_windows, &zero);
	if (!win)
		return -1;
	struct hs_leaf_rows *leaves = bpf_map_lookup_elem(&leaf_cache, &zero);
	if (!leaves)
		return -1;
	win->valid = 0;
	struct walk w = {};
	w.proc = proc;
	w.win = win;
	w.gen = proc->gen;
	w.ip = BPF_CORE_READ(regs, ip);
	w.sp = BPF_CORE_READ(regs, sp);
	*usp = w.sp;
	w.bp = BPF_CORE_READ(regs, bp);
	leaves->pc = w.ip;
	__u32 cpu = bpf_get_smp_processor_id();
	__u32 first = cpu * MAX_WALK_FRAMES;
	w.key = first;
	w.cache_base = cpu * WALK_CACHE_SLOTS;
	// n starts at 0, read back from the map value so that the verifier
	// does not know it: a known count is a new state at every frame.
	s->user_frames = 0;
	w.n = *(volatile __u16 *)&s->user_frames;
	bpf_loop(MAX_FRAMES, walk_step, &w, 0);
	__u64 *frames = bpf_map_lookup_elem(&walk_frames, &first);
	if (!frames)
		return -1;
	// The CPU's frames are consecutive in the array's one allocation;
	// they are copied in chunks of a constant size, so that the verifier
	// need not know the exact count (see struct walk), as many chunks as
	// hold them (copying all 127 slots cost a fixed part of each sample).
	for (__u32 c = 0; c < MAX_WALK_FRAMES / WALK_CHUNK; c++) {
		if (c * WALK_CHUNK >= w.n)
			break;
		if (bpf_probe_read_kernel((void *)s->frames + (kbytes & 1023) + c * WALK_CHUNK * 8,
					  WALK_CHUNK * 8, (void *)frames + c * WALK_CHUNK * 8) < 0)
			return -1;
	}
	// The count goes through the map value and is read back: the
	// verifier then does not trace the ring buffer record's size back
	// into the loop.
	s->user_frames = w.n;
	long bytes = (*(volatile __u16 *)&s->user_frames & 127) * 8;
	if (w.unknown_pc)
		request_maps(tgid, mm);
	if (w.unsupported)
		c->unsupported_rows++;
	if (!w.ended)
		c->truncated_walks++;
	s->dwarf_frames[0] = w.dwarf_lo;
	s->dwarf_frames[1] = w.dwarf_hi;
	return bytes;
}

// Python: where one CPython version keeps what the walk follows
// (pyinterp.Layout, written by the agent), offsets in bytes. Every frame
// field is within the first PY_FRAME_READ bytes of a frame, and a thread
// state's native_thread_id and frame (or cframe) pointer within its first
// PY_THREAD_READ bytes (the agent checks): each is read at once.
#define HS_PY_NO_OFFSET 0xffffffff
#define HS_PY_NO_OWNER 0xff
#define PY_FRAME_READ 80
#define PY_THREAD_READ 176
struct hs_py_layout {
	__u32 runtime_interpreters_head;
	__u32 interp_next;
	__u32 interp_threads_head;
	__u32 thread_next;
	__u32 thread_native_id;
	__u32 thread_frame;          // cframe (3.11, 3.12) or current_frame (3.13)
	__u32 cframe_current_frame;  // HS_PY_NO_OFFSET: thread_frame is the frame
	__u32 frame_code;
	__u32 frame_previous;
	__u32 frame_instr;
	__u32 frame_owner;
	__u32 frame_is_entry;        // HS_PY_NO_OFFSET from 3.12
	__u32 code_adaptive;
	__u8 owner_generator;
	__u8 owner_cstack;           // HS_PY_NO_OWNER before 3.12
	__u8 _pad[2];
};

#define MAX_PY_LAYOUTS 8
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_PY_LAYOUTS);
	__type(key, __u32);
	__type(value, struct hs_py_layout);
} py_layouts SEC(".maps");

// The thread state found last for each thread, and the process entry
// (hs_proc.gen) it was found under; checked at each use (its
// native_thread_id must still be the thread's). tstate 0: the thread had
// none when looked for at checked_ns (a native thread of a Python
// process, such as a math library's workers): it is looked for again
// PY_NO_THREAD_NS later, not at every sample.
#define PY_NO_THREAD_NS 1000000000ULL
struct hs_py_thread {
	__u64 tstate;
	__u64 gen;
	__u64 checked_ns;
};
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct hs_py_thread);
} py_threads SEC(".maps");

// The Python frames of the walk in progress, MAX_PY_FRAMES per CPU
// (sized by the agent), copied into the sample when it is done, as
// walk_frames; py_buf holds the thread state being read, py_windows the
// frames.
#define PY_CHUNK 16
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_PY_FRAMES);
	__type(key, __u32);
	__type(value, struct hs_py_frame);
} py_frames SEC(".maps");

struct py_frame_buf {
	__u8 b[256 + 8];
};
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct py_frame_buf);
} py_buf SEC(".maps");

// The interpreter frames a walk reads, a window at a time (window_at):
// the frames of one _PyEval_EvalFrameDefault call lie next to one
// another on the thread's data stack, each caller below its callee, so
// one read of the bytes below a frame serves its callers too (busy.py's
// four frames: one read where there were four). A window ends with the
// frame it was read for, or starts at that frame's 4 KB block.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct window);
} py_windows SEC(".maps");

// Thread states looked at per sample (across interpreters), and
// interpreter frames (shims included) followed.
#define MAX_PY_THREADS 64
#define MAX_PY_STEPS 128
// A frame within this many bytes above the sampled stack pointer is on
// the thread's C stack (3.12's and 3.13's entry shims), not on its data
// stack. Only how it is read depends on it: a data stack chunk mapped
// that close is read 80 bytes a frame, no window.
#define PY_CSTACK_BYTES (1ULL << 20)

// py_frame_at returns where in win->b the first PY_FRAME_READ bytes of
// the interpreter frame at addr are, or -1 where they cannot be read. A
// frame on the thread's C stack (usp: the sampled stack pointer), the
// entry shim of a _PyEval_EvalFrameDefault call (3.12 on), is read alone
// past the window (b's room there), where a window would read 1 KB of C
// stack for 80 bytes and lose the data stack's window, which the frames
// below the shim most often lie in too; other frames come from the
// window (window_at). A global function, checked once by the verifier:
// the same branch in py_step had it go through 15% more instructions.
__noinline long py_frame_at(struct window *win, __u64 addr, __u64 usp)
{
	if (!win)
		return -1;
	if (addr - usp < PY_CSTACK_BYTES)
		return bpf_probe_read_user(&win->b[WINDOW], PY_FRAME_READ, (void *)addr) < 0 ? -1 : WINDOW;
	return window_at(win, addr, WINDOW - PY_FRAME_READ, PY_FRAME_READ);
}

struct py_thread_search {
	struct hs_py_layout *l;
	__u64 interp;
	__u64 tstate;
	__u32 tid;
	__u32 error;
};

static long py_thread_step(__u64 i, struct py_thread_search *ts)
{
	struct hs_py_layout *l = ts->l;
	if (ts->tstate == 0) {
		// The interpreter's threads are done: the next interpreter's.
		if (i > 0 && bpf_probe_read_user(&ts->interp, 8, (void *)(ts->interp + l->interp_next)) < 0)
			goto error;
		if (ts->interp == 0)
			return 1;
		if (bpf_probe_read_user(&ts->tstate, 8, (void *)(ts->interp + l->interp_threads_head)) < 0)
			goto error;
		return 0;
	}
	__u64 id = 0;
	if (bpf_probe_read_user(&id, 8, (void *)(ts->tstate + l->thread_native_id)) < 0)
		goto error;
	if (id == ts->tid)
		return 1;
	if (bpf_probe_read_user(&ts->tstate, 8, (void *)(ts->tstate + l->thread_next)) < 0)
		goto error;
	return 0;
error:
	ts->error = 1;
	ts->tstate = 0;
	return 1;
}

// is_thread_state reads the first PY_THREAD_READ bytes of tstate into
// buf and reports whether it is thread tid's thread state.
static __always_inline int is_thread_state(struct hs_py_layout *l, __u64 tstate, __u32 tid,
					   struct py_frame_buf *buf)
{
	return tstate && bpf_probe_read_user(buf->b, PY_THREAD_READ, (void *)tstate) == 0 &&
	       *(__u64 *)&buf->b[l->thread_native_id & 255] == tid;
}

// py_thread_state returns the thread state of the current thread tid in a
// process whose _PyRuntime is at runtime, its first PY_THREAD_READ bytes
// in buf, or 0; error is set when a read failed. The process entry's hint
// (the thread found last) is tried first, then py_threads, then the
// interpreters' lists of threads.
static __always_inline __u64 py_thread_state(struct hs_py_layout *l, struct hs_proc *proc,
					     __u64 runtime, __u32 tid, __u64 now,
					     struct py_frame_buf *buf, __u32 *error)
{
	if (proc->py_tid == tid && is_thread_state(l, proc->py_tstate, tid, buf))
		return proc->py_tstate;
	struct hs_py_thread *cached = bpf_map_lookup_elem(&py_threads, &tid);
	if (cached && cached->gen == proc->gen) {
		__u64 tstate = cached->tstate;
		if (!tstate && now - cached->checked_ns < PY_NO_THREAD_NS)
			return 0;
		if (is_thread_state(l, tstate, tid, buf)) {
			proc->py_tstate = tstate;
			proc->py_tid = tid;
			return tstate;
		}
	}
	struct py_thread_search ts = {.l = l, .tid = tid};
	if (bpf_probe_read_user(&ts.interp, 8, (void *)(runtime + l->runtime_interpreters_head)) < 0) {
		*error = 1;
		return 0;
	}
	bpf_loop(MAX_PY_THREADS, py_thread_step, &ts, 0);
	if (ts.error) {
		*error = 1;
		return 0;
	}
	// tstate is set only where the loop stopped at a match, unless the
	// bound cut it: check the match.
	if (!is_thread_state(l, ts.tstate, tid, buf))
		ts.tstate = 0;
	struct hs_py_thread v = {.tstate = ts.tstate, .gen = proc->gen, .checked_ns = now};
	bpf_map_update_elem(&py_threads, &tid, &v, BPF_ANY);
	if (ts.tstate) {
		proc->py_tstate = ts.tstate;
		proc->py_tid = tid;
	}
	return ts.tstate;
}

// The state of one Python frame walk, on the stack of the program that
// calls bpf_loop; as in struct walk, nothing here indexes memory: the
// frames go to py_frames by key.
struct py_walk {
	struct hs_py_layout *l;
	struct window *win;   // the CPU's py_windows entry
	__u64 usp;            // the user stack pointer sampled
	__u64 frame;
	__u32 key;            // py_frames key of the next frame
	__u32 n;              // frames written
	__u32 flags;          // HS_PY_*
	// Set when the next frame is the innermost of its
	// _PyEval_EvalFrameDefault call's: the only one that may be
	// incomplete (its callers in that call have run a CALL, past their
	// first traceable instruction), HS_PYF_MAY_BE_INCOMPLETE.
	__u32 innermost;
};

static long py_step(__u64 i, struct py_walk *w)
{
	if (w->frame == 0)
		return 1;
	if (w->n >= MAX_PY_FRAMES) {
		w->flags |= HS_PY_TRUNCATED;
		return 1;
	}
	long off = py_frame_at(w->win, w->frame, w->usp);
	if (off < 0 || off > WINDOW) {
		w->flags |= HS_PY_READ_ERROR;
		return 1;
	}
	__u8 *fb = &w->win->b[off];
	struct hs_py_layout *l = w->l;
	__u8 owner = fb[l->frame_owner & 255];
	__u64 previous = *(__u64 *)&fb[l->frame_previous & 255];
	// A chain changed while read (another CPU runs the program) may
	// point anywhere: a frame that is its own caller, or a caller not
	// 8-byte aligned, is no frame, and the walk stops there.
	if (previous == w->frame || (previous & 7)) {
		w->flags |= HS_PY_READ_ERROR;
		return 1;
	}
	if (owner == l->owner_cstack) {
		// The shim below the frames of one _PyEval_EvalFrameDefault
		// call (3.12 on): the frame above it was that call's first.
		if (w->n > 0) {
			__u32 key = w->key - 1;
			struct hs_py_frame *above = bpf_map_lookup_elem(&py_frames, &key);
			if (above)
				above->flags |= HS_PYF_ENTRY;
		}
		w->innermost = 1;
		w->frame = previous;
		return 0;
	}
	struct hs_py_frame *f = bpf_map_lookup_elem(&py_frames, &w->key);
	if (!f)
		return 1;
	__u64 code = *(__u64 *)&fb[l->frame_code & 255];
	__u64 instr = *(__u64 *)&fb[l->frame_instr & 255];
	if (code == 0 || (code & 7)) {
		w->flags |= HS_PY_READ_ERROR; // no code object: not a frame
		return 1;
	}
	__u64 start = code + l->code_adaptive;
	f->code = code;
	f->flags = 0;
	f->offset = instr >= start && instr - start < 0xffffffffULL ? (__u32)(instr - start) : 0xffffffff;
	// Incomplete (CPython's _PyFrame_IsIncomplete): not a generator's,
	// and before the code's first traceable instruction, which only the
	// innermost frame of a call can be. The code object is not read
	// here (it was at nearly every sample: a small function's frames
	// run within the first 512 bytes of code).
	if (w->innermost && owner != l->owner_generator)
		f->flags |= HS_PYF_MAY_BE_INCOMPLETE;
	w->innermost = 0;
	if (l->frame_is_entry != HS_PY_NO_OFFSET && fb[l->frame_is_entry & 255]) {
		f->flags |= HS_PYF_ENTRY;
		w->innermost = 1;
	}
	w->key++;
	w->n++;
	w->frame = previous;
	return 0;
}

// walk_python writes the current thread's Python frames to s->frames at
// byte offset at, if the process runs an interpreter the agent found
// (proc->py_runtime), and returns the bytes written.
static __always_inline long walk_python(struct hs_sample *s, struct hs_proc *proc, __u32 tid,
					__u64 usp, long at, struct hs_counters *c)
{
	s->python_frames = 0;
	s->python_flags = 0;
	__u64 runtime = proc->py_runtime;
	if (!runtime)
		return 0;
	__u32 idx = proc->py_layout;
	struct hs_py_layout *l = bpf_map_lookup_elem(&py_layouts, &idx);
	if (!l)
		return 0;
	__u32 zero = 0;
	struct py_frame_buf *buf = bpf_map_lookup_elem(&py_buf, &zero);
	struct window *win = bpf_map_lookup_elem(&py_windows, &zero);
	if (!buf || !win)
		return 0;
	c->py_walks++;
	__u32 error = 0;
	__u64 tstate = py_thread_state(l, proc, runtime, tid, s->ktime_ns, buf, &error);
	if (!tstate) {
		s->python_flags = HS_PY_WALKED | (error ? HS_PY_READ_ERROR : HS_PY_NO_THREAD);
		if (error)
			c->py_read_errors++;
		else
			c->py_no_thread++;
		return 0;
	}
	win->valid = 0;
	struct py_walk w = {.l = l, .win = win, .usp = usp, .innermost = 1};
	__u64 frame = *(__u64 *)&buf->b[l->thread_frame & 255];
	if (l->cframe_current_frame != HS_PY_NO_OFFSET && frame &&
	    bpf_probe_read_user(&frame, 8, (void *)(frame + l->cframe_current_frame)) < 0)
		goto read_error;
	w.frame = frame;
	__u32 first = bpf_get_smp_processor_id() * MAX_PY_FRAMES;
	w.key = first;
	// n starts at 0, read back from the record so that the verifier
	// does not know it (see walk_user).
	w.n = *(volatile __u16 *)&s->python_frames;
	bpf_loop(MAX_PY_STEPS, py_step, &w, 0);
	if (w.frame != 0 && !(w.flags & HS_PY_READ_ERROR))
		w.flags |= HS_PY_TRUNCATED; // the loop's bound
	struct hs_py_frame *frames = bpf_map_lookup_elem(&py_frames, &first);
	if (!frames)
		return 0;
	for (__u32 i = 0; i < MAX_PY_FRAMES / PY_CHUNK; i++) {
		if (i * PY_CHUNK >= w.n)
			break;
		if (bpf_probe_read_kernel((void *)s->frames + (at & 2047) + i * PY_CHUNK * 16,
					  PY_CHUNK * 16, (void *)frames + i * PY_CHUNK * 16) < 0)
			return 0;
	}
	s->python_flags = HS_PY_WALKED | w.flags;
	if (w.flags & HS_PY_READ_ERROR)
		c->py_read_errors++;
	if (w.flags & HS_PY_TRUNCATED)
		c->py_truncated++;
	s->python_frames = w.n;
	return (*(volatile __u16 *)&s->python_frames & 127) * 16;
read_error:
	s->python_flags = HS_PY_WALKED | HS_PY_READ_ERROR;
	c->py_read_errors++;
	return 0;
}

// sample takes one sample; dwarf selects the table walk for user stacks.
static __always_inline int sample(struct bpf_perf_event_data *ctx, bool dwarf)
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
	// A tick that came in user mode (the interrupted code segment's
	// privilege level 3) has no kernel frames: bpf_get_stack returns none
	// for it, after zeroing the whole buffer it was given (timed alone
	// at about 2 us a sample in churn case b, issue 22; see
	// docs/benchmarks.md for what the whole sample gained). The
	// verifier takes only whole 8-byte reads of the context's registers.
	// x86 only: where the registers have no cs (arm64) the kernel is
	// asked every time.
	bool user_mode = false;
	if (bpf_core_field_exists(ctx->regs.cs))
		user_mode = (*(volatile __u64 *)&ctx->regs.cs & 3) == 3;
	if (collect_kernel && !user_mode) {
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
	s->dwarf_frames[0] = s->dwarf_frames[1] = 0;
	s->python_frames = 0;
	s->python_flags = 0;
	s->_pad = 0;
	struct hs_proc *proc = NULL;
	__u64 usp = 0; // the user stack pointer sampled (walk_user)
	int wake = 0; // a Python process's new image asked for its mappings
	if (collect_user && tgid != 0) {
		ubytes = -1;
		if (dwarf) {
			ubytes = walk_user(s, tgid, kbytes, c, &proc, &usp, &wake);
			if (ubytes >= 0)
				c->dwarf_walks++;
			else
				c->fp_walks++;
		}
		if (ubytes < 0) {
			ubytes = bpf_get_stack(ctx, (void *)s->frames + kbytes,
					       MAX_FRAMES * 8, BPF_F_USER_STACK);
			if (ubytes < 0) {
				c->user_stack_errors++;
				ubytes = 0;
			}
		}
	}
	ubytes &= 1023;

	s->kernel_frames = kbytes / 8;
	s->user_frames = ubytes / 8;

	long pybytes = 0;
	if (dwarf && proc)
		pybytes = walk_python(s, proc, (__u32)id, usp, kbytes + ubytes, c);

	__u64 flags = BPF_RB_NO_WAKEUP;
	__u8 one = 1;
	// Look before inserting: an LRU hash update takes a free node (and
	// may evict) before it finds the key exists, on every sample. A
	// process with an unwind_procs entry for its image (proc) was
	// announced at its first sample, which asked for that entry: its
	// samples skip the lookup (timed alone at 1.2-1.9 us a table-walked
	// sample in churn case b, issue 22).
	if (collect_user && tgid != 0 && !proc && !bpf_map_lookup_elem(&seen_pids, &tgid) &&
	    bpf_map_update_elem(&seen_pids, &tgid, &one, BPF_NOEXIST) == 0) {
		__u32 *snapshots = bpf_map_lookup_elem(&mode, &zero);
		if (snapshots && *snapshots)
			bpf_map_update_elem(&pending_pids, &tgid, &one, BPF_ANY);
		else
			flags = BPF_RB_FORCE_WAKEUP;
	}

	if (wake)
		flags = BPF_RB_FORCE_WAKEUP;

	__u64 size = offsetof(struct hs_sample, frames) + kbytes + ubytes + (pybytes & 2047);
	if (size > sizeof(*s))
		size = sizeof(*s);
	if (bpf_ringbuf_output(&events, s, size, flags) < 0)
		c->lost++;
	return 0;
}

// profile walks user stacks with frame pointers (bpf_get_stack): it needs
// no kernel BTF.
SEC("perf_event")
int profile(struct bpf_perf_event_data *ctx)
{
	return sample(ctx, false);
}

// profile_dwarf walks user stacks with the unwind tables the agent loads
// (unwind/), frame pointers where a binary has none. It needs kernel BTF
// and Linux 5.17 (bpf_loop, bpf_task_pt_regs); the agent loads one of the
// two programs.
SEC("perf_event")
int profile_dwarf(struct bpf_perf_event_data *ctx)
{
	return sample(ctx, true);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
