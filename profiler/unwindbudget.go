package profiler

import (
	"cmp"
	"slices"
	"time"
)

// buildJob is a binary whose table some processes wait for.
type buildJob struct {
	cfi uint64 // bytes of .eh_frame and .debug_frame: the build's cost
	// cached is true when the table is in the cache: reading it costs
	// a small fraction of compiling it.
	cached bool
	// waiters are the processes whose entries lack this table, and the
	// binary's path as each sees it (/proc/PID/root/...): any of them
	// may have exited by the time it is built.
	waiters map[uint32]string
	// unusedBy holds the waiters whose stacks have not passed through
	// the binary yet (procState.usage): it is built once one waiter's
	// have, with the samples all of them had meanwhile, so that it goes
	// in at once when a stack reaches it.
	unusedBy map[uint32]bool
	// waited counts the samples of its waiters since it was queued (and
	// their heat then), queued is when: what building it is weighed
	// against (worthIt). later counts only those since it was queued:
	// whether its processes still run.
	waited, later uint64
	queued        time.Time
}

// buildBudget is how long one poll may spend building tables; the rest
// wait for the next poll.
const buildBudget = 200 * time.Millisecond

// buildOrder sorts the queued tables by the samples waiting for them per
// byte of CFI to compile (a thirty-second of it for a table in the cache;
// a floor of 16 KiB, so that tiny binaries of idle processes do not go
// first), cheapest first among equals: the hot processes of a busy machine
// get their stacks first, and one huge binary (a browser, node) does not
// hold up many smaller ones of equal heat. A table no waiter's stacks
// passed through yet is left out, as build would skip it: under churn
// most queued tables are such (the libraries short-lived processes map
// and never run), and going through their waiters at every poll was most
// of the worker's CPU (bench/churn case b). The waiters gone since are
// dropped here, and from the others at each sweep (pruneQueue).
func (u *unwinder) buildOrder() []string {
	score := make(map[string]float64, len(u.queue))
	keys := make([]string, 0, len(u.queue))
	for k, job := range u.queue {
		if len(job.unusedBy) == len(job.waiters) {
			continue // no stack passed through it (unusedBy is in waiters)
		}
		var samples uint64
		if u.pruneJob(k, job, func(pid uint32) { samples += u.heat[pid] }) {
			continue
		}
		score[k] = float64(samples) / float64(max(job.cost(), 16<<10))
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		return cmp.Or(cmp.Compare(score[b], score[a]), cmp.Compare(u.queue[a].cost(), u.queue[b].cost()), cmp.Compare(a, b))
	})
	return keys
}

// pruneJob drops the waiters of a queued table whose processes are gone
// (no longer in procList), and the table once none is left, reporting
// whether it was dropped; each waiter kept is passed to kept.
func (u *unwinder) pruneJob(k string, job *buildJob, kept func(pid uint32)) (dropped bool) {
	for pid := range job.waiters {
		if _, known := u.procList[pid]; !known {
			delete(job.waiters, pid)
			delete(job.unusedBy, pid)
			continue
		}
		if kept != nil {
			kept(pid)
		}
	}
	if len(job.waiters) == 0 {
		delete(u.queue, k) // every process that wanted it is gone
		return true
	}
	return false
}

// pruneQueue drops the waiters gone from every queued table (pruneJob):
// after processes left procList, for the tables buildOrder leaves out.
func (u *unwinder) pruneQueue() {
	for k, job := range u.queue {
		u.pruneJob(k, job, nil)
	}
}

// compileNsPerByte is about what compiling a table costs per byte of CFI:
// BenchmarkCompileLibc measured 60-196 ms per MB (median 75).
const compileNsPerByte = 100

// buildShare is the most of its waiting samples' CPU time a table may
// cost: a table is built once the samples of the processes waiting for
// it stand for 1/buildShare times its estimated compile time (a cached
// one's read counts a thirty-second of that), or once it has waited
// 1/waitShare times that. Building every table at once made the agent
// compile whatever ran, however little: on a busy development machine new
// binaries (test binaries, a 10 MB table for minio) cost it 5-9% of a CPU
// where frame pointers cost 2%. A hot process pays soon (libc's 153 KB of
// .eh_frame, about 15 ms, after 0.8 s of sampled CPU, 0.4 s for two busy
// processes; from the cache after 3 samples); one that gets little CPU
// waits at most 0.3 s for libc, 6.3 s for a binary of 3 MB of CFI, if it
// keeps running (activeShare).
const buildShare = 0.02

