package store

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/events"
	"github.com/heatscope/heatscope/internal/synth"
)

func testEvent(t int64, source, text string) events.Event {
	return events.Event{Time: t, Source: source, Severity: events.Warning, Text: text,
		Labels: map[string]string{"pattern": "p", "seq": strconv.FormatInt(t, 10)}}
}

func TestEventsAppendQueryReopen(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{Source: "host"})
	if err != nil {
		t.Fatal(err)
	}
	base := time.Now().UnixNano()
	want := []events.Event{
		testEvent(base+3e9, "kmsg", "ena 0000:00:05.0 eth0: Device reset"),
		testEvent(base+1e9, "deploy", "deploy api v42"),
		testEvent(base+2e9, "kmsg", "NETDEV WATCHDOG: eth0 (ena): transmit queue 3 timed out"),
	}
	for _, e := range want {
		if err := db.AppendEvent(e); err != nil {
			t.Fatal(err)
		}
	}
	sorted := []events.Event{want[1], want[2], want[0]}
	check := func(db *DB, what string) {
		t.Helper()
		got, more := db.Events(everything, EventFilter{}, 0)
		if more || !reflect.DeepEqual(got, sorted) {
			t.Fatalf("%s: events %+v, want %+v", what, got, sorted)
		}
		got, _ = db.Events(Range{From: base + 1e9 + 1, To: base + 3e9}, EventFilter{}, 0)
		if len(got) != 1 || got[0].Text != want[2].Text {
			t.Fatalf("%s: range query %+v", what, got)
		}
		got, _ = db.Events(everything, EventFilter{Sources: []string{"kmsg"}}, 0)
		if len(got) != 2 || got[0].Source != "kmsg" || got[1].Source != "kmsg" {
			t.Fatalf("%s: source query %+v", what, got)
		}
		got, _ = db.Events(everything, EventFilter{Kinds: []string{"p", "other"}}, 0)
		if len(got) != 2 || got[0].Kind() != "p" {
			t.Fatalf("%s: kind query %+v", what, got)
		}
		got, _ = db.Events(everything, EventFilter{Sources: []string{"deploy"}, Kinds: []string{"p"}}, 0)
		if len(got) != 0 {
			t.Fatalf("%s: kind and source query %+v", what, got)
		}
		got, more = db.Events(everything, EventFilter{}, 2)
		if len(got) != 2 || !more || got[1].Time != base+2e9 {
			t.Fatalf("%s: limited query %+v, more %v", what, got, more)
		}
		if last, ok := db.LatestEvent("kmsg"); !ok || last != base+3e9 {
			t.Fatalf("%s: latest kmsg event %d %v", what, last, ok)
		}
		if _, ok := db.LatestEvent("nobody"); ok {
			t.Fatalf("%s: latest event of an unknown source", what)
		}
		if st := db.Stats(); st.Events != 3 {
			t.Fatalf("%s: stats count %d events", what, st.Events)
		}
	}
	check(db, "open")

	// A read-only reader sees them, and sees new ones after Refresh.
	ro, err := Open(dir, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	check(ro, "reader")
	late := testEvent(base+4e9, "deploy", "deploy api v43")
	if err := db.AppendEvent(late); err != nil {
		t.Fatal(err)
	}
	if err := ro.Refresh(); err != nil {
		t.Fatal(err)
	}
	if got, _ := ro.Events(everything, EventFilter{}, 0); len(got) != 4 || !reflect.DeepEqual(got[3], late) {
		t.Fatalf("reader after refresh: %+v", got)
	}
	if err := ro.AppendEvent(late); err == nil {
		t.Error("a read-only DB appended an event")
	}
	db.Close()

	// Reopened: all there; new events go to a new segment.
	db, err = Open(dir, Options{Source: "host"})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sorted = append(sorted, late)
	if got, _ := db.Events(everything, EventFilter{}, 0); !reflect.DeepEqual(got, sorted) {
		t.Fatalf("after reopen: %+v", got)
	}
	if err := db.AppendEvent(testEvent(base+5e9, "kmsg", "after reopen")); err != nil {
		t.Fatal(err)
	}
	if segs, _ := os.ReadDir(filepath.Join(dir, eventsDir)); len(segs) != 2 {
		t.Fatalf("%d event segments, want 2", len(segs))
	}
}

