package store

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/sample"
)

// walBytes logs some synthetic samples the way the DB does and returns the
// segment's bytes.
func walBytes(t testing.TB, seconds float64) []byte { return walBytesOf(t, seconds, false) }

// walBytesOf is walBytes with the frames marked (synth.Config.Unwind) when
// marked.
func walBytesOf(t testing.TB, seconds float64, marked bool) []byte {
	return walBytesOfConfig(t, synth.Config{CPUs: 2, Hz: 99, Start: 1e18, Seconds: seconds, Stacks: 20, Containers: true, Unwind: marked})
}

// walBytesOfConfig is walBytes of cfg's samples.
func walBytesOfConfig(t testing.TB, cfg synth.Config) []byte {
	dir := t.TempDir()
	w, err := createWAL(dir, 1)
	if err != nil {
		t.Fatal(err)
	}
	b := NewBuilder()
	b.onNew = w
	g := synth.New(cfg)
	var s sample.Sample
	for i := 0; g.Next(&s); i++ {
		b.Append(&s)
		n := b.T.Len() - 1
		w.addSample(b.T.Time[n], b.T.CPU[n], b.T.Thread[n], b.T.Stack[n])
		if i%50 == 0 {
			w.flush(i%100 == 0)
		}
	}
	w.close()
	data, _ := os.ReadFile(walPath(dir, 1))
	return data
}

// The recorder's WAL writes and syncs with raw syscalls
// (Options.CallerTicks); both ways must log the same pages.
func TestWALReplayMatchesWriter(t *testing.T) {
	for _, raw := range []bool{false, true} {
		t.Run(map[bool]string{false: "os.File", true: "raw syscalls"}[raw], func(t *testing.T) {
			testWALReplay(t, raw)
		})
	}
}

func testWALReplay(t *testing.T, raw bool) {
	dir := t.TempDir()
	w, _ := createWAL(dir, 7)
	w.raw = raw
	b := NewBuilder()
	b.onNew = w
	g := synth.New(synth.Config{CPUs: 4, Hz: 99, Start: 1e18, Seconds: 10, Stacks: 100, Containers: true, Unwind: true}) // how frames were found is logged too
	var s sample.Sample
	var want []sample.Sample
	for i := 0; g.Next(&s); i++ {
		b.Append(&s)
		n := b.T.Len() - 1
		w.addSample(b.T.Time[n], b.T.CPU[n], b.T.Thread[n], b.T.Stack[n])
		want = append(want, b.T.Sample(n))
		if i%97 == 0 {
			w.flush(i%100 == 0)
		}
	}
	w.close()
	got, err := replayWAL(walPath(dir, 7))
	if err != nil {
		t.Fatal(err)
	}
	if got.T.Len() != len(want) {
		t.Fatalf("replayed %d samples, logged %d", got.T.Len(), len(want))
	}
	for i := range want {
		if !equalSamples(got.T.Sample(i), want[i]) {
			t.Fatalf("sample %d differs", i)
		}
	}
	if _, err := replayWAL(filepath.Join(dir, "missing")); err == nil {
		t.Error("replaying a missing segment succeeded")
	}
}

// With CallerTicks, the WAL is written and synced by Tick once 500 ms have
// passed, and not before, and Close still loses nothing.
func TestCallerTicks(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{Source: "test", CallerTicks: true})
	if err != nil {
		t.Fatal(err)
	}
	if db.stop != nil {
		t.Fatal("CallerTicks started a background goroutine")
	}
	start := time.Now().UnixNano()
	want := appendSynth(t, db, synth.Config{CPUs: 2, Hz: 99, Start: start, Seconds: 1, Stacks: 20})
	seg := walPath(dir, db.wal.seq)
	db.Tick() // less than 500 ms after Open: nothing is due
	if db.wal.buffered() == 0 {
		t.Fatal("Tick flushed the WAL before it was due")
	}
	time.Sleep(walFlushInterval)
	db.Tick()
	if n := db.wal.buffered(); n != 0 {
		t.Fatalf("%d bytes still buffered after a due Tick", n)
	}
	replayed, err := replayWAL(seg)
	if err != nil {
		t.Fatal(err)
	}
	if replayed.T.Len() != len(want) {
		t.Fatalf("WAL holds %d samples after Tick, appended %d", replayed.T.Len(), len(want))
	}
	// Written, safe from the agent's crash, but synced only every 5 s.
	if !db.wal.unsynced {
		t.Fatal("the WAL was fsynced 500 ms after Open; syncs are due every 5 s")
	}
	db.lastSync = db.lastSync.Add(-walSyncInterval)
	time.Sleep(walFlushInterval)
	db.Tick()
	if db.wal.unsynced {
		t.Fatal("a Tick with a sync due left the WAL unsynced")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open(dir, Options{Source: "test", ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got := all(t, db, Filter{}); len(got) != len(want) {
		t.Fatalf("read %d samples after Close, appended %d", len(got), len(want))
	}
}

func FuzzReplayWAL(f *testing.F) {
	f.Add(walBytes(f, 0.5))
	f.Add(walBytesOf(f, 0.5, true))
	f.Add(walBytesOfConfig(f, synth.Config{CPUs: 2, Hz: 99, Start: 1e18, Seconds: 0.5, Stacks: 20, Python: true}))
	f.Add([]byte{})
	f.Add([]byte{4, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4})
	f.Fuzz(func(t *testing.T, data []byte) {
		b := NewBuilder()
		replayPages(bytes.NewReader(data), b)
		// Whatever was replayed must be consistent.
		for i := range b.T.Len() {
			b.T.Sample(i)
		}
	})
}
