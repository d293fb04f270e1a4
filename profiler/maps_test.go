package profiler

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heatscope/heatscope/bpf"
	"github.com/heatscope/heatscope/internal/bpftest"
)

func TestMapsRecordSizesMatchBPF(t *testing.T) {
	var m bpf.ProfileHsMaps
	if got := int(binary.Size(m.M[0])); got != mappingSize {
		t.Errorf("struct hs_mapping is %d bytes, the decoder reads %d", got, mappingSize)
	}
	if got := binary.Size(m) - len(m.M)*mappingSize; got != mapsHeaderSize {
		t.Errorf("struct hs_maps header is %d bytes, the decoder reads %d", got, mapsHeaderSize)
	}
	if len(m.M) != MaxMappings {
		t.Errorf("struct hs_maps holds %d mappings, MaxMappings is %d", len(m.M), MaxMappings)
	}
}

// execMappings reads the executable mappings of pid from /proc, as the
// snapshot should give them.
func execMappings(t *testing.T, pid int) []Mapping {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []Mapping
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m Mapping
		var perms, dev string
		if _, err := fmt.Sscanf(sc.Text(), "%x-%x %s %x %s %d", &m.Start, &m.End, &perms, &m.Offset, &dev, &m.Inode); err != nil {
			t.Fatalf("maps line %q: %v", sc.Text(), err)
		}
		if perms[2] != 'x' || strings.HasSuffix(sc.Text(), "[vsyscall]") {
			continue // [vsyscall] is the kernel's gate page, not a mapping of the mm
		}
		var major, minor uint32
		fmt.Sscanf(dev, "%x:%x", &major, &minor)
		m.Dev = unix.Mkdev(major, minor)
		switch fields := strings.Fields(sc.Text()); {
		case m.Inode != 0:
			m.Kind = MappingFile
		case len(fields) > 5 && fields[5] == "[vdso]":
			m.Kind = MappingVDSO
		default:
			m.Kind = MappingAnon
		}
		out = append(out, m)
	}
	return out
}

