package profiler

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/bpftest"
	"github.com/heatscope/heatscope/symbolize"
)

// TestMappedFileStatShared: within identityTTL a mapped file's stat serves
// every mapping of the same device and inode (the path is not looked at
// again); after it, the file is looked at again; a mapping without an
// inode is always looked at.
func TestMappedFileStatShared(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lib.so")
	if err := os.WriteFile(path, []byte("not an ELF file"), 0o644); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	id := mappedID{dev: st.Dev, ino: st.Ino}
	u := &unwinder{}
	now := time.Now()
	first, ok := u.fileKeyOf(path, id, now)
	if !ok || first.ino != st.Ino || first.size != st.Size {
		t.Fatalf("fileKeyOf = %+v, %v; want the file's", first, ok)
	}
	gone := filepath.Join(t.TempDir(), "another-process-root", "lib.so")
	if got, ok := u.fileKeyOf(gone, id, now.Add(identityTTL/2)); !ok || got != first {
		t.Errorf("within identityTTL, another path to the same file: %+v, %v; want the first stat's %+v", got, ok, first)
	}
	if _, ok := u.fileKeyOf(gone, id, now.Add(identityTTL)); ok {
		t.Error("after identityTTL the missing path was not looked at")
	}
	if _, ok := u.fileKeyOf(gone, mappedID{}, now); ok {
		t.Error("a mapping without an inode took another file's stat")
	}
}

