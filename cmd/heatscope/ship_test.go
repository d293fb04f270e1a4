package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/bucketlayout"
	"github.com/heatscope/heatscope/internal/bpftest"
	"github.com/heatscope/heatscope/internal/miniotest"
	"github.com/heatscope/heatscope/store"
)

// TestRecordShipsToMinIO records a fixture with --objstore-config into a
// real MinIO: blocks appear under <prefix>/<node>/blocks/ while recording,
// carry the node and its labels, hold every sample recorded once the
// recorder stops, and no credential shows in /metrics or the output.
func TestRecordShipsToMinIO(t *testing.T) {
	bpftest.Require(t)
	srv := miniotest.Start(t)
	dir := t.TempDir()
	bin := buildHeatscope(t, dir)
	hotc, _ := buildFixtures(t, dir)
	start(t, hotc)
	data := filepath.Join(dir, "data")
	addr := "127.0.0.1:" + freePort(t)
	d := startDaemon(t, bin, "record", "--data", data, "--objstore-config", srv.WriteConfig("fleet"), "--node", "node-a",
		"--node-label", "zone=us-east-1a", "--node-label", "cluster=ray", "--duration", "60s", "--listen", addr,
		"--progress", "0", "--block-duration", "2s")
	url := "http://" + addr
	waitServing(t, d, url+"/healthz")
	deadline := time.Now().Add(30 * time.Second)
	for len(metasIn(t, srv, "fleet", "node-a")) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no two blocks in the bucket after 30 s of recording\n%s", d.log())
		}
		time.Sleep(200 * time.Millisecond)
	}
	_, metricsText := httpGet(t, url+"/metrics")
	fams := scrape(t, url+"/metrics")
	d.stop(t)
	for _, name := range []string{"heatscope_shipper_uploads_total", "heatscope_shipper_blocks_shipped_total", "heatscope_shipper_uploaded_bytes_total"} {
		if v := metricSum(fams, name); v <= 0 {
			t.Errorf("%s = %v while shipping", name, v)
		}
	}
	if _, ok := fams["heatscope_shipper_lag_seconds"]; !ok {
		t.Error("no heatscope_shipper_lag_seconds once blocks were shipped")
	}
	// Freshness: with 2 s blocks, every block is visible within seconds of
	// its oldest sample (the default 45 s blocks: benchmarks.md).
	if h := fams["heatscope_shipper_visible_delay_seconds"]; h == nil || h.Metric[0].Histogram.GetSampleCount() < 2 {
		t.Errorf("heatscope_shipper_visible_delay_seconds: %v, want a delay for each block shipped", h)
	} else if hist := h.Metric[0].Histogram; hist.GetSampleSum()/float64(hist.GetSampleCount()) > 15 {
		t.Errorf("blocks of 2 s became visible %.1f s after their oldest sample on average, want within 15 s",
			hist.GetSampleSum()/float64(hist.GetSampleCount()))
	}
	out := d.log()
	for _, secret := range []string{srv.SecretKey, srv.AccessKey} {
		if strings.Contains(metricsText, secret) || strings.Contains(out, secret) {
			t.Errorf("a credential appears in /metrics or the recorder's output")
		}
	}
	if !strings.Contains(out, "bucket s3://"+srv.Bucket+"/fleet: ") {
		t.Errorf("the recorder's summary does not name the bucket:\n%s", out)
	}

	remote := metasIn(t, srv, "fleet", "node-a")
	var inBucket, local int
	for _, m := range remote {
		inBucket += m.Samples
		if m.Node != "node-a" || m.NodeLabels["zone"] != "us-east-1a" || m.NodeLabels["cluster"] != "ray" {
			t.Errorf("block %s in the bucket: node %q labels %v", m.ID, m.Node, m.NodeLabels)
		}
	}
	blocks, err := store.LocalBlocks(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks {
		if m, _, err := b.ReadMeta(); err == nil {
			local += m.Samples
		}
	}
	if inBucket == 0 || inBucket != local {
		t.Fatalf("the bucket holds %d samples in %d blocks, the data directory %d", inBucket, len(remote), local)
	}
}

