package events

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestKmsgSourceKernel writes lines into the real kernel log and checks
// that the source emits the one matching its pattern, at the time it was
// written, and skips a matching line older than since.
func TestKmsgSourceKernel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("writing to /dev/kmsg needs root")
	}
	w, err := os.OpenFile(KmsgPath, os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("open /dev/kmsg for writing: %v", err)
	}
	defer w.Close()
	tag := fmt.Sprintf("heatscope-events-test-%d", time.Now().UnixNano())
	pattern := Pattern{Name: "test", Re: regexp.MustCompile(regexp.QuoteMeta(tag) + ` (old|new)`)}
	fmt.Fprintf(w, "<4>%s old\n", tag)
	time.Sleep(20 * time.Millisecond)
	since := time.Now().UnixNano()
	// The kernel's clock runs a few ms behind CLOCK_MONOTONIC here: keep
	// the new line clear of since.
	time.Sleep(20 * time.Millisecond)

	src := NewKmsgSource(KmsgPath, []Pattern{pattern}, nil)
	f, err := src.Open()
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan Event, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- src.Run(ctx, f, since, func(e Event) { got <- e }) }()
	fmt.Fprintf(w, "<3>%s unrelated line\n", tag)
	written := time.Now().UnixNano()
	fmt.Fprintf(w, "<4>%s new\n", tag)
	select {
	case e := <-got:
		if e.Text != tag+" new" || e.Source != "kmsg" || e.Severity != Warning || e.Labels["pattern"] != "test" || e.Labels["facility"] != "user" {
			t.Errorf("event %+v", e)
		}
		if d := time.Duration(e.Time - written); d < -50*time.Millisecond || d > 50*time.Millisecond {
			t.Errorf("event time is %v from when it was written", d)
		}
		if err := e.Validate(); err != nil {
			t.Error(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no event in 5 s; status %+v", src.Status())
	}
	if st := src.Status(); !st.Enabled || st.Matched != 1 || st.Records < 3 {
		t.Errorf("status while running: %+v", st)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if st := src.Status(); st.Enabled {
		t.Errorf("status after stop: %+v", st)
	}
	select {
	case e := <-got:
		t.Errorf("extra event %+v (the old line is before since)", e)
	default:
	}
}

// TestKmsgSourceUnreadable: a kernel log that cannot be opened turns
// events off, says why, and is not fatal.
func TestKmsgSourceUnreadable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no-kmsg")
	src := NewKmsgSource(path, DefaultPatterns(), nil)
	if st := src.Status(); st.Enabled || st.Reason == "" {
		t.Errorf("before Open: %+v", st)
	}
	if _, err := src.Open(); err == nil {
		t.Fatal("Open of a missing file succeeded")
	}
	if st := src.Status(); st.Enabled || !strings.Contains(st.Reason, "no-kmsg") {
		t.Errorf("status %+v, want off with the reason", st)
	}
}

// recordFile hands out one record per Read, like /dev/kmsg; after the
// last it waits for the deadline, then reports EOF.
type recordFile struct {
	records  []string
	deadline time.Time
}

func (f *recordFile) Read(b []byte) (int, error) {
	if len(f.records) > 0 {
		n := copy(b, f.records[0])
		f.records = f.records[1:]
		return n, nil
	}
	if !f.deadline.IsZero() {
		f.deadline = time.Time{}
		return 0, os.ErrDeadlineExceeded
	}
	return 0, io.EOF
}

func (f *recordFile) SetReadDeadline(t time.Time) error { f.deadline = t; return nil }
func (f *recordFile) Close() error                      { return nil }

// TestKmsgSourceFragments: older kernels split a line printed in pieces
// into a 'c' record and '+' continuations; the source matches the joined
// line, also when nothing follows the last piece.
func TestKmsgSourceFragments(t *testing.T) {
	src := NewKmsgSource("", DefaultPatterns(), nil)
	f := &recordFile{records: []string{
		"4,10,1000,c;NETDEV WATCHDOG: eth0 (ena): ",
		"4,11,1001,+;transmit queue 2 timed out\n",
		"6,12,1002,-;unrelated\n",
		"garbage",
		"4,15,2000,c;app[1]: segf",
		"4,16,2001,+;ault at 0 ip 0\n",
	}}
	var got []Event
	err := src.Run(context.Background(), f, 0, func(e Event) { got = append(got, e) })
	if err == nil || !strings.Contains(err.Error(), "EOF") {
		t.Errorf("Run: %v", err)
	}
	if len(got) != 2 || got[0].Text != "NETDEV WATCHDOG: eth0 (ena): transmit queue 2 timed out" || got[0].Labels["pattern"] != "netdev-watchdog" ||
		got[0].Labels["seq"] != "10" || got[1].Text != "app[1]: segfault at 0 ip 0" {
		t.Fatalf("events %+v", got)
	}
	if st := src.Status(); st.Records != 5 || st.Malformed != 1 || st.Missed != 2 || st.Matched != 2 || st.Enabled {
		t.Errorf("status %+v", st)
	}
}
