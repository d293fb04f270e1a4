package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heatscope/heatscope/bucketindex"
	"github.com/heatscope/heatscope/internal/miniotest"
)

// TestCompactCommand runs "heatscope compact --once" on a real MinIO, and
// checks what it says about bad flags and a missing bucket.
func TestCompactCommand(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"compact"}, "--objstore-config is required"},
		{[]string{"compact", "--objstore-config", "x.yaml", "--ranges", "2h,soon"}, `--ranges: "soon"`},
		{[]string{"compact", "--objstore-config", "x.yaml", "--retention", "forever"}, "--retention"},
		{[]string{"compact", "--objstore-config", "x.yaml", "--delete-delay", "0s"}, "--delete-delay must be positive"},
		{[]string{"compact", "--objstore-config", "x.yaml", "--index-interval", "-10s"}, "--index-interval must not be negative"},
	} {
		var out, errb bytes.Buffer
		if code := run(c.args, &out, &errb); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", c.args, code, errb.String(), c.want)
		}
	}

	srv := miniotest.Start(t)
	var out, errb bytes.Buffer
	missing := srv.WriteConfigOf(srv.ConfigWith("", srv.AccessKey, srv.SecretKey, "no-such-bucket"))
	if code := run([]string{"compact", "--once", "--listen", "", "--objstore-config", missing}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "no-such-bucket") {
		t.Fatalf("missing bucket: exit %d, %q; want 1 and the bucket named", code, errb.String())
	}
	if strings.Contains(errb.String(), srv.SecretKey) {
		t.Fatal("the error shows the secret key")
	}
	out.Reset()
	errb.Reset()
	cfg := srv.WriteConfig("fleet")
	if code := run([]string{"compact", "--once", "--listen", "", "--work-dir", t.TempDir(), "--objstore-config", cfg}, &out, &errb); code != 0 {
		t.Fatalf("compact --once: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "0 nodes, 0 blocks") {
		t.Fatalf("compact --once printed %q", out.String())
	}
	ix, err := bucketindex.Read(context.Background(), srv.Open("fleet"))
	if err != nil || len(ix.Blocks) != 0 {
		t.Fatalf("bucket index after a pass over an empty bucket: %+v, %v", ix, err)
	}
	if objs := srv.Objects("fleet/"); strings.Contains(strings.Join(objs, " "), "compactor-lock.json") {
		t.Fatalf("the lock is left after --once: %v", objs)
	}
}

// TestCompactOnceBindsNothing: a single pass serves no metrics unless
// --listen is given, so that it runs while the default port is taken
// (a long-running compactor on the same machine).
func TestCompactOnceBindsNothing(t *testing.T) {
	srv := miniotest.Start(t)
	if ln, err := net.Listen("tcp", "127.0.0.1:7472"); err == nil {
		defer ln.Close()
	} // else taken already: as well
	var out, errb bytes.Buffer
	if code := run([]string{"compact", "--once", "--work-dir", t.TempDir(), "--objstore-config", srv.WriteConfig("once")}, &out, &errb); code != 0 {
		t.Fatalf("compact --once with :7472 taken: exit %d: %s", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"compact", "--once", "--listen", "127.0.0.1:7472", "--work-dir", t.TempDir(), "--objstore-config", srv.WriteConfig("once")}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "--listen") {
		t.Fatalf("compact --once --listen on a taken port: exit %d, %q; want 1 and --listen named", code, errb.String())
	}
}