// runCollectingMaps runs p for d, calling during half way through, and
// returns the snapshots of pid and the sampler's counters.
func runCollectingMaps(t *testing.T, p *Profiler, pid uint32, d time.Duration, during func()) ([]Maps, Stats) {
	t.Helper()
	var snaps []Maps
	p.OnMaps(func(m *Maps) {
		if m.PID == pid {
			snaps = append(snaps, Maps{PID: m.PID, Complete: m.Complete, Mappings: append([]Mapping(nil), m.Mappings...)})
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	go func() {
		time.Sleep(d / 2)
		during()
	}()
	if err := p.Run(ctx, func(*Record, int64) {}); err != nil {
		t.Fatal(err)
	}
	st, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return snaps, st
}

// TestMapsSnapshot checks the snapshot the BPF program takes of a sampled
// process as it exits against the process's /proc/PID/maps, and that with
// snapshots a new process does not wake the agent, with both samplers:
// profile_dwarf skips the announcement's lookup for a process once its
// unwind tables' entry is in, so the process must have been marked for
// its snapshot before.
func TestMapsSnapshot(t *testing.T) {
	t.Run("fp", func(t *testing.T) { testMapsSnapshot(t, UnwindFP) })
	t.Run("dwarf", func(t *testing.T) { testMapsSnapshot(t, UnwindDWARF) })
}

func testMapsSnapshot(t *testing.T, unwind Unwind) {
	bpftest.Require(t)
	spin := startSpinner(t, "spin-maps")
	pid := uint32(spin.Process.Pid)
	p, err := Open(Config{Frequency: 99, PIDs: []uint32{pid}, Unwind: unwind})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.snapshotting() {
		t.Fatal("snapshots on before any churn")
	}
	if err := p.enableSnapshots(); err != nil {
		t.Fatalf("this kernel (6.16 or later) can snapshot exiting processes: %v", err)
	}
	// It may have been sampled, and so announced, before the switch.
	p.objs.SeenPids.Delete(pid)
	var want []Mapping
	snaps, st := runCollectingMaps(t, p, pid, 2*time.Second, func() {
		want = execMappings(t, int(pid))
		spin.Process.Kill()
	})
	// At most 99 on a quiet machine; a loaded one leaves the spinner
	// half a CPU or less, and the test is of the snapshot, not the rate.
	if st.Samples < 20 {
		t.Fatalf("%d samples of a spinning process in 1 s at 99 Hz", st.Samples)
	}
	if unwind == UnwindDWARF && st.DWARFWalks == 0 {
		t.Fatalf("no sample of the process walked with its tables (%d with frame pointers): its entry was never in", st.FPWalks)
	}
	if st.Wakeups > 1 { // one, if it was sampled before the switch
		t.Errorf("%d wakeups: with snapshots, a new process must not wake the agent", st.Wakeups)
	}
	if len(snaps) != 1 {
		t.Fatalf("%d snapshots of pid %d, which was sampled and exited; want 1", len(snaps), pid)
	}
	snap := snaps[0]
	if !snap.Complete || len(snap.Mappings) != len(want) || len(want) < 3 {
		t.Fatalf("snapshot (complete %v) %+v\n/proc/%d/maps %+v", snap.Complete, snap.Mappings, pid, want)
	}
	for i, m := range snap.Mappings {
		w := want[i]
		w.CtimeNs = m.CtimeNs
		if m != w {
			t.Errorf("mapping %d: %+v, /proc said %+v", i, m, w)
		}
	}
	// The dynamic loader is mapped from its file: its ctime must be the
	// file's.
	for _, m := range snap.Mappings {
		if m.Kind != MappingFile {
			continue
		}
		var st syscall.Stat_t
		for _, path := range []string{"/lib64/ld-linux-x86-64.so.2", "/bin/sh", "/lib/x86_64-linux-gnu/libc.so.6"} {
			if syscall.Stat(path, &st) == nil && st.Ino == m.Inode && st.Dev == m.Dev {
				if m.CtimeNs != st.Ctim.Nano() {
					t.Errorf("%s: ctime %d in the snapshot, %d by stat", path, m.CtimeNs, st.Ctim.Nano())
				}
				return
			}
		}
	}
	t.Errorf("no mapping of the snapshot is /bin/sh, libc or the loader: %+v", snap.Mappings)
}

// churn starts processes one after another for d, each spinning for a few
// milliseconds, and returns their pids.
func churn(t *testing.T, d time.Duration) map[uint32]bool {
	t.Helper()
	pids := map[uint32]bool{}
	for end := time.Now().Add(d); time.Now().Before(end); {
		c := exec.Command("/bin/sh", "-c", "i=0; while [ $i -lt 4000 ]; do i=$((i+1)); done")
		if err := c.Run(); err != nil {
			t.Fatal(err)
		}
		pids[uint32(c.Process.Pid)] = true
	}
	return pids
}

// TestSnapshotsUnderChurn starts processes fast enough to switch the
// sampler to exit snapshots, and checks that the ones started after the
// switch arrive as snapshots and wake nobody; with snapshots off (as on a
// kernel before 6.16) every one wakes the agent.
func TestSnapshotsUnderChurn(t *testing.T) {
	bpftest.Require(t)
	for _, off := range []bool{false, true} {
		p, err := Open(Config{Frequency: 999, noMapsSnapshot: off})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		snapped := map[uint32]bool{}
		p.OnMaps(func(m *Maps) {
			mu.Lock()
			snapped[m.PID] = true
			mu.Unlock()
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- p.Run(ctx, func(*Record, int64) {}) }()
		first := churn(t, 1500*time.Millisecond) // far more than 20 a second: the switch
		if !off {
			waitSnapshots(t, p)
		}
		st1, _ := p.Stats()
		later := churn(t, 500*time.Millisecond)
		time.Sleep(300 * time.Millisecond)
		st2, _ := p.Stats()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		on := p.snapshotting()
		p.Close()
		mu.Lock()
		n := 0
		for pid := range later {
			if snapped[pid] {
				n++
			}
		}
		mu.Unlock()
		wakeups := st2.Wakeups - st1.Wakeups
		switch {
		case len(first) < 60 || len(later) < 20:
			t.Fatalf("%d and %d processes: not the churn the test needs", len(first), len(later))
		case off && (on || n > 0 || wakeups < uint64(len(later))/2):
			t.Errorf("snapshots off: switched %v, %d of %d later processes snapshotted, %d wakeups for them", on, n, len(later), wakeups)
		case !off && (!on || n < len(later)*8/10 || wakeups > 3):
			t.Errorf("under churn (%d processes): switched %v, %d of %d later processes snapshotted, %d wakeups for them", len(first), on, n, len(later), wakeups)
		}
	}
}

// waitSnapshots waits until p's exit snapshot program is loaded (it is
// loaded off the ring reader's goroutine), for at most 20 s.
func waitSnapshots(t *testing.T, p *Profiler) time.Duration {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if st, err := p.Counters(); err == nil && st.SnapshotLoad > 0 {
			return st.SnapshotLoad
		}
	}
	t.Fatal("the exit snapshot program was not in 20 s after the switch")
	return 0
}

// TestMissedProcessSwitchesToSnapshots checks that one missed process,
// with no churn at all, switches the sampler to exit snapshots.
func TestMissedProcessSwitchesToSnapshots(t *testing.T) {
	bpftest.Require(t)
	p, err := Open(Config{Frequency: 999})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	var records int
	go func() {
		done <- p.Run(ctx, func(*Record, int64) {
			if records++; records == 1 {
				p.MissedProcess()
			}
		})
	}()
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
		// spin: samples of this process
	}
	took := waitSnapshots(t, p)
	time.Sleep(200 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if records == 0 || !p.snapshotting() {
		t.Fatalf("after %d records, one reported missed: snapshotting %v, want true", records, p.snapshotting())
	}
	t.Logf("the exit snapshot program took %v to load", took.Round(time.Millisecond))
}

// TestSnapshotLoadDoesNotStallReader delays the exit program's load by
// 3 s, as a starved machine did (11 s once), and checks that the ring is
// read at every poll meanwhile: it used to be loaded on the reader's
// goroutine, which then read nothing until it was in.
func TestSnapshotLoadDoesNotStallReader(t *testing.T) {
	bpftest.Require(t)
	const delay = 3 * time.Second
	p, err := Open(Config{Frequency: 99, snapshotLoadDelay: delay})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	var mu sync.Mutex
	var polls []time.Time
	p.OnPoll(func() {
		mu.Lock()
		polls = append(polls, time.Now())
		mu.Unlock()
	})
	var records int
	go func() {
		done <- p.Run(ctx, func(*Record, int64) {
			if records++; records == 1 {
				p.MissedProcess()
			}
		})
	}()
	start := time.Now()
	took := waitSnapshots(t, p)
	loaded := time.Now()
	time.Sleep(300 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if took < delay {
		t.Errorf("the load took %v, less than the %v delay: the delay did not apply", took, delay)
	}
	// The longest time without a poll while the program loaded.
	mu.Lock()
	defer mu.Unlock()
	var gap time.Duration
	n := 0
	for i := 1; i < len(polls); i++ {
		if polls[i].After(start) && polls[i-1].Before(loaded) {
			gap = max(gap, polls[i].Sub(polls[i-1]))
			n++
		}
	}
	if n < int(delay/DefaultPollInterval)/2 || gap > time.Second {
		t.Errorf("%d polls while the exit program loaded for %v, the longest gap %v: the reader stalled", n, took, gap)
	}
	if !p.snapshotting() {
		t.Error("not snapshotting after the exit program was loaded")
	}
	t.Logf("%d polls during a %v load, longest gap %v", n, took.Round(time.Millisecond), gap.Round(time.Millisecond))
}

func TestDecodeMaps(t *testing.T) {
	rec := make([]byte, mapsHeaderSize+2*mappingSize)
	le := binary.LittleEndian
	le.PutUint32(rec[0:], 42)
	le.PutUint16(rec[4:], 2)
	for i, m := range []struct{ start, end, off, kdev, ino, ctime uint64 }{
		{0x1000, 0x2000, 0x3000, 8<<20 | 1, 77, 123456789},
		{0x7000, 0x8000, 0, 0, 0, 0},
	} {
		r := rec[mapsHeaderSize+i*mappingSize:]
		for j, v := range []uint64{m.start, m.end, m.off, m.kdev, m.ino, m.ctime} {
			le.PutUint64(r[8*j:], v)
		}
		le.PutUint32(r[48:], uint32(i*2))
	}
	var m Maps
	if err := m.Decode(rec); err != nil {
		t.Fatal(err)
	}
	want := []Mapping{
		{Start: 0x1000, End: 0x2000, Offset: 0x3000, Dev: unix.Mkdev(8, 1), Inode: 77, CtimeNs: 123456789, Kind: MappingFile},
		{Start: 0x7000, End: 0x8000, Kind: MappingVDSO},
	}
	if m.PID != 42 || !m.Complete || len(m.Mappings) != 2 || m.Mappings[0] != want[0] || m.Mappings[1] != want[1] {
		t.Fatalf("decoded %+v", m)
	}
	rec[6] = 1
	if err := m.Decode(rec); err != nil || m.Complete {
		t.Errorf("a truncated snapshot: complete %v, err %v", m.Complete, err)
	}
	for name, bad := range map[string][]byte{
		"short header":     rec[:4],
		"short mappings":   rec[:len(rec)-1],
		"too many":         append(le.AppendUint32(nil, 1), le.AppendUint16(nil, MaxMappings+1)...),
		"end before start": func() []byte { b := append([]byte(nil), rec...); le.PutUint64(b[mapsHeaderSize+8:], 0x10); return b }(),
		"unknown kind":     func() []byte { b := append([]byte(nil), rec...); le.PutUint32(b[mapsHeaderSize+48:], 9); return b }(),
	} {
		if err := m.Decode(bad); err == nil {
			t.Errorf("%s: decoded without an error", name)
		}
	}
}

func FuzzDecodeMaps(f *testing.F) {
	f.Add(make([]byte, mapsHeaderSize))
	f.Add(append([]byte{1, 0, 0, 0, 1, 0, 0, 0}, make([]byte, mappingSize)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Maps
		if err := m.Decode(b); err != nil {
			return
		}
		if len(m.Mappings) > MaxMappings || len(b) < mapsHeaderSize+len(m.Mappings)*mappingSize {
			t.Fatalf("decoded %d mappings from %d bytes", len(m.Mappings), len(b))
		}
		for _, mp := range m.Mappings {
			if mp.End < mp.Start {
				t.Fatalf("mapping ends before it starts: %+v", mp)
			}
		}
	})
}
