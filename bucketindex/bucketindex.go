// Package bucketindex reads and writes a bucket's index: one object
// (bucketlayout.IndexKey) under the bucket's prefix, that lists every
// node's complete blocks (their metas), the blocks found corrupt, every
// deletion mark and every event segment. The
// compactor (package bucketcompact) writes it after each pass; a query
// service may read it instead of listing every node's prefix, and lists
// when it is missing, unreadable or older than it accepts (Stale).
// store/FORMAT.md ("Bucket index") documents the format.
package bucketindex

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/thanos-io/objstore"

	"github.com/heatscope/heatscope/bucketlayout"
	"github.com/heatscope/heatscope/store"
)

// Version is the index format this package writes and reads. Version 2
// added Corrupt: a reader of a version 1 index would drop the corrupt
// blocks it leaves out without a word, so it lists the bucket instead.
const Version = 2

// maxBytes bounds an index read (compressed and uncompressed): about
// 3 million blocks.
const maxBytes = 1 << 30

// Index is the content of bucket-index.json.gz.
type Index struct {
	Version int `json:"version"`
	// UpdatedAt is when the compactor wrote it (Unix ms).
	UpdatedAt int64 `json:"updatedAt"`
	// ListedAt is when the listing that found these blocks and segments
	// began (Unix ms; 0 in indexes written before it existed): every block
	// complete and every segment uploaded by then is in the index.
	ListedAt int64 `json:"listedAt,omitempty"`
	// Blocks lists every complete block (meta.json uploaded), with its
	// node set, by node then block id. Blocks with a deletion mark are
	// listed too, until they are deleted.
	Blocks []store.Meta `json:"blocks"`
	// Corrupt lists the blocks with a meta.json that the compactor found
	// unreadable, by node then block id: not in Blocks, never merged or
	// marked, and named by readers as they name them when they list the
	// bucket.
	Corrupt []CorruptBlock `json:"corrupt"`
	// DeletionMarks lists the blocks marked for deletion.
	DeletionMarks []DeletionMark `json:"deletionMarks"`
	// Segments lists every node's event segments (every object directly
	// under bucketlayout.EventsPrefix: bucketlayout.ParseEventSegment says
	// which are segments; readers leave other names alone),
	// by node then name.
	Segments []Segment `json:"segments"`
}

// CorruptBlock is a block the compactor could not read.
type CorruptBlock struct {
	Node string `json:"node"`
	ID   string `json:"id"`
	// Reason is what was wrong, as the compactor found it.
	Reason string `json:"reason"`
	// Meta is the block's meta.json when that could be read (its data
	// could not), with its node set; nil when the meta is what is damaged.
	Meta *store.Meta `json:"meta,omitempty"`
}

// Segment is one event segment object as the compactor listed it: a
// reader reads it again only when its time changed (a recorder uploads
// its newest segment again as it grows).
type Segment struct {
	Node string `json:"node"`
	// Name is the object's name relative to the bucket's prefix.
	Name string `json:"name"`
	// Modified is the object's last modification (Unix ms; 0 when the
	// provider does not say: a reader then reads the node's newest
	// segment at every refresh).
	Modified int64 `json:"modified,omitempty"`
}

// DeletionMark is the content of a block's deletion mark
// (bucketlayout.DeletionMarkFile): the compactor deletes the block once
// DeletionTime is older than its delete delay.
type DeletionMark struct {
	Version int    `json:"version"`
	Node    string `json:"node"`
	ID      string `json:"id"`
	// DeletionTime is when the block was marked (Unix ms).
	DeletionTime int64 `json:"deletionTime"`
	// Reason is why: "compacted" (ReplacedBy holds its data),
	// "retention-age" or "retention-size".
	Reason     string `json:"reason"`
	ReplacedBy string `json:"replacedBy,omitempty"`
}

// ErrNotFound is returned by Read when the bucket has no index.
var ErrNotFound = errors.New("no bucket index")