// metasIn reads the metas of node's blocks in the bucket under prefix.
func metasIn(t *testing.T, srv *miniotest.Server, prefix, node string) []store.Meta {
	t.Helper()
	b := srv.Open(prefix)
	l, err := bucketlayout.List(context.Background(), b, bucketlayout.ListOptions{Blocks: true, Files: true})
	if err != nil {
		t.Fatal(err)
	}
	var metas []store.Meta
	for _, blk := range l.Blocks {
		if blk.Node != node || !blk.HasMeta {
			continue
		}
		name := blk.Object(bucketlayout.MetaFile)
		rc, err := b.Get(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(rc)
		rc.Close()
		m, err := store.ParseMeta(raw)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		metas = append(metas, m)
	}
	return metas
}

// TestRecordObjstoreErrors checks what record says at start about a
// wrong credential, a missing bucket and bad flags: the bucket and the
// operation, never a credential, before any sampling starts.
func TestRecordObjstoreErrors(t *testing.T) {
	srv := miniotest.Start(t)
	dir := t.TempDir()
	bin := buildHeatscope(t, dir)
	wrongSecret := "wrong" + srv.SecretKey[5:]
	badKey := filepath.Join(dir, "bad.yaml")
	os.WriteFile(badKey, []byte("provider: s3\nbucket: b\nendpoint: 127.0.0.1:1\nsecret_key: "+srv.SecretKey+"\n"), 0o600)
	viaConfig := filepath.Join(dir, "heatscope.yaml")
	os.WriteFile(viaConfig, []byte("record:\n  objstore-config: "+srv.WriteConfigOf(srv.ConfigWith("q", srv.AccessKey, srv.SecretKey, "no-such-bucket"))+"\n"), 0o600)
	for _, c := range []struct {
		name   string
		args   []string
		status int
		want   string
	}{
		{"objstore-config in --config", []string{"--config", viaConfig}, 1, "bucket s3://no-such-bucket/q: list node-a/: The specified bucket does not exist"},
		{"wrong secret", []string{"--objstore-config", srv.WriteConfigOf(srv.ConfigWith("p", srv.AccessKey, wrongSecret, srv.Bucket))}, 1,
			"bucket s3://" + srv.Bucket + "/p: list node-a/: The request signature we calculated does not match"},
		{"missing bucket", []string{"--objstore-config", srv.WriteConfigOf(srv.ConfigWith("p", srv.AccessKey, srv.SecretKey, "no-such-bucket"))}, 1,
			"bucket s3://no-such-bucket/p: list node-a/: The specified bucket does not exist"},
		{"secret in the config", []string{"--objstore-config", badKey}, 2, "secret_key: credentials are not written in the objstore config"},
		{"no config file", []string{"--objstore-config", filepath.Join(dir, "none.yaml")}, 2, "none.yaml: no such file"},
		{"no data directory", []string{"--objstore-config", srv.WriteConfig("p"), "--data", "", "--output", filepath.Join(dir, "x.pb.gz")}, 2, "give --data too"},
		{"bad node", []string{"--node", "a/b"}, 2, `--node "a/b": a node name is`},
		{"empty node", []string{"--node", ""}, 2, `--node '': a node name is 1 to 253`},
		{"bad node label", []string{"--node-label", "zone"}, 2, `--node-label "zone": want key=value`},
	} {
		args := append([]string{"record", "--data", filepath.Join(dir, "data"), "--node", "node-a", "--duration", "1s", "--listen", ""}, c.args...)
		_, stderr, err := runHeatscope(bin, args...)
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != c.status || !strings.Contains(stderr, c.want) {
			t.Errorf("%s: %v, stderr %q; want exit status %d saying %q", c.name, err, stderr, c.status, c.want)
		}
		for _, secret := range []string{srv.SecretKey, wrongSecret} {
			if strings.Contains(stderr, secret) {
				t.Errorf("%s: a credential appears in the output: %s", c.name, stderr)
			}
		}
	}
}

// TestOneRecorderPerNodeName starts a recorder as node-a against MinIO,
// then a second one with its own data directory under the same name: the
// second is refused before it samples, naming the first (its instance,
// host, data directory) and --node; once the first stops cleanly the name
// is free at once.
func TestOneRecorderPerNodeName(t *testing.T) {
	bpftest.Require(t)
	srv := miniotest.Start(t)
	dir := t.TempDir()
	bin := buildHeatscope(t, dir)
	cfg := srv.WriteConfig("fleet")
	first := filepath.Join(dir, "a1")
	addr := "127.0.0.1:" + freePort(t)
	d := startDaemon(t, bin, "record", "--data", first, "--objstore-config", cfg, "--node", "node-a", "--listen", addr, "--progress", "0", "--max-cpu", "0")
	waitServing(t, d, "http://"+addr+"/healthz")
	idRaw, err := os.ReadFile(filepath.Join(first, "identity.json"))
	if err != nil {
		t.Fatal(err)
	}
	var id store.Identity
	if err := json.Unmarshal(idRaw, &id); err != nil || !store.ValidInstance(id.Instance) {
		t.Fatalf("the first recorder's identity.json: %s, %v", idRaw, err)
	}

	second := filepath.Join(dir, "a2")
	_, stderr, err := runHeatscope(bin, "record", "--data", second, "--objstore-config", cfg, "--node", "node-a", "--duration", "5s", "--listen", "")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("a second recorder as node-a: %v, want exit status 1\n%s", err, stderr)
	}
	abs, _ := filepath.Abs(first)
	for _, want := range []string{"node node-a is being recorded by another heatscope", "instance " + id.Instance, "data directory " + abs, "--node NAME"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, stderr)
		}
	}
	if blocks, _ := store.LocalBlocks(second); len(blocks) > 0 {
		t.Errorf("the refused recorder wrote blocks: %v", blocks)
	}

	d.stop(t)
	_, stderr, err = runHeatscope(bin, "record", "--data", second, "--objstore-config", cfg, "--node", "node-a", "--duration", "3s", "--listen", "", "--progress", "0")
	if err != nil {
		t.Fatalf("a second recorder after the first stopped: %v\n%s", err, stderr)
	}
	raw, _, err := srv.Open("fleet").ReadVersioned(context.Background(), bucketlayout.LeaseKey("node-a"))
	if err != nil || !strings.Contains(string(raw), `"released":true`) {
		t.Fatalf("node-a's lease after the second recorder stopped: %s, %v; want released", raw, err)
	}
}

