// Package bucketindex reads and writes a bucket's index: one object,
// "bucket-index.json.gz" under the bucket's prefix, that lists every
// node's complete blocks (their metas) and every deletion mark. The
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
	"time"

	"github.com/thanos-io/objstore"

	"github.com/heatscope/heatscope/store"
)

// Name is the index's object name, relative to the bucket's prefix.
const Name = "bucket-index.json.gz"

// Version is the index format this package writes and reads.
const Version = 1

// maxBytes bounds an index read (compressed and uncompressed): about
// 3 million blocks.
const maxBytes = 1 << 30

// Index is the content of bucket-index.json.gz.
type Index struct {
	Version int `json:"version"`
	// UpdatedAt is when the compactor wrote it (Unix ms).
	UpdatedAt int64 `json:"updatedAt"`
	// Blocks lists every complete block (meta.json uploaded), with its
	// node set, by node then block id. Blocks with a deletion mark are
	// listed too, until they are deleted.
	Blocks []store.Meta `json:"blocks"`
	// DeletionMarks lists the blocks marked for deletion.
	DeletionMarks []DeletionMark `json:"deletionMarks"`
}

// DeletionMark is a block's deletion-mark.json ("<node>/blocks/<id>/
// deletion-mark.json"): the compactor deletes the block once
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

// Encode returns the index gzipped.
func Encode(ix Index) ([]byte, error) {
	ix.Version = Version
	if ix.Blocks == nil {
		ix.Blocks = []store.Meta{}
	}
	if ix.DeletionMarks == nil {
		ix.DeletionMarks = []DeletionMark{}
	}
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
	for i, d := range ix.DeletionMarks {
		if d.Node == "" || d.ID == "" {
			return Index{}, fmt.Errorf("bucket index: deletion mark %d names no node or id", i)
		}
	}
	if ix.Blocks == nil {
		ix.Blocks = []store.Meta{}
	}
	if ix.DeletionMarks == nil {
		ix.DeletionMarks = []DeletionMark{}
	}
	return ix, nil
}

// Write uploads the index (one PUT: readers see the old index or the new
// one, never a part).
func Write(ctx context.Context, bkt objstore.Bucket, ix Index) (int, error) {
	b, err := Encode(ix)
	if err != nil {
		return 0, err
	}
	if err := bkt.Upload(ctx, Name, bytes.NewReader(b)); err != nil {
		return 0, fmt.Errorf("write bucket index: %w", err)
	}
	return len(b), nil
}

// Read downloads and decodes the index; ErrNotFound when there is none.
func Read(ctx context.Context, bkt objstore.BucketReader) (Index, error) {
	rc, err := bkt.Get(ctx, Name)
	if err != nil {
		if bkt.IsObjNotFoundErr(err) {
			return Index{}, ErrNotFound
		}
		return Index{}, fmt.Errorf("read bucket index: %w", err)
	}
	defer rc.Close()
	return Decode(rc)
}

// Stale reports whether the index is older than maxAge at now: a reader
// then lists the bucket instead (the compactor may have stopped).
func (ix Index) Stale(now time.Time, maxAge time.Duration) bool {
	return now.Sub(time.UnixMilli(ix.UpdatedAt)) > maxAge
}