// emptyNotNil makes ix's nil lists empty ones: an index is written with
// [] for each (never null) and read back so.
func (ix *Index) emptyNotNil() {
	if ix.Blocks == nil {
		ix.Blocks = []store.Meta{}
	}
	if ix.Corrupt == nil {
		ix.Corrupt = []CorruptBlock{}
	}
	if ix.DeletionMarks == nil {
		ix.DeletionMarks = []DeletionMark{}
	}
	if ix.Segments == nil {
		ix.Segments = []Segment{}
	}
}

// Encode returns the index gzipped.
func Encode(ix Index) ([]byte, error) {
	ix.Version = Version
	ix.emptyNotNil()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if err := json.NewEncoder(zw).Encode(ix); err != nil {
		return nil, fmt.Errorf("encode bucket index: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("encode bucket index: %w", err)
	}
	return buf.Bytes(), nil
}

// Decode parses a gzipped index and checks it: its version, and that
// every block names its node and id.
func Decode(r io.Reader) (Index, error) {
	zr, err := gzip.NewReader(io.LimitReader(r, maxBytes))
	if err != nil {
		return Index{}, fmt.Errorf("bucket index: %w", err)
	}
	raw, err := io.ReadAll(io.LimitReader(zr, maxBytes+1))
	if err != nil {
		return Index{}, fmt.Errorf("bucket index: %w", err)
	}
	if len(raw) > maxBytes {
		return Index{}, fmt.Errorf("bucket index: more than %d bytes uncompressed", maxBytes)
	}
	var ix Index
	if err := json.Unmarshal(raw, &ix); err != nil {
		return Index{}, fmt.Errorf("bucket index: %w", err)
	}
	if ix.Version != Version {
		return Index{}, fmt.Errorf("bucket index: version %d, this heatscope reads %d", ix.Version, Version)
	}
	for i, m := range ix.Blocks {
		if m.Node == "" || m.ID == "" {
			return Index{}, fmt.Errorf("bucket index: block %d names no node or id", i)
		}
	}
	for i, c := range ix.Corrupt {
		if c.Node == "" || c.ID == "" {
			return Index{}, fmt.Errorf("bucket index: corrupt block %d names no node or id", i)
		}
	}
	for i, d := range ix.DeletionMarks {
		if d.Node == "" || d.ID == "" {
			return Index{}, fmt.Errorf("bucket index: deletion mark %d names no node or id", i)
		}
	}
	for i, sg := range ix.Segments {
		if sg.Node == "" || !strings.HasPrefix(sg.Name, bucketlayout.EventsPrefix(sg.Node)) {
			return Index{}, fmt.Errorf("bucket index: segment %d: %q is not an event segment of node %q", i, sg.Name, sg.Node)
		}
	}
	ix.emptyNotNil()
	return ix, nil
}

// Write uploads the index (one PUT: readers see the old index or the new
// one, never a part).
func Write(ctx context.Context, bkt objstore.Bucket, ix Index) (int, error) {
	b, err := Encode(ix)
	if err != nil {
		return 0, err
	}
	if err := bkt.Upload(ctx, bucketlayout.IndexKey, bytes.NewReader(b)); err != nil {
		return 0, fmt.Errorf("write bucket index: %w", err)
	}
	return len(b), nil
}

// Read downloads and decodes the index; ErrNotFound when there is none.
func Read(ctx context.Context, bkt objstore.BucketReader) (Index, error) {
	rc, err := bkt.Get(ctx, bucketlayout.IndexKey)
	if err != nil {
		if bkt.IsObjNotFoundErr(err) {
			return Index{}, ErrNotFound
		}
		return Index{}, fmt.Errorf("read bucket index: %w", err)
	}
	defer rc.Close()
	return Decode(rc)
}

// Stale reports whether the index's listing (ListedAt, else UpdatedAt) is
// older than maxAge at now: a reader then lists the bucket instead (the
// compactor may have stopped, or be busy merging). A reader that accepts
// an index up to maxAge old and reads it every refresh interval sees a
// block at most maxAge plus that interval after its upload.
func (ix Index) Stale(now time.Time, maxAge time.Duration) bool {
	at := ix.UpdatedAt
	if ix.ListedAt > 0 {
		at = ix.ListedAt
	}
	return now.Sub(time.UnixMilli(at)) > maxAge
}
