package shipper_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/heatscope/heatscope/bucket"
	"github.com/heatscope/heatscope/bucketlayout"
	"github.com/heatscope/heatscope/events"
	"github.com/heatscope/heatscope/internal/miniotest"
	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/shipper"
	"github.com/heatscope/heatscope/store"
)

// record appends seconds of synthetic samples (from start) and one event
// to an open DB and returns how many samples it appended.
func record(t *testing.T, db *store.DB, start int64, seconds float64) int {
	t.Helper()
	g := synth.New(synth.Config{CPUs: 2, Hz: 99, Start: start, Seconds: seconds, Stacks: 50, Seed: uint64(start)})
	var s sample.Sample
	n := 0
	for g.Next(&s) {
		s.Time = s.Time / 1000 * 1000
		if err := db.Append(&s); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if err := db.AppendEvent(events.Event{Time: start, Source: "api", Severity: events.Warning, Text: "deploy"}); err != nil {
		t.Fatal(err)
	}
	return n
}

// openDB opens a data directory for node-a with 10 s blocks, wired to sh
// once it exists (*sh is read at each call).
func openDB(t *testing.T, dir string, sh **shipper.Shipper, opts store.Options) *store.DB {
	t.Helper()
	opts.Source, opts.Node, opts.BlockDuration = "node-a", "node-a", 10*time.Second
	opts.Unshipped = func(m *store.Meta) bool { return *sh != nil && (*sh).Unshipped(m) }
	opts.OnBlock = func(store.Meta) {
		if *sh != nil {
			(*sh).Notify()
		}
	}
	db, err := store.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// testInstance is the instance id the tests' shippers name their event
// segment objects with.
const testInstance = "0123456789abcdef"

func newShipper(t *testing.T, b *bucket.Bucket, dir string, opts shipper.Options) *shipper.Shipper {
	t.Helper()
	opts.Bucket, opts.BucketName, opts.Dir, opts.Node = b, b.Name(), dir, "node-a"
	opts.Instance = cmp.Or(opts.Instance, testInstance)
	sh, err := shipper.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return sh
}

// bucketBlocks reads every visible block's meta (one with meta.json)
// under node-a, and the block ids with data but no meta.
func bucketBlocks(t *testing.T, srv *miniotest.Server, prefix string) (metas []store.Meta, partial []string) {
	t.Helper()
	p := prefix
	if p != "" {
		p += "/"
	}
	objs := srv.Objects(p + "node-a/blocks/")
	b := srv.Open(prefix)
	for _, o := range objs {
		rel := strings.TrimPrefix(o, p)
		id := path2id(rel)
		switch {
		case strings.HasSuffix(rel, "/meta.json"):
			rc, err := b.Get(context.Background(), rel)
			if err != nil {
				t.Fatal(err)
			}
			var m store.Meta
			err = json.NewDecoder(rc).Decode(&m)
			rc.Close()
			if err != nil {
				t.Fatalf("%s: %v", o, err)
			}
			metas = append(metas, m)
		case strings.HasSuffix(rel, "/data") && !slices.Contains(objs, p+"node-a/blocks/"+id+"/meta.json"):
			partial = append(partial, id)
		}
	}
	return metas, partial
}

func path2id(rel string) string {
	parts := strings.Split(rel, "/")
	if len(parts) < 4 {
		return ""
	}
	return parts[2]
}

func sumSamples(metas []store.Meta) int {
	n := 0
	for _, m := range metas {
		n += m.Samples
	}
	return n
}

// TestShipsBlocksAndEvents ships a data directory into MinIO: every block
// (data, then meta), the events; a second pass and a restarted shipper
// upload nothing again.
func TestShipsBlocksAndEvents(t *testing.T) {
	srv := miniotest.Start(t)
	b := srv.Open("fleet")
	dir := t.TempDir()
	var sh *shipper.Shipper
	db := openDB(t, dir, &sh, store.Options{})
	sh = newShipper(t, b, dir, shipper.Options{})
	start := time.Now().Add(-time.Hour).UnixNano()
	n := record(t, db, start, 45)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := sh.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	metas, partial := bucketBlocks(t, srv, "fleet")
	if len(metas) < 4 || len(partial) > 0 {
		t.Fatalf("bucket holds %d whole blocks and partial %v; want at least 4 whole ones", len(metas), partial)
	}
	if got := sumSamples(metas); got != n {
		t.Fatalf("bucket holds %d samples, recorded %d", got, n)
	}
	for _, m := range metas {
		if m.Node != "node-a" || m.Level != 1 {
			t.Errorf("block %s: node %q level %d", m.ID, m.Node, m.Level)
		}
	}
	evs := srv.Objects("fleet/node-a/events/")
	if len(evs) != 1 {
		t.Fatalf("event objects: %q, want one segment", evs)
	}
	obj, err := bucketlayout.ParseEventSegment(strings.TrimPrefix(evs[0], "fleet/"))
	if err != nil || obj.Instance != testInstance {
		t.Fatalf("event object %q: %+v, %v; want one named by instance %s", evs[0], obj, err, testInstance)
	}
	local, _ := os.ReadFile(filepath.Join(dir, "events", store.EventSegmentName(obj.Seq)))
	rc, err := b.Get(ctx, strings.TrimPrefix(evs[0], "fleet/"))
	if err != nil {
		t.Fatal(err)
	}
	remote, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(local, remote) || len(local) == 0 {
		t.Fatalf("event segment: %d bytes local, %d in the bucket", len(local), len(remote))
	}
	st := sh.Stats()
	if st.Uploads != uint64(2*len(metas)+1) || st.Pending != 0 || st.BlocksShipped != uint64(len(metas)) {
		t.Fatalf("stats %+v after shipping %d blocks and one event segment", st, len(metas))
	}
	if err := sh.Sync(ctx); err != nil || sh.Stats().Uploads != st.Uploads {
		t.Fatalf("a second pass uploaded %d objects more (err %v)", sh.Stats().Uploads-st.Uploads, err)
	}
	again := newShipper(t, b, dir, shipper.Options{})
	if err := again.Sync(ctx); err != nil || again.Stats().Uploads != 0 {
		t.Fatalf("a restarted shipper uploaded %d objects (err %v)", again.Stats().Uploads, err)
	}
	// Shipped blocks merge locally as before; the merged block stays local.
	db = openDB(t, dir, &again, store.Options{})
	db.Maintain()
	if db.Stats().Compactions == 0 {
		t.Error("shipped blocks were not compacted locally")
	}
	db.Close()
	if err := again.Sync(ctx); err != nil || again.Stats().Uploads != 0 {
		t.Fatalf("after local compaction the shipper uploaded %d objects (err %v)", again.Stats().Uploads, err)
	}
}

// TestOutage stops MinIO for a minute while the store goes on cutting
// blocks, with the backoff capped at 2 s so that many retries fail.
// Nothing is lost, compaction and age retention keep the unshipped blocks,
// and uploads resume once MinIO is back, the log saying after how long
// and how many blocks waited.
func TestOutage(t *testing.T) {
	srv := miniotest.Start(t)
	b := srv.Open("")
	dir := t.TempDir()
	var sh *shipper.Shipper
	db := openDB(t, dir, &sh, store.Options{Retention: time.Hour})
	// The shipper's log, in a file: read while it is written.
	logFile, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	sh = newShipper(t, b, dir, shipper.Options{MinBackoff: 200 * time.Millisecond, MaxBackoff: 2 * time.Second, EventsEvery: time.Second,
		Logger: slog.New(slog.NewTextHandler(logFile, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { sh.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	// Old data, so that age retention would delete it at once.
	start := time.Now().Add(-3 * time.Hour).UnixNano()
	n := record(t, db, start, 15)
	waitFor(t, "first blocks shipped", func() bool { return sh.Stats().BlocksShipped > 0 })
	srv.Stop()
	outage := time.Now()
	// On a busy machine more than one block may ship before the stop: the
	// shipped ones may then be merged locally, the unshipped ones never.
	shippedAtStop := sh.Stats().BlocksShipped
	n += record(t, db, start+int64(15*time.Second), 60)
	for time.Since(outage) < time.Minute {
		db.Maintain() // compaction and age retention must leave unshipped blocks
		time.Sleep(time.Second)
	}
	st := sh.Stats()
	if st.Failures < 3 || st.Pending == 0 {
		t.Fatalf("during the outage: %+v, want failures and pending blocks", st)
	}
	if ds := db.Stats(); ds.UnshippedDropped != 0 || ds.Compactions != 0 && shippedAtStop < 2 {
		t.Fatalf("during the outage retention dropped %d unshipped blocks and compaction merged %d times (%d blocks shipped before the outage)", ds.UnshippedDropped, ds.Compactions, shippedAtStop)
	}
	srv.Restart()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	sh.Notify()
	waitFor(t, "uploads resumed", func() bool { return sh.Stats().Pending == 0 && sh.Sync(context.Background()) == nil })
	resumed := regexp.MustCompile(`msg="shipper: uploads resumed" "failing for"=(\S+) "most blocks waiting"=(\d+) "blocks shipped since"=(\d+)`)
	var m []string
	waitFor(t, "the log to say the uploads resumed", func() bool {
		log, _ := os.ReadFile(logFile.Name())
		m = resumed.FindStringSubmatch(string(log))
		return m != nil
	})
	if failing, err := time.ParseDuration(m[1]); err != nil || failing < 30*time.Second || m[2] == "0" || m[3] == "0" {
		t.Errorf("the uploads resumed after a minute's outage, blocks waiting: %s", m[0])
	}
	metas, partial := bucketBlocks(t, srv, "")
	if got := sumSamples(metas); got != n || len(partial) > 0 {
		t.Fatalf("bucket holds %d samples (partial blocks %v), recorded %d", got, partial, n)
	}
	// Shipped, the old blocks go by age.
	db = openDB(t, dir, &sh, store.Options{Retention: time.Hour})
	db.Maintain()
	if st := db.Stats(); st.Blocks != 0 || st.UnshippedDropped != 0 {
		t.Errorf("after shipping, age retention left %d blocks (%d dropped unshipped)", st.Blocks, st.UnshippedDropped)
	}
	db.Close()
}

// TestSizeLimitLosesUnshipped checks the one case where an unshipped
// block goes: the local size limit. It is counted and logged.
func TestSizeLimitLosesUnshipped(t *testing.T) {
	srv := miniotest.Start(t)
	b := srv.Open("")
	srv.Stop()
	dir := t.TempDir()
	var logs bytes.Buffer
	var sh *shipper.Shipper
	db := openDB(t, dir, &sh, store.Options{RetentionSize: 1, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	sh = newShipper(t, b, dir, shipper.Options{})
	record(t, db, time.Now().Add(-time.Hour).UnixNano(), 30)
	db.Close()
	db = openDB(t, dir, &sh, store.Options{RetentionSize: 1, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	db.Maintain()
	st := db.Stats()
	db.Close()
	if st.UnshippedDropped == 0 || st.UnshippedDropped != st.RetentionDrop {
		t.Fatalf("size limit: %d dropped, %d of them unshipped", st.RetentionDrop, st.UnshippedDropped)
	}
	if !strings.Contains(logs.String(), "block lost before it was shipped to the bucket") {
		t.Errorf("no log line for the lost blocks:\n%s", logs.String())
	}
}

// TestKilledMidUpload SIGKILLs a shipping process between a block's data
// and its meta: the bucket shows no partial block (data without meta is
// invisible to readers), and a restarted shipper uploads it whole.
func TestKilledMidUpload(t *testing.T) {
	srv := miniotest.Start(t)
	dir := t.TempDir()
	var sh *shipper.Shipper
	db := openDB(t, dir, &sh, store.Options{})
	n := record(t, db, time.Now().Add(-time.Hour).UnixNano(), 25)
	db.Close()

	cfgPath := srv.WriteConfig("p")
	marker := filepath.Join(t.TempDir(), "before-meta")
	cmd := exec.Command(os.Args[0], "-test.run=^TestShipperChild$")
	cmd.Env = append(os.Environ(), "SHIPPER_CHILD_CONFIG="+cfgPath, "SHIPPER_CHILD_DIR="+dir, "SHIPPER_CHILD_MARKER="+marker)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the child to upload a block's data", func() bool { _, err := os.Stat(marker); return err == nil })
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	metas, partial := bucketBlocks(t, srv, "p")
	if len(metas) != 0 || len(partial) != 1 {
		t.Fatalf("after the kill: %d whole blocks, partial %v; want none whole and one data object", len(metas), partial)
	}

	b := srv.Open("p")
	sh = newShipper(t, b, dir, shipper.Options{})
	if err := sh.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	metas, partial = bucketBlocks(t, srv, "p")
	if sumSamples(metas) != n || len(partial) != 0 {
		t.Fatalf("after the restart: %d samples in %d blocks (partial %v), recorded %d", sumSamples(metas), len(metas), partial, n)
	}
}

// TestShipperChild is the process TestKilledMidUpload kills: it ships,
// and hangs after the first block's data.
func TestShipperChild(t *testing.T) {
	cfgPath := os.Getenv("SHIPPER_CHILD_CONFIG")
	if cfgPath == "" {
		t.Skip("run by TestKilledMidUpload as the process it kills")
	}
	cfg, err := bucket.LoadConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	b, err := bucket.Open(context.Background(), cfg, bucket.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir, marker := os.Getenv("SHIPPER_CHILD_DIR"), os.Getenv("SHIPPER_CHILD_MARKER")
	sh := newShipper(t, b, dir, shipper.Options{BeforeMeta: func(string) {
		os.WriteFile(marker, nil, 0o644)
		select {} // until SIGKILL
	}})
	sh.Sync(context.Background())
	t.Fatal("the child shipped without hanging before a meta")
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 60 s waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRevokedCredentials runs the shipper with a wrong secret (as after a
// key rotation mid-run): uploads fail and are retried, and the secret
// appears in none of the errors, the log lines and the metrics.
func TestRevokedCredentials(t *testing.T) {
	srv := miniotest.Start(t)
	wrong := "revoked" + srv.SecretKey[7:]
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b, err := bucket.Open(context.Background(), srv.ConfigWith("", srv.AccessKey, wrong, srv.Bucket), bucket.Options{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	dir := t.TempDir()
	var sh *shipper.Shipper
	db := openDB(t, dir, &sh, store.Options{})
	record(t, db, time.Now().Add(-time.Hour).UnixNano(), 15)
	db.Close()
	sh, err = shipper.New(shipper.Options{Bucket: b, BucketName: b.Name(), Dir: dir, Node: "node-a", Instance: testInstance, Logger: logger,
		MinBackoff: 100 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	syncErr := sh.Sync(context.Background())
	if syncErr == nil || !strings.Contains(syncErr.Error(), "bucket s3://"+srv.Bucket+": upload node-a/blocks/") {
		t.Fatalf("Sync with a revoked key: %v", syncErr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	sh.Run(ctx)
	cancel()
	reg := prometheus.NewRegistry()
	reg.MustRegister(sh.Collector(nil))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var metrics bytes.Buffer
	for _, f := range fams {
		expfmt.MetricFamilyToText(&metrics, f)
	}
	if sh.Stats().Failures < 3 || !strings.Contains(metrics.String(), "heatscope_shipper_upload_failures_total") {
		t.Fatalf("failures %d; metrics:\n%s", sh.Stats().Failures, metrics.String())
	}
	if !strings.Contains(logs.String(), "upload failed") {
		t.Fatalf("no log line for the failed uploads:\n%s", logs.String())
	}
	for what, text := range map[string]string{"error": syncErr.Error(), "logs": logs.String(), "metrics": metrics.String()} {
		if strings.Contains(text, wrong) || strings.Contains(text, srv.SecretKey) {
			t.Errorf("a secret appears in the %s", what)
		}
	}
}

// TestEventSegmentObjects: a data directory's event segments go to objects
// named by its instance, so a second data directory under the node name
// (a reinstalled machine) replaces none of the first's; a segment a state
// file from before instance names lists as shipped grows in its old
// object, never copied to a second one.
func TestEventSegmentObjects(t *testing.T) {
	srv := miniotest.Start(t)
	b := srv.Open("")
	ctx := context.Background()
	ship := func(dir, instance string, texts ...string) {
		t.Helper()
		var sh *shipper.Shipper
		db := openDB(t, dir, &sh, store.Options{})
		for _, text := range texts {
			if err := db.AppendEvent(events.Event{Time: time.Now().UnixNano(), Source: "api", Severity: events.Warning, Text: text}); err != nil {
				t.Fatal(err)
			}
		}
		db.Close()
		sh = newShipper(t, b, dir, shipper.Options{Instance: instance})
		if err := sh.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	old, reinstalled := t.TempDir(), t.TempDir()
	ship(old, "00000000000000aa", "first machine")
	ship(reinstalled, "00000000000000bb", "reinstalled")
	objs := srv.Objects("node-a/events/")
	want := []string{"node-a/events/00000000000000aa-0000000000000001", "node-a/events/00000000000000bb-0000000000000001"}
	if !slices.Equal(objs, want) {
		t.Fatalf("event objects %q, want %q", objs, want)
	}

	// A state file written before objects were named by instance, when
	// the first of the segment's two events was shipped.
	legacy := t.TempDir()
	ship(legacy, "00000000000000cc", "shipped before the upgrade", "after it")
	legacyKey := "node-a/events/0000000000000001"
	seg, err := os.ReadFile(filepath.Join(legacy, "events", store.EventSegmentName(1)))
	if err != nil {
		t.Fatal(err)
	}
	firstPage := 8 + int(binary.LittleEndian.Uint32(seg))
	if err := b.Upload(ctx, legacyKey, bytes.NewReader(seg[:firstPage])); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, "node-a/events/00000000000000cc-0000000000000001"); err != nil {
		t.Fatal(err)
	}
	stateFile := filepath.Join(legacy, shipper.StateFile)
	st, err := os.ReadFile(stateFile)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(st, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "eventObjects")
	m["events"] = map[string]int{store.EventSegmentName(1): firstPage}
	st, _ = json.Marshal(m)
	if err := os.WriteFile(stateFile, st, 0o644); err != nil {
		t.Fatal(err)
	}
	ship(legacy, "00000000000000cc")
	rc, err := b.Get(ctx, legacyKey)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := store.ReadEventSegment(rc, legacyKey)
	rc.Close()
	if err != nil || len(evs) != 2 || evs[1].Text != "after it" {
		t.Fatalf("the old object holds %d events (%v), want both", len(evs), err)
	}
	if objs := srv.Objects("node-a/events/00000000000000cc"); len(objs) != 0 {
		t.Fatalf("the grown segment was copied to %q too", objs)
	}
}

// TestUnreadableBlocks: blocks whose meta.json the store cannot read (a
// format version newer than this build reads, bytes that are not JSON, a
// meta naming another block) are not shipped, and do not hold back the
// blocks after them: each is named in a warning, once, and counted in
// heatscope_shipper_unreadable_blocks. One made readable again ships at
// the next pass.
func TestUnreadableBlocks(t *testing.T) {
	srv := miniotest.Start(t)
	b := srv.Open("")
	dir := t.TempDir()
	var sh *shipper.Shipper
	db := openDB(t, dir, &sh, store.Options{})
	record(t, db, time.Now().Add(-time.Hour).UnixNano(), 45)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	blocks, err := store.LocalBlocks(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) < 4 {
		t.Fatalf("%d blocks recorded, want at least 4", len(blocks))
	}
	slices.SortFunc(blocks, func(a, b store.LocalBlock) int { return strings.Compare(a.ID, b.ID) })
	rewrite := func(blk store.LocalBlock, edit func(map[string]any)) {
		t.Helper()
		raw, err := os.ReadFile(blk.MetaPath())
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		edit(m)
		if raw, err = json.Marshal(m); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(blk.MetaPath(), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The three oldest, shipped first: the blocks after them must ship.
	newer, corrupt, misnamed := blocks[0], blocks[1], blocks[2]
	rewrite(newer, func(m map[string]any) { m["version"] = store.FormatVersion + 1 })
	rewrite(misnamed, func(m map[string]any) { m["id"] = "1700000000000-0badc0de" })
	corruptMeta, err := os.ReadFile(corrupt.MetaPath())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(corrupt.MetaPath(), corruptMeta[:len(corruptMeta)/2], 0o644); err != nil {
		t.Fatal(err)
	}

	var logs bytes.Buffer
	sh = newShipper(t, b, dir, shipper.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx := context.Background()
	shipped := func() []string {
		t.Helper()
		metas, partial := bucketBlocks(t, srv, "")
		if len(partial) > 0 {
			t.Fatalf("blocks with data and no meta in the bucket: %v", partial)
		}
		ids := make([]string, len(metas))
		for i, m := range metas {
			ids[i] = m.ID
		}
		slices.Sort(ids)
		return ids
	}
	want := func(bs []store.LocalBlock) []string {
		ids := make([]string, len(bs))
		for i, b := range bs {
			ids[i] = b.ID
		}
		return ids
	}
	if err := sh.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := shipped(); !slices.Equal(got, want(blocks[3:])) {
		t.Fatalf("shipped %q, want the readable blocks %q", got, want(blocks[3:]))
	}
	if got := unreadableGauge(t, sh); got != 3 {
		t.Errorf("heatscope_shipper_unreadable_blocks = %v, want 3", got)
	}
	if st := sh.Stats(); st.Pending != 0 {
		t.Errorf("stats %+v, want 0 pending: the unreadable blocks are not waiting", st)
	}
	for _, blk := range []store.LocalBlock{newer, corrupt, misnamed} {
		if n := strings.Count(logs.String(), "block="+blk.ID); n != 1 {
			t.Errorf("block %s named in %d log lines, want 1:\n%s", blk.ID, n, logs.String())
		}
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "format version") {
		t.Errorf("no warning naming the format version:\n%s", logs.String())
	}

	// A second pass says nothing again; the corrupt meta restored, that
	// block ships.
	logged, uploads := logs.Len(), sh.Stats().Uploads
	if err := sh.Sync(ctx); err != nil || sh.Stats().Uploads != uploads || logs.Len() != logged {
		t.Fatalf("a second pass: %v, %d uploads, log grew by %q", err, sh.Stats().Uploads-uploads, logs.String()[logged:])
	}
	if err := os.WriteFile(corrupt.MetaPath(), corruptMeta, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := sh.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := shipped(), want(append([]store.LocalBlock{corrupt}, blocks[3:]...)); !slices.Equal(got, want) {
		t.Fatalf("after the meta was restored: shipped %q, want %q", got, want)
	}
	if got := unreadableGauge(t, sh); got != 2 {
		t.Errorf("heatscope_shipper_unreadable_blocks = %v after one was restored, want 2", got)
	}
}

// unreadableGauge is heatscope_shipper_unreadable_blocks as /metrics
// shows it (-1: absent).
func unreadableGauge(t *testing.T, sh *shipper.Shipper) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(sh.Collector(nil))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "heatscope_shipper_unreadable_blocks" {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}
