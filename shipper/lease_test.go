package shipper_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heatscope/heatscope/bucket"
	"github.com/heatscope/heatscope/bucketlayout"
	"github.com/heatscope/heatscope/internal/miniotest"
	"github.com/heatscope/heatscope/shipper"
	"github.com/heatscope/heatscope/store"
)

// clock is a settable clock for leases.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func lease(t *testing.T, b *bucket.Bucket, c *clock, instance, dataDir, boot string) (*shipper.Lease, error) {
	t.Helper()
	return shipper.AcquireLease(context.Background(), shipper.LeaseOptions{Bucket: b, BucketName: b.Name(), Node: "a",
		Instance: instance, DataDir: dataDir, Hostname: "vm", BootID: boot, TTL: 90 * time.Second, Now: c.now})
}

// TestNodeLease: one recorder per node name, against MinIO. A second
// instance is refused while the first renews, with an error naming it; the
// same instance restarting takes its lease back at once; a released lease
// is free at once and an expired one after its TTL; a holder whose lease
// was taken over knows it, and its shipper uploads nothing.
func TestNodeLease(t *testing.T) {
	srv := miniotest.Start(t)
	b := srv.Open("fleet")
	ctx := context.Background()
	c := &clock{t: time.Now()}
	first, err := lease(t, b, c, "1111111111111111", "/var/lib/heatscope", "boot-1")
	if err != nil {
		t.Fatal(err)
	}
	if got := srv.Objects("fleet/a/"); len(got) != 1 || got[0] != "fleet/"+bucketlayout.LeaseKey("a") {
		t.Fatalf("objects under the node: %q, want its lease alone", got)
	}

	// A second instance under the same name: refused, naming the first.
	c.t = c.t.Add(40 * time.Second)
	if err := first.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	c.t = c.t.Add(30 * time.Second)
	_, err = lease(t, b, c, "2222222222222222", "/tmp/hs-a2", "boot-2")
	var taken *shipper.NodeTakenError
	if !errors.As(err, &taken) || taken.SameInstance {
		t.Fatalf("a second instance: %v, want a *NodeTakenError", err)
	}
	for _, want := range []string{"node a is being recorded by another heatscope", "instance 1111111111111111", "host vm",
		"data directory /var/lib/heatscope", "started 20", "renewed 30s ago", "--node NAME"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}

	// The first instance restarting on its directory takes it back at once.
	restarted, err := lease(t, b, c, "1111111111111111", "/var/lib/heatscope", "boot-1")
	if err != nil {
		t.Fatalf("the same instance restarting: %v", err)
	}
	if err := restarted.Held(); err != nil {
		t.Fatal(err)
	}
	// The old process (had it lived) sees it lost the lease at its next
	// renewal: the new session holds it.
	if err := first.Renew(ctx); !errors.As(err, &taken) || first.Held() == nil {
		t.Fatalf("the superseded session's renewal: %v, held %v", err, first.Held())
	}

	// Released: free at once.
	if err := restarted.Release(ctx); err != nil {
		t.Fatal(err)
	}
	second, err := lease(t, b, c, "2222222222222222", "/tmp/hs-a2", "boot-2")
	if err != nil {
		t.Fatalf("after a release: %v", err)
	}

	// Its holder dies: the lease is taken over once its TTL has passed,
	// not before.
	c.t = c.t.Add(89 * time.Second)
	if _, err := lease(t, b, c, "3333333333333333", "/d3", "boot-3"); !errors.As(err, &taken) {
		t.Fatalf("89 s after the last renewal: %v, want refused", err)
	}
	c.t = c.t.Add(2 * time.Second)
	third, err := lease(t, b, c, "3333333333333333", "/d3", "boot-3")
	if err != nil {
		t.Fatalf("91 s after the last renewal: %v, want taken over", err)
	}
	if err := second.Renew(ctx); !errors.As(err, &taken) || taken.Holder.Instance != "3333333333333333" {
		t.Fatalf("the dead holder's late renewal: %v, want lost to instance 3333333333333333", err)
	}

	// A shipper whose lease is lost uploads nothing and says why.
	dir := t.TempDir()
	db, err := store.Open(dir, store.Options{Source: "a", Node: "a", BlockDuration: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	record(t, db, time.Now().Add(-time.Hour).UnixNano(), 25)
	db.Close()
	sh, err := shipper.New(shipper.Options{Bucket: b, BucketName: b.Name(), Dir: dir, Node: "a", Instance: testInstance, Lease: second, Logger: slog.Default()})
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Sync(ctx); !errors.As(err, &taken) {
		t.Fatalf("Sync without the lease: %v, want the NodeTakenError", err)
	}
	if got := srv.Objects("fleet/a/blocks/"); len(got) != 0 {
		t.Fatalf("a shipper without the lease uploaded %q", got)
	}
	// The blocks it holds back are counted as waiting (the log's and
	// heatscope_shipper_pending_blocks' figure), not 0.
	local, err := store.LocalBlocks(dir)
	if err != nil || len(local) == 0 {
		t.Fatalf("local blocks: %v, %v", local, err)
	}
	if st := sh.Stats(); st.Pending != len(local) {
		t.Errorf("pending %d without the lease, want the %d blocks held back", st.Pending, len(local))
	}
	if v := leaseHeld(t, sh); v != 0 {
		t.Errorf("heatscope_shipper_node_lease_held = %v without the lease, want 0", v)
	}
	holder, err := shipper.New(shipper.Options{Bucket: b, BucketName: b.Name(), Dir: dir, Node: "a", Instance: testInstance, Lease: third, Logger: slog.Default()})
	if err != nil {
		t.Fatal(err)
	}
	if v := leaseHeld(t, holder); v != 1 {
		t.Errorf("heatscope_shipper_node_lease_held = %v with the lease, want 1", v)
	}
}

// leaseHeld reads heatscope_shipper_node_lease_held from sh's metrics.
func leaseHeld(t *testing.T, sh *shipper.Shipper) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(sh.Collector(nil))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "heatscope_shipper_node_lease_held" {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no heatscope_shipper_node_lease_held")
	return -1
}

// TestLeaseCopiedDirectory: a holder with this directory's instance id on
// another machine (a cloned VM that kept the data directory) is watched:
// while it renews, the copy is refused, saying so.
func TestLeaseCopiedDirectory(t *testing.T) {
	srv := miniotest.Start(t)
	b := srv.Open("")
	ctx := context.Background()
	opts := shipper.LeaseOptions{Bucket: b, BucketName: b.Name(), Node: "a", Instance: "1111111111111111", DataDir: "/var/lib/heatscope",
		Hostname: "vm", BootID: "boot-1", TTL: 6 * time.Second, Renew: 500 * time.Millisecond}
	orig, err := shipper.AcquireLease(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go orig.Run(runCtx)
	opts.BootID = "boot-of-the-clone"
	_, err = shipper.AcquireLease(ctx, opts)
	var taken *shipper.NodeTakenError
	if !errors.As(err, &taken) || !taken.SameInstance || !strings.Contains(err.Error(), "remove identity.json") {
		t.Fatalf("a clone with the same instance id: %v, want refused as a copy", err)
	}
	// The original stops renewing (a reboot): the same directory after the
	// reboot takes it once it is seen not renewed.
	stop()
	if _, err := shipper.AcquireLease(ctx, opts); err != nil {
		t.Fatalf("after the holder stopped renewing: %v", err)
	}
	raw, _, err := b.ReadVersioned(ctx, bucketlayout.LeaseKey("a"))
	if err != nil || !bytes.Contains(raw, []byte(`"bootId":"boot-of-the-clone"`)) {
		t.Fatalf("lease after the takeover: %s, %v", raw, err)
	}
}

// TestRenamedNodeShipsOnlyNew: a data directory that shipped as b and is
// started again as b2 ships only what it records as b2 under b2/: its old
// blocks stay under b (and the samples in the bucket are not doubled),
// and a block recorded as b but not yet shipped stays in the directory.
func TestRenamedNodeShipsOnlyNew(t *testing.T) {
	srv := miniotest.Start(t)
	b := srv.Open("fleet")
	ctx := context.Background()
	dir := t.TempDir()
	open := func(node string) *store.DB {
		db, err := store.Open(dir, store.Options{Source: "vm", Node: node, BlockDuration: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return db
	}
	ship := func(node string) *shipper.Shipper {
		sh, err := shipper.New(shipper.Options{Bucket: b, BucketName: b.Name(), Dir: dir, Node: node, Instance: testInstance})
		if err != nil {
			t.Fatal(err)
		}
		if err := sh.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		return sh
	}
	start := time.Now().Add(-time.Hour).UnixNano()
	db := open("b")
	asB := record(t, db, start, 35)
	db.Close()
	ship("b")
	// Recorded as b after the last shipment, then renamed before it
	// shipped.
	db = open("b")
	unshipped := record(t, db, start+int64(40*time.Second), 15)
	db.Close()

	db = open("b2")
	asB2 := record(t, db, start+int64(60*time.Second), 25)
	db.Close()
	sh := ship("b2")

	inB, inB2 := sumPrefix(t, srv, b, "fleet/b/"), sumPrefix(t, srv, b, "fleet/b2/")
	if inB != asB || inB2 != asB2 {
		t.Fatalf("bucket: b holds %d samples, b2 %d; recorded %d as b (shipped as b), %d as b then not shipped, %d as b2",
			inB, inB2, asB, unshipped, asB2)
	}
	// The block recorded as b and never shipped is not lost: kept from age
	// retention only while it waits for its own node's shipper.
	rdb, err := store.Open(dir, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	kept := 0
	for _, n := range rdb.Nodes() {
		if n.Name == "b" {
			kept = n.Samples
		}
	}
	if kept != asB+unshipped {
		t.Fatalf("the data directory holds %d samples of node b, want %d", kept, asB+unshipped)
	}
	if st := sh.Stats(); st.Pending != 0 {
		t.Errorf("pending %d: blocks of another node are not waiting to ship", st.Pending)
	}
}

// sumPrefix sums the samples of the blocks whose meta.json is under
// prefix (a full object name, the bucket's prefix included).
func sumPrefix(t *testing.T, srv *miniotest.Server, b *bucket.Bucket, prefix string) int {
	t.Helper()
	n := 0
	for _, o := range srv.Objects(prefix) {
		if !strings.HasSuffix(o, "/meta.json") {
			continue
		}
		raw, _, err := b.ReadVersioned(context.Background(), strings.TrimPrefix(o, "fleet/"))
		if err != nil {
			t.Fatal(err)
		}
		m, err := store.ParseMeta(raw)
		if err != nil {
			t.Fatal(err)
		}
		n += m.Samples
	}
	return n
}

// FuzzParseLease: any lease object is decoded or refused, and a decoded
// one names an instance and has no negative time.
func FuzzParseLease(f *testing.F) {
	f.Add([]byte(`{"version":1,"node":"a","instance":"3f9c21d04e5b6a78","session":"00","started":1,"renewed":2,"ttlMs":90000,"renewMs":15000}`))
	f.Add([]byte(`{"version":2,"instance":"x"}`))
	f.Add([]byte(`{"version":1,"instance":"x","ttlMs":-1}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		r, err := shipper.ParseLease(raw)
		if err == nil && (r.Version != 1 || r.Instance == "" || r.TTLMs < 0 || r.Renewed < 0) {
			t.Fatalf("accepted %+v", r)
		}
	})
}