// TestCompactorLockProcesses runs real compactor processes on one bucket:
// two started at the same instant, of which exactly one holds the lock
// while the other waits naming it; a single pass refused with the
// holder's name; and the holder SIGKILLed, replaced by the waiting one
// within the lock's time to live.
func TestCompactorLockProcesses(t *testing.T) {
	srv := miniotest.Start(t)
	cfg := srv.WriteConfig("locked")
	bin := buildHeatscope(t, t.TempDir())
	const ttl = 8 * time.Second
	args := func() []string {
		return []string{"compact", "--objstore-config", cfg, "--work-dir", t.TempDir(), "--lock-ttl", ttl.String(),
			"--interval", "1h", "--index-interval", "0", "--listen", ""}
	}
	a, b := startDaemon(t, bin, args()...), startDaemon(t, bin, args()...)
	const holding, waiting = "holding the bucket's compactor lock", "another compactor holds the bucket's lock"
	var holder, standby *daemon
	deadline := time.Now().Add(30 * time.Second)
	for holder == nil || standby == nil {
		if time.Now().After(deadline) {
			t.Fatalf("no holder and standby after 30 s:\nA: %s\nB: %s", a.log(), b.log())
		}
		time.Sleep(100 * time.Millisecond)
		la, lb := a.log(), b.log()
		switch {
		case strings.Contains(la, holding) && strings.Contains(lb, holding):
			t.Fatalf("both compactors hold the lock:\nA: %s\nB: %s", la, lb)
		case strings.Contains(la, holding) && strings.Contains(lb, waiting):
			holder, standby = a, b
		case strings.Contains(lb, holding) && strings.Contains(la, waiting):
			holder, standby = b, a
		}
	}
	holderName := fmt.Sprintf(":%d", holder.cmd.Process.Pid)
	if !strings.Contains(standby.log(), holderName) {
		t.Fatalf("the waiting compactor does not name the holder (pid %d):\n%s", holder.cmd.Process.Pid, standby.log())
	}
	var out, errb bytes.Buffer
	if code := run([]string{"compact", "--once", "--work-dir", t.TempDir(), "--objstore-config", cfg}, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), "another compactor (") || !strings.Contains(errb.String(), holderName+") holds the lock") {
		t.Fatalf("compact --once while another holds the lock: exit %d, %q; want 1 and the holder named", code, errb.String())
	}

	// Let the holder renew once more, then kill it.
	time.Sleep(ttl / 2)
	if err := holder.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	for !strings.Contains(standby.log(), holding) {
		if time.Since(killed) > 3*ttl {
			t.Fatalf("the waiting compactor did not take over %v after the holder was killed:\n%s", 3*ttl, standby.log())
		}
		time.Sleep(100 * time.Millisecond)
	}
	took := time.Since(killed)
	t.Logf("replaced %v after the holder's SIGKILL (lock ttl %v)", took.Round(100*time.Millisecond), ttl)
	if took > ttl+2*time.Second {
		t.Fatalf("the waiting compactor took over %v after the holder's death, more than the lock's time to live %v", took, ttl)
	}
	if !strings.Contains(standby.log(), "taking over an expired compactor lock") {
		t.Fatalf("the take-over is not logged:\n%s", standby.log())
	}
}

// TestCompactorWaitsForTheBucket starts a long-running compactor while its
// MinIO does not answer: it waits (a Deployment's pod need not crash in a
// loop) and takes the lock once MinIO is back; a single pass fails.
func TestCompactorWaitsForTheBucket(t *testing.T) {
	srv := miniotest.Start(t)
	cfg := srv.WriteConfig("waiting")
	bin := buildHeatscope(t, t.TempDir())
	srv.Pause()
	var out, errb bytes.Buffer
	if code := run([]string{"compact", "--once", "--work-dir", t.TempDir(), "--objstore-config", cfg}, &out, &errb); code != 1 {
		t.Fatalf("compact --once with the bucket stopped: exit %d, %q; want 1", code, errb.String())
	}
	d := startDaemon(t, bin, "compact", "--objstore-config", cfg, "--work-dir", t.TempDir(), "--listen", "")
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(d.log(), "the bucket does not answer: waiting for it") {
		select {
		case err := <-d.done:
			t.Fatalf("the compactor exited while its bucket did not answer: %v\n%s", err, d.log())
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the compactor does not say it waits for its bucket:\n%s", d.log())
		}
	}
	srv.Resume()
	deadline = time.Now().Add(60 * time.Second)
	for !strings.Contains(d.log(), "holding the bucket's compactor lock") {
		if time.Now().After(deadline) {
			t.Fatalf("the compactor did not start once its bucket answered:\n%s", d.log())
		}
		time.Sleep(200 * time.Millisecond)
	}
}