func TestAppendEventRefusesInvalid(t *testing.T) {
	db, err := Open(t.TempDir(), Options{Source: "host"})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	e := testEvent(time.Now().UnixNano(), "kmsg", "two\nlines")
	var fe *events.FieldError
	if err := db.AppendEvent(e); !errors.As(err, &fe) || fe.Field != "text" {
		t.Fatalf("AppendEvent: %v, want a field error naming text", err)
	}
	if got, _ := db.Events(everything, EventFilter{}, 0); len(got) != 0 {
		t.Fatalf("stored %+v", got)
	}
}

// TestEventsTornTail: garbage after the last whole page (a crash during a
// write) keeps every event before it, and new events still append.
func TestEventsTornTail(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{Source: "host"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixNano()
	for i := range 5 {
		db.AppendEvent(testEvent(now+int64(i), "kmsg", fmt.Sprintf("event %d", i)))
	}
	db.Close()
	seg := filepath.Join(dir, eventsDir, fmt.Sprintf("%016d", 1))
	whole, _ := os.ReadFile(seg)
	for _, tail := range [][]byte{{0x30, 0, 0, 0, 1, 2}, whole[:20]} {
		os.WriteFile(seg, append(append([]byte{}, whole...), tail...), 0o644)
		db, err = Open(dir, Options{Source: "host"})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := db.Events(everything, EventFilter{}, 0)
		if len(got) != 5 || got[4].Text != "event 4" {
			t.Fatalf("after a torn tail: %d events", len(got))
		}
		if err := db.AppendEvent(testEvent(now+10, "kmsg", "next")); err != nil {
			t.Fatal(err)
		}
		db.Close()
		os.RemoveAll(filepath.Join(dir, eventsDir))
		os.MkdirAll(filepath.Join(dir, eventsDir), 0o755)
	}
	// A flipped byte inside a page: the events before it stay.
	corrupt := append([]byte{}, whole...)
	corrupt[len(corrupt)/2] ^= 0xff
	os.WriteFile(seg, corrupt, 0o644)
	db, err = Open(dir, Options{Source: "host"})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got, _ := db.Events(everything, EventFilter{}, 0); len(got) < 1 || len(got) >= 5 {
		t.Fatalf("after corruption: %d events, want those before the damage", len(got))
	}
}

// TestEventsRetention: events go with the age limit, with the size limit
// (older than the oldest recorded sample left), and past MaxEvents.
func TestEventsRetention(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	db, err := Open(dir, Options{Source: "host"})
	if err != nil {
		t.Fatal(err)
	}
	old := now.Add(-10 * 24 * time.Hour).UnixNano()
	db.AppendEvent(testEvent(old, "kmsg", "old"))
	db.Close()
	db, err = Open(dir, Options{Source: "host", Retention: 7 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	db.AppendEvent(testEvent(now.UnixNano(), "kmsg", "new"))
	db.applyRetention(now)
	if got, _ := db.Events(everything, EventFilter{}, 0); len(got) != 1 || got[0].Text != "new" {
		t.Fatalf("after age retention: %+v", got)
	}
	if st := db.Stats(); st.EventsDropped != 1 || st.Events != 1 {
		t.Fatalf("stats %+v", st)
	}
	db.Close()

	// MaxEvents: whole segments, oldest first.
	db, err = Open(dir, Options{Source: "host", MaxEvents: 2})
	if err != nil {
		t.Fatal(err)
	}
	db.AppendEvent(testEvent(now.UnixNano()+1, "kmsg", "newer"))
	db.AppendEvent(testEvent(now.UnixNano()+2, "kmsg", "newest"))
	db.applyRetention(now)
	if got, _ := db.Events(everything, EventFilter{}, 0); len(got) != 2 || got[0].Text != "newer" {
		t.Fatalf("after the count limit: %+v", got)
	}
	db.Close()
}

func TestEventsGoWithSizeRetention(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{Source: "host", BlockDuration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	start := time.Now().Add(-time.Hour).UnixNano()
	appendSynth(t, db, synth.Config{CPUs: 2, Hz: 99, Start: start, Seconds: 300, Stacks: 100})
	db.AppendEvent(testEvent(start+10e9, "kmsg", "early"))
	db.events.close() // the next event starts a new segment
	db.AppendEvent(testEvent(start+290e9, "kmsg", "late"))
	db.mu.Lock()
	db.cutLocked()
	db.mu.Unlock()
	waitSealed(t, db)
	db.applyRetention(time.Now())
	if got, _ := db.Events(everything, EventFilter{}, 0); len(got) != 2 {
		t.Fatalf("without limits: %d events", len(got))
	}
	st := db.Stats()
	db.opts.RetentionSize = st.BlockBytes / 2
	db.applyRetention(time.Now())
	got, _ := db.Events(everything, EventFilter{}, 0)
	if len(got) != 1 || got[0].Text != "late" {
		t.Fatalf("after size retention: %+v, want only the event after the oldest sample left", got)
	}
	// With no recorded block left there is nothing to measure from.
	db.opts.RetentionSize = 1
	db.applyRetention(time.Now())
	if got, _ := db.Events(everything, EventFilter{}, 0); db.Stats().Blocks != 0 || len(got) != 1 {
		t.Fatalf("all blocks dropped: %d blocks, %d events", db.Stats().Blocks, len(got))
	}
}

// TestEventsSurviveSIGKILL: a child appends events until it is killed;
// every event it reported is there afterwards.
func TestEventsSurviveSIGKILL(t *testing.T) {
	dir := t.TempDir()
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), crashEventsChildEnv+"="+dir)
	out, _ := child.StdoutPipe()
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	last := -1
	for lines.Scan() && last < 50 {
		n, err := strconv.Atoi(strings.TrimSpace(lines.Text()))
		if err != nil {
			t.Fatalf("child: %s", lines.Text())
		}
		last = n
	}
	child.Process.Kill()
	child.Wait()
	db, err := Open(dir, Options{Source: "host"})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	got, _ := db.Events(everything, EventFilter{}, 0)
	if len(got) < last+1 {
		t.Fatalf("%d events after SIGKILL, the child had reported %d", len(got), last+1)
	}
	for i := range last + 1 {
		if got[i].Text != fmt.Sprintf("event %d", i) {
			t.Fatalf("event %d is %q", i, got[i].Text)
		}
	}
}

const crashEventsChildEnv = "HEATSCOPE_STORE_EVENTS_CRASH_CHILD"

// crashEventsChild appends an event every 2 ms, printing each number once
// AppendEvent returned, until it is killed.
func crashEventsChild(dir string) {
	db, err := Open(dir, Options{Source: "host"})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(1)
	}
	for i := 0; ; i++ {
		if err := db.AppendEvent(events.Event{Time: time.Now().UnixNano(), Source: "test", Severity: events.Info, Text: fmt.Sprintf("event %d", i)}); err != nil {
			fmt.Println("append:", err)
			os.Exit(1)
		}
		fmt.Println(i)
		time.Sleep(2 * time.Millisecond)
	}
}

// FuzzReadEventSegment: whatever a segment file holds, reading it keeps
// only valid events, and the events it keeps re-encode to the same bytes.
func FuzzReadEventSegment(f *testing.F) {
	var seg []byte
	seg = encodeEvent(seg, &events.Event{Time: 1795237387e9, Source: "kmsg", Severity: events.Warning,
		Text: "ena 0000:00:05.0 eth0: Device reset", Labels: map[string]string{"pattern": "ena-reset", "seq": "42"}})
	seg = encodeEvent(seg, &events.Event{Time: 1795237388e9, Source: "deploy", Severity: events.Info, Text: "deploy"})
	f.Add(seg)
	f.Add(seg[:len(seg)-3])
	f.Fuzz(func(t *testing.T, b []byte) {
		s, _ := readEvents(bytes.NewReader(b), "seg", &eventSegment{})
		var again []byte
		for i := range s.events {
			if err := s.events[i].Validate(); err != nil {
				t.Fatalf("kept an invalid event: %v", err)
			}
			again = encodeEvent(again, &s.events[i])
		}
		if int64(len(again)) != s.size || string(again) != string(b[:s.size]) {
			t.Fatalf("%d events re-encode to %d bytes, read %d", len(s.events), len(again), s.size)
		}
	})
}
