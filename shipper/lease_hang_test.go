package shipper

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/miniotest"
)

// TestLeaseRenewalNamesAHungBucket: a real MinIO paused (SIGSTOP: its
// kernel still accepts connections, nothing answers) under a lease
// renewed every second. The log says the lease was not renewed within a
// few renewals, not when the client's own timeouts give up (30 s a try,
// three tries); MinIO resumed, the log says the bucket answers again and
// the lease is held.
func TestLeaseRenewalNamesAHungBucket(t *testing.T) {
	srv := miniotest.Start(t)
	b := srv.Open("fleet")
	var logs lockedLog
	l, err := AcquireLease(context.Background(), LeaseOptions{Bucket: b, BucketName: b.Name(), Node: "a", Instance: "1111111111111111",
		DataDir: "/var/lib/heatscope", TTL: 30 * time.Second, Renew: time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor := func(what string, within time.Duration, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(within); !cond(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("after %s: %s\n%s", within, what, logs.String())
			}
		}
	}

	srv.Pause()
	paused := time.Now()
	waitFor("the log does not say the lease was not renewed", 10*time.Second, func() bool { return strings.Contains(logs.String(), "node lease not renewed") })
	t.Logf("the hung bucket was logged %s after it stopped answering", time.Since(paused).Round(100*time.Millisecond))
	srv.Resume()
	waitFor("the log does not say the bucket answers again", 20*time.Second, func() bool {
		return strings.Contains(logs.String(), "node lease renewed again: the bucket answers")
	})
	if err := l.Held(); err != nil {
		t.Errorf("the bucket back, the lease: %v", err)
	}
}
