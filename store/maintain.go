// The writer's periodic work: WAL writes and syncs, cuts, compaction and
// retention, on a goroutine of the DB's own or the caller's Tick.

package store

import "time"

// walFlushInterval is how often the WAL is written: half the one second a
// crash of the agent (SIGKILL, OOM kill) may cost. A page written is safe
// from the agent's crash; only a crash of the kernel (or the machine)
// loses what is not yet synced.
const walFlushInterval = 500 * time.Millisecond

// walSyncInterval is how often the WAL is fsynced: what a kernel crash or
// power loss may cost. fsync was a fifth of the recorder's steady-state
// CPU when every 500 ms write was synced.
const walSyncInterval = 5 * time.Second

// tickSlack is how early Tick does work that is due.
const tickSlack = 50 * time.Millisecond

// background flushes the WAL twice a second, cuts the head when it is old
// enough, and compacts and applies retention every minute.
func (db *DB) background() {
	defer close(db.done)
	tick := time.NewTicker(walFlushInterval)
	defer tick.Stop()
	for {
		select {
		case <-db.stop:
			return
		case now := <-tick.C:
			if db.periodic(now) {
				db.Maintain()
			}
		}
	}
}

// Tick does the store's periodic work when it is due (Options.CallerTicks):
// every 500 ms it writes and syncs the WAL and the event log and cuts the
// head when it is old enough, and every minute it starts a round of
// compaction and retention on a goroutine of its own. Calls in between
// cost a clock read. Call it from one goroutine at a time.
func (db *DB) Tick() {
	if db.opts.ReadOnly || db.closed.Load() {
		return
	}
	now := time.Now()
	// A tick due in less than half a poll is done now, so that polls
	// every 250 ms flush every 500 ms, not every 750.
	if now.Sub(db.lastTick) < walFlushInterval-tickSlack {
		return
	}
	db.lastTick = now
	if db.periodic(now) && db.maintainBusy.CompareAndSwap(false, true) {
		db.maintaining.Go(func() {
			defer db.maintainBusy.Store(false)
			db.Maintain()
		})
	}
}

// periodic syncs the event log, writes the WAL (syncing it every
// walSyncInterval), cuts the head
// when it spans a block's duration and frees space after a full disk. It
// reports whether a minute has passed since compaction and retention last
// ran (and then counts them as run).
func (db *DB) periodic(now time.Time) (maintain bool) {
	defer db.upkeepUnit()(0)
	db.events.sync()
	db.mu.Lock()
	sync := now.Sub(db.lastSync) >= walSyncInterval-tickSlack
	if sync {
		db.lastSync = now
	}
	db.flushWALLocked(sync)
	if h := db.head; h.T.Len() > 0 && now.UnixNano()-h.T.Time[0] >= int64(db.opts.BlockDuration) {
		db.cutLocked()
	}
	db.mu.Unlock()
	if db.diskFull.Swap(false) {
		db.dropOldest("disk full")
	}
	if now.Sub(db.lastMaintain) < time.Minute {
		return false
	}
	db.lastMaintain = now
	return true
}

// Maintain runs one round of compaction and retention.
func (db *DB) Maintain() { db.maintainAt(time.Now()) }

// maintainAt runs compaction and retention as at time now (tests drive a
// week of synthetic time through it).
func (db *DB) maintainAt(now time.Time) {
	if db.opts.ReadOnly {
		return
	}
	if err := db.compact(now); err != nil {
		db.log.Warn("compaction failed", "err", err)
	}
	end := db.upkeepUnit()
	db.applyRetention(now)
	end(0)
}

// upkeepUnit starts timing a unit of the periodic work on the calling
// goroutine; the function it returns ends it, spreading its CPU time over
// the time the unit serves (0: none), see Upkeep.
func (db *DB) upkeepUnit() (end func(serves time.Duration)) {
	span := db.upkeep.Start()
	return func(serves time.Duration) { db.upkeepSpread.Add(time.Now(), span.Stop(), serves) }
}

// Upkeep returns the CPU time the periodic work has taken so far (the
// WAL's and the event log's writes and syncs, head cuts, the blocks
// written from the heads, compaction and retention: each unit timed in its
// thread's CPU time, see package workclock), and the same with each block
// write and merge spread evenly over the time of the samples it holds,
// from its end on (workclock.Spread). That work comes in bursts, a block
// every BlockDuration and merges of 10, 60 and 360 of them, and what it
// costs over time falls with the rate samples are appended at: spread, a
// 2-minute block written in 80 ms costs 0.07% of a CPU for 2 minutes,
// not 0.8% for the 10 s after it.
func (db *DB) Upkeep() (cpu, spread time.Duration) {
	return db.upkeep.Total(), db.upkeepSpread.Total(time.Now())
}

// Flush writes the WAL buffer to disk and syncs it.
func (db *DB) Flush() {
	if db.opts.ReadOnly {
		return
	}
	db.mu.Lock()
	db.flushWALLocked(true)
	db.mu.Unlock()
}