// TestOwnReadTakesSymbolizersUse: a process whose mappings the unwinder
// read itself (the symbolizer's read was older than its request) gets the
// tables of the mappings its stacks passed through, as the symbolizer's
// older read says, not of all of them.
func TestOwnReadTakesSymbolizersUse(t *testing.T) {
	bpftest.Require(t)
	procs := newProcsMap(t, 4)
	pid, maps := sleepWithLibc(t)
	exe := slices.IndexFunc(maps, func(m symbolize.ExecMapping) bool { return strings.HasSuffix(m.Path, "/sleep") })
	if exe < 0 {
		t.Fatalf("no sleep among the mappings %+v", maps)
	}
	theirs := slices.Clone(maps)
	theirs[exe].Used = true
	u := &unwinder{
		procs: procs, log: slog.New(slog.DiscardHandler), procRoot: "/proc",
		procList: map[uint32]*procState{}, files: map[fileKey]*mappedFile{}, loaded: map[string]*loadedTable{},
		failed: map[string]bool{}, deferred: map[string]time.Time{}, queue: map[string]*buildJob{}, heat: map[uint32]uint64{},
		recentMaps: func(dst []symbolize.ExecMapping, _ uint32, since time.Time) ([]symbolize.ExecMapping, bool) {
			if !since.IsZero() {
				return dst, false // read before the request: the unwinder reads /proc
			}
			return append(dst, theirs...), true
		},
	}
	if err := u.process(pid, ask{mm: 1, since: time.Now()}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if u.stats.MapsShared != 0 {
		t.Fatalf("the symbolizer's read was handed on (%d), want the unwinder's own", u.stats.MapsShared)
	}
	var queued []string
	for _, job := range u.queue {
		if p, ok := job.waiters[pid]; ok && !job.unusedBy[pid] {
			queued = append(queued, filepath.Base(p))
		}
	}
	if len(queued) != 1 || queued[0] != "sleep" {
		t.Errorf("tables queued for %v, want sleep's alone", queued)
	}
}

// TestShedTablesHoldsTheQueue: while tables are shed (the overhead guard
// gave them up) the tables of processes seen for less than shedMinAge wait
// in the queue; a process seen for longer still gets its table; restored,
// the queue is worked through again.
func TestShedTablesHoldsTheQueue(t *testing.T) {
	now := time.Now()
	young := &buildJob{cfi: 1 << 30, waiters: map[uint32]string{42: "/young"}, unusedBy: map[uint32]bool{}}
	old := &buildJob{cfi: 1 << 30, waiters: map[uint32]string{43: "/gone/old"}, unusedBy: map[uint32]bool{}}
	u := &unwinder{
		procList: map[uint32]*procState{42: {asked: now.Add(-time.Second), complete: true}, 43: {asked: now.Add(-time.Minute), complete: true}},
		heat:     map[uint32]uint64{}, failed: map[string]bool{}, log: slog.New(slog.DiscardHandler),
		queue:    map[string]*buildJob{"young": young, "old": old},
		periodNs: func() int64 { return 1e7 },
	}
	for _, j := range []*buildJob{young, old} { // their samples have paid for them
		j.waited, j.later, j.queued = 1<<40, 1<<40, now.Add(-time.Hour)
	}
	p := &Profiler{unwinder: u}
	if what, ok := p.ShedTables(); !ok || what == "" {
		t.Fatalf("ShedTables = %q, %v; want the work named", what, ok)
	}
	u.state.Lock() // the worker's, released while it loads a table
	u.build(now)
	u.state.Unlock()
	if _, ok := u.queue["young"]; !ok {
		t.Error("a process seen for a second had its table built while tables were shed")
	}
	if _, ok := u.queue["old"]; ok {
		t.Error("a process seen for a minute did not get its table while tables were shed")
	}
	u.shed.Store(false) // RestoreTables, without a worker to kick
	u.state.Lock()      // the worker's, released while it loads a table
	u.build(now)
	u.state.Unlock()
	if _, ok := u.queue["young"]; ok {
		t.Error("restored: the young process's table was not built")
	}
	if _, ok := (&Profiler{}).ShedTables(); ok {
		t.Error("ShedTables without the table walk said it gave up work")
	}
}

// TestQueueUnderChurn: the tables no waiter's stacks passed through (the
// libraries of short-lived processes) are left out of the build order
// without a look at their waiters; the samples of each table's waiters are
// counted alike whichever set is smaller; and the waiters gone from
// procList leave every queued table at the sweep (pruneQueue), the tables
// with them, so that the queue does not grow with churn.
func TestQueueUnderChurn(t *testing.T) {
	unused := &buildJob{cfi: 4096, waiters: map[uint32]string{1: "/a", 2: "/a", 3: "/a"}, unusedBy: map[uint32]bool{1: true, 2: true, 3: true}}
	used := &buildJob{cfi: 4096, waiters: map[uint32]string{1: "/b", 2: "/b"}, unusedBy: map[uint32]bool{2: true}}
	single := &buildJob{cfi: 4096, waiters: map[uint32]string{3: "/c"}}
	u := &unwinder{
		procList: map[uint32]*procState{1: {}, 2: {}, 3: {}},
		queue:    map[string]*buildJob{"unused": unused, "used": used, "single": single},
		heat:     map[uint32]uint64{1: 4, 2: 2, 3: 1},
		newHeat:  map[uint32]uint64{1: 5, 3: 7},
	}
	if got := u.buildOrder(); !slices.Equal(got, []string{"used", "single"}) {
		t.Errorf("build order %q, want the tables a stack passed through, hottest first: used, single", got)
	}
	u.countWaited() // unused through newHeat, the others through their waiters
	for _, c := range []struct {
		name string
		job  *buildJob
		want uint64
	}{{"unused", unused, 5 + 7}, {"used", used, 5}, {"single", single, 7}} {
		if c.job.waited != c.want || c.job.later != c.want {
			t.Errorf("table %s counted %d and %d samples of its waiters, want %d", c.name, c.job.waited, c.job.later, c.want)
		}
	}
	delete(u.procList, 1)
	delete(u.procList, 3)
	u.pruneQueue()
	if _, ok := u.queue["single"]; ok || len(u.queue) != 2 {
		t.Errorf("after its one waiter left, single is still queued: %d tables", len(u.queue))
	}
	if len(unused.waiters) != 1 || len(unused.unusedBy) != 1 || unused.waiters[2] == "" || len(used.waiters) != 1 || len(used.unusedBy) != 1 {
		t.Errorf("the waiters gone were not dropped: unused %v %v, used %v %v", unused.waiters, unused.unusedBy, used.waiters, used.unusedBy)
	}
	clear(u.procList)
	u.pruneQueue()
	if len(u.queue) != 0 {
		t.Errorf("%d tables queued for processes all gone", len(u.queue))
	}
}
