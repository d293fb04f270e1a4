package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

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
