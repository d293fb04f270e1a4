package bucketlayout_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/heatscope/heatscope/bucketlayout"
	"github.com/heatscope/heatscope/internal/miniotest"
)

// TestListAndReadRanges lists a real bucket both ways (names only, and
// with files and times) and reads ranges of an object.
func TestListAndReadRanges(t *testing.T) {
	m := miniotest.Start(t)
	bkt := m.Open("fleet")
	ctx := context.Background()
	complete := bucketlayout.Block{Node: "node-a", ID: "1795237380000-0badf00d"}
	uploading := bucketlayout.Block{Node: "node-b", ID: "1795237500000-00c0ffee"}
	marked := bucketlayout.Block{Node: "node-b", ID: "1795237260000-0000beef"}
	seg := bucketlayout.EventSegment{Node: "node-a", Instance: inst, Seq: 3}.Key()
	for _, name := range []string{
		complete.Object(bucketlayout.DataFile), complete.Object(bucketlayout.MetaFile),
		uploading.Object(bucketlayout.DataFile),
		marked.Object(bucketlayout.DataFile), marked.Object(bucketlayout.MetaFile), marked.Object(bucketlayout.DeletionMarkFile),
		seg, "node-b/events/0000000000000001", "node-b/events/not-a-segment", "node-b/events/sub/x",
		bucketlayout.LeaseKey("node-a"), bucketlayout.IndexKey, "bad name/blocks/x/data",
	} {
		if err := bkt.Upload(ctx, name, strings.NewReader("0123456789")); err != nil {
			t.Fatal(err)
		}
	}
	blockKeys := func(l bucketlayout.Listing) []string {
		var keys []string
		for _, b := range l.Blocks {
			keys = append(keys, b.Key())
		}
		slices.Sort(keys)
		return keys
	}
	segNames := func(l bucketlayout.Listing) []string {
		var names []string
		for _, s := range l.Segments {
			names = append(names, s.Node+" "+s.Name)
		}
		slices.Sort(names)
		return names
	}
	wantBlocks := []string{complete.Key(), marked.Key(), uploading.Key()}
	wantSegs := []string{"node-a " + seg, "node-b node-b/events/0000000000000001", "node-b node-b/events/not-a-segment"}

	lists := 0
	names, err := bucketlayout.List(ctx, bkt, bucketlayout.ListOptions{Blocks: true, Segments: true, OnList: func() { lists++ }})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names.Nodes, []string{"node-a", "node-b"}) || !slices.Equal(blockKeys(names), wantBlocks) || !slices.Equal(segNames(names), wantSegs) {
		t.Errorf("listing by names: nodes %q, blocks %q, segments %q; want blocks %q, segments %q", names.Nodes, blockKeys(names), segNames(names), wantBlocks, wantSegs)
	}
	if lists != 5 {
		t.Errorf("%d LISTs by names, want 5 (the nodes, then each node's blocks/ and events/)", lists)
	}
	onlyBlocks, err := bucketlayout.List(ctx, bkt, bucketlayout.ListOptions{Blocks: true})
	if err != nil || len(onlyBlocks.Segments) != 0 || !slices.Equal(blockKeys(onlyBlocks), wantBlocks) {
		t.Errorf("blocks only: %+v, %v", onlyBlocks, err)
	}

	lists = 0
	files, err := bucketlayout.List(ctx, bkt, bucketlayout.ListOptions{Blocks: true, Segments: true, Files: true, OnList: func() { lists++ }})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(blockKeys(files), wantBlocks) || !slices.Equal(segNames(files), wantSegs) || lists != 3 {
		t.Errorf("listing with files: blocks %q, segments %q after %d LISTs", blockKeys(files), segNames(files), lists)
	}
	for _, b := range files.Blocks {
		want := [3]bool{true, b.Block != uploading, b.Block == marked}
		if got := [3]bool{b.HasData, b.HasMeta, b.HasMark}; got != want || b.Newest.IsZero() {
			t.Errorf("block %s: data, meta, mark %v, want %v; newest %v", b.Key(), got, want, b.Newest)
		}
	}
	for _, s := range files.Segments {
		if s.Modified.IsZero() {
			t.Errorf("segment %s: no modification time", s.Name)
		}
	}

	gets, got := 0, 0
	r := &bucketlayout.RangeReader{Bucket: bkt, Name: complete.Object(bucketlayout.DataFile), OnGet: func(n int) { gets++; got += n }}
	p := make([]byte, 4)
	if n, err := r.ReadAt(p, 3); err != nil || n != 4 || string(p) != "3456" {
		t.Errorf("read 4 at 3: %d %q, %v", n, p, err)
	}
	n, err := r.ReadAt(p, 8)
	if !errors.Is(err, bucketlayout.ErrShortObject) || !errors.Is(err, io.ErrUnexpectedEOF) || n != 2 || !strings.Contains(err.Error(), r.Name) {
		t.Errorf("read past the end: %d, %v; want 2 bytes and an error naming the object, wrapping ErrShortObject", n, err)
	}
	if gets != 2 || got != 6 {
		t.Errorf("OnGet saw %d GETs of %d bytes, want 2 of 6", gets, got)
	}
	missing := &bucketlayout.RangeReader{Bucket: bkt, Name: "node-a/blocks/nope/data"}
	if _, err := missing.ReadAt(p, 0); err == nil || !bkt.IsObjNotFoundErr(err) {
		t.Errorf("a missing object: %v, want the bucket's not-found error", err)
	}
}