// TestRecordStartsWhileTheBucketIsDown: a node that boots while its
// bucket does not answer records anyway (it used to stop at start and
// record nothing), says so, and takes its lease and ships what waited
// once the bucket answers.
func TestRecordStartsWhileTheBucketIsDown(t *testing.T) {
	bpftest.Require(t)
	srv := miniotest.Start(t)
	dir := t.TempDir()
	bin := buildHeatscope(t, dir)
	cfg := srv.WriteConfig("fleet")
	srv.Stop()
	addr := "127.0.0.1:" + freePort(t)
	d := startDaemon(t, bin, "record", "--data", filepath.Join(dir, "data"), "--objstore-config", cfg, "--node", "node-a",
		"--duration", "90s", "--listen", addr, "--progress", "0", "--block-duration", "2s")
	waitServing(t, d, "http://"+addr+"/healthz")
	if !strings.Contains(d.log(), "the bucket does not answer: recording into the data directory") {
		t.Fatalf("recording while the bucket does not answer, without saying so:\n%s", d.log())
	}
	srv.Restart()
	deadline := time.Now().Add(60 * time.Second)
	for len(metasIn(t, srv, "fleet", "node-a")) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no two blocks in the bucket 60 s after it answered again\n%s", d.log())
		}
		time.Sleep(500 * time.Millisecond)
	}
	d.stop(t)
	if !strings.Contains(d.log(), "took the node's lease, shipping what waited") {
		t.Errorf("the late lease is not logged:\n%s", d.log())
	}
	if got := srv.Objects("fleet/node-a/lease.json"); len(got) != 1 {
		t.Errorf("lease objects %q, want node-a's", got)
	}
}
