package shipper

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/miniotest"
)

// TestReachability: a real MinIO stopped and started again under a
// watcher asking it every 100 ms: Err names the bucket within a few
// probes, the log says it once when it stops answering and once when it
// answers again, and Err is nil again.
func TestReachability(t *testing.T) {
	srv := miniotest.Start(t)
	b := srv.Open("p")
	var logs lockedLog
	r := NewReachability(b, b.Name(), "", 100*time.Millisecond, slog.New(slog.NewTextHandler(&logs, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	defer func() { cancel(); <-done }()

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("after 30 s: %s\n%s", what, logs.String())
			}
		}
	}
	time.Sleep(300 * time.Millisecond) // a few probes of a bucket that answers
	if err := r.Err(); err != nil {
		t.Fatalf("the bucket answers, yet: %v", err)
	}
	srv.Stop()
	waitFor("Err says nothing of the stopped bucket", func() bool { return r.Err() != nil })
	if err := r.Err(); !strings.Contains(err.Error(), b.Name()) || !strings.Contains(err.Error(), "has not answered since") {
		t.Errorf("Err: %v; want the bucket named, and since when", err)
	}
	srv.Restart()
	waitFor("Err still fails with the bucket back", func() bool { return r.Err() == nil })
	l := logs.String()
	if strings.Count(l, "the bucket does not answer") != 1 || strings.Count(l, "the bucket answers again") != 1 || !strings.Contains(l, b.Name()) {
		t.Errorf("log: want the outage and its end once each, the bucket named:\n%s", l)
	}
}

// lockedLog is a log's buffer, written by the watcher's goroutine.
type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