// waitShare bounds the wait: a table is built once compiling it costs at
// most this share of the wall time its processes have waited for it, if
// they were sampled meanwhile for at least activeShare of one CPU.
const waitShare = 0.05

// activeShare is the least CPU, in CPUs, the processes waiting for a
// table must have used since it was queued for the wait alone to build
// it. Without it every table of every process sampled was built once it
// had waited 20 times its estimate: the tables of idle processes sampled
// once at the agent's start (a browser's hundred libraries, 117 tables
// in a 20 s run on the shared machine), and of the agent itself (its
// 1.5 MB of .debug_frame, 150 ms estimated, built 3 s into every run at
// 1% of a CPU). A starved test fixture (10% of a CPU at load 20) still
// has libc's table after 0.3 s; the agent's own is built once its
// samples have paid for it.
const activeShare = 0.05

// worthIt reports whether the samples waiting for a table have paid for
// building it (buildShare), or it has waited long enough (waitShare) for
// processes that keep running (activeShare). Either way the processes
// waiting for it must have been sampled askSamples times: a table is no
// use to a process sampled once, most often short-lived or idle.
func (u *unwinder) worthIt(job *buildJob, now time.Time) bool {
	if job.waited < askSamples {
		return false
	}
	cost := float64(job.cost()) * compileNsPerByte
	period := float64(u.periodNs())
	waited := float64(now.Sub(job.queued))
	return float64(job.waited)*period*buildShare >= cost ||
		waited*waitShare >= cost && float64(job.later)*period >= activeShare*waited
}

// estimate is about how long loading the table takes: compiling its
// CFI, or a thirty-second of that from the cache.
func (j *buildJob) estimate() time.Duration {
	return time.Duration(j.cost() * compileNsPerByte)
}

// buildRate is the estimated time (buildJob.estimate) the worker may
// spend building tables, as a share of one CPU over time, and buildBurst
// how much it may spend at once after a quiet spell (at the agent's
// start, or when a new program starts). worthIt bounds each table's cost
// by its own processes' CPU, but not the sum: on a machine whose CPUs
// are busy with new binaries (a build machine: compilers, test binaries,
// a browser under test; load 22) the agent compiled 10 tables in a 36 s
// recording, 0.26 s of CompileFile (--cpu-profile). The estimate, not
// the time a build took, is charged: a build slowed down by a busy
// machine would otherwise hold up every other table for minutes. libc's
// 153 KB of .eh_frame is estimated at 15 ms, 10 MB of CFI at a second.
// A read from the cache (a thirty-second of that) is not charged:
// buildBudget bounds those per poll.
const (
	buildRate  = 0.005
	buildBurst = time.Second
)

// afford reports whether the worker may now build a table estimated to
// take est: the credit, refilled at buildRate up to buildBurst, covers
// it, or is full (a table estimated beyond buildBurst waits for a full
// credit, and takes it all: charge).
func (u *unwinder) afford(est time.Duration, now time.Time) bool {
	u.refill(now)
	return u.credit >= est || u.credit == buildBurst
}

// refill adds to the credit what buildRate earned since it was last
// refilled, up to buildBurst (a full credit at the first call).
func (u *unwinder) refill(now time.Time) {
	if u.credited.IsZero() {
		u.credit = buildBurst
	} else if now.After(u.credited) {
		u.credit = min(buildBurst, u.credit+time.Duration(float64(now.Sub(u.credited))*buildRate))
	}
	u.credited = now
}

// charge takes a compiled table's estimate out of the credit, down to
// zero at most: a table estimated beyond buildBurst (50 MB of .eh_frame,
// 5 s) once left it at -4 s, and every other table, a cached libc's
// 0.5 ms read included, waited the ~1000 s buildRate takes to refill
// that.
func (u *unwinder) charge(est time.Duration, now time.Time) {
	u.refill(now)
	u.credit = max(0, u.credit-est)
}

// cost is about what loading the table takes, in bytes of CFI compiled.
func (j *buildJob) cost() uint64 {
	if j.cached {
		return j.cfi / 32
	}
	return j.cfi
}
