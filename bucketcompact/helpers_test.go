package bucketcompact

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thanos-io/objstore"

	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// bucketSource reads the test bucket's complete blocks as a
// store.BlockSource, by ranged GETs, the way a query service reads them.
type bucketSource struct{ bkt objstore.Bucket }

func (s bucketSource) String() string { return "test bucket" }

func (s bucketSource) List(ctx context.Context) ([]string, error) {
	var keys []string
	var nodes []string
	if err := s.bkt.Iter(ctx, "", func(n string) error {
		if node, ok := strings.CutSuffix(n, "/"); ok {
			nodes = append(nodes, node)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	for _, node := range nodes {
		err := s.bkt.Iter(ctx, node+"/blocks/", func(n string) error {
			if id, ok := strings.CutSuffix(strings.TrimPrefix(n, node+"/blocks/"), "/"+metaFile); ok {
				keys = append(keys, node+"/"+id)
			}
			return nil
		}, objstore.WithRecursiveIter())
		if err != nil {
			return nil, err
		}
	}
	return keys, nil
}

func (s bucketSource) name(key, file string) string {
	node, id, _ := strings.Cut(key, "/")
	return objName(node, id, file)
}

func (s bucketSource) Meta(ctx context.Context, key string) (store.Meta, error) {
	rc, err := s.bkt.Get(ctx, s.name(key, metaFile))
	if err != nil {
		if s.bkt.IsObjNotFoundErr(err) {
			return store.Meta{}, fmt.Errorf("%w: %v", fs.ErrNotExist, err)
		}
		return store.Meta{}, err
	}
	defer rc.Close()
	raw, err := io.ReadAll(rc)
	if err != nil {
		return store.Meta{}, err
	}
	m, err := store.ParseMeta(raw)
	m.Node, _, _ = strings.Cut(key, "/")
	return m, err
}

func (s bucketSource) Open(ctx context.Context, key string, m store.Meta) (store.BlockData, error) {
	name := s.name(key, dataFile)
	a, err := s.bkt.Attributes(ctx, name)
	if err != nil {
		if s.bkt.IsObjNotFoundErr(err) {
			return nil, fmt.Errorf("%w: %v", fs.ErrNotExist, err)
		}
		return nil, err
	}
	return &objData{bkt: s.bkt, name: name, size: a.Size}, nil
}

type objData struct {
	bkt  objstore.Bucket
	name string
	size int64
}

func (d *objData) Size() int64  { return d.size }
func (d *objData) Close() error { return nil }
func (d *objData) ReadAt(p []byte, off int64) (int, error) {
	rc, err := d.bkt.GetRange(context.Background(), d.name, off, int64(len(p)))
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	n, err := io.ReadFull(rc, p)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = io.EOF
	}
	return n, err
}

// reader opens a read-only store over the bucket, as a query service does.
func reader(t *testing.T, bkt objstore.Bucket) *store.DB {
	t.Helper()
	db, err := store.Open("", store.Options{ReadOnly: true, Sources: []store.BlockSource{bucketSource{bkt}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// digest selects every sample (idle ones too) and returns how many there
// are and a hash of them, sorted, each with its node, time, CPU, thread
// and stack: equal digests mean identical samples.
func digest(t *testing.T, db *store.DB, hold func()) (int, string) {
	t.Helper()
	var rows []string
	first := true
	w, err := db.Select(context.Background(), store.Range{From: 0, To: 1 << 62}, &store.Filter{IncludeIdle: true}, func(b *store.Batch) error {
		if first && hold != nil {
			first = false
			hold()
		}
		for _, i := range b.Rows {
			s := b.T.Sample(int(i))
			var fr []string
			for _, f := range s.Stack {
				fr = append(fr, f.Function)
			}
			rows = append(rows, fmt.Sprintf("%s %d %d %d %d %s %s", b.Node, s.Time, s.CPU, s.PID, s.TID, s.Comm, strings.Join(fr, ";")))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("select: %v", err)
	}
	if len(w) > 0 {
		t.Fatalf("select warnings: %v", w)
	}
	slices.Sort(rows)
	h := sha256.New()
	for _, r := range rows {
		io.WriteString(h, r+"\n")
	}
	return len(rows), hex.EncodeToString(h.Sum(nil))
}

var seed atomic.Uint64

// ship writes one block per span for node (synthetic samples: 2 CPUs at
// 49 Hz) in a local data directory and uploads each as a recorder does:
// data, then meta.json. It returns the block ids.
func ship(t *testing.T, bkt objstore.Bucket, node string, spans ...[2]time.Time) []string {
	t.Helper()
	dir := t.TempDir()
	db, err := store.Open(dir, store.Options{Node: node, Source: node, CallerTicks: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, sp := range spans {
		g := synth.New(synth.Config{CPUs: 2, Hz: 49, Start: sp[0].UnixNano(), Seconds: sp[1].Sub(sp[0]).Seconds(), Seed: seed.Add(1), Processes: 8, Stacks: 200})
		if _, err := db.Import(node, int64(1e9)/49, func(fn func(*sample.Sample) error) error { return g.Feed(fn) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Join(dir, "blocks"))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range entries {
		for _, f := range []string{dataFile, metaFile} {
			raw, err := os.ReadFile(filepath.Join(dir, "blocks", e.Name(), f))
			if err != nil {
				t.Fatal(err)
			}
			if err := bkt.Upload(context.Background(), objName(node, e.Name(), f), bytes.NewReader(raw)); err != nil {
				t.Fatal(err)
			}
		}
		ids = append(ids, e.Name())
	}
	if len(ids) != len(spans) {
		t.Fatalf("node %s: %d blocks for %d spans", node, len(ids), len(spans))
	}
	return ids
}

// span is [start, start+d).
func span(start time.Time, d time.Duration) [2]time.Time { return [2]time.Time{start, start.Add(d)} }

// clock is a settable test clock.
type clock struct{ t atomic.Int64 }

func newClock(t time.Time) *clock { c := &clock{}; c.t.Store(t.UnixNano()); return c }
func (c *clock) now() time.Time   { return time.Unix(0, c.t.Load()) }
func (c *clock) add(d time.Duration) {
	c.t.Add(int64(d))
}

// faultyBucket fails uploads whose name ends in failSuffix while it is set:
// the compactor dies at that point of a pass, as a killed process would.
type faultyBucket struct {
	objstore.Bucket
	failSuffix atomic.Pointer[string]
}

func (b *faultyBucket) Upload(ctx context.Context, name string, r io.Reader, opts ...objstore.ObjectUploadOption) error {
	if s := b.failSuffix.Load(); s != nil && strings.HasSuffix(name, *s) {
		return fmt.Errorf("injected crash before uploading %s", name)
	}
	return b.Bucket.Upload(ctx, name, r, opts...)
}

// objects lists every object under the bucket's prefix.
func objects(t *testing.T, bkt objstore.Bucket) []string {
	t.Helper()
	var names []string
	if err := bkt.Iter(context.Background(), "", func(n string) error {
		names = append(names, n)
		return nil
	}, objstore.WithRecursiveIter()); err != nil {
		t.Fatal(err)
	}
	return names
}

func countSuffix(names []string, suffix string) int {
	n := 0
	for _, s := range names {
		if strings.HasSuffix(s, suffix) {
			n++
		}
	}
	return n
}
