package store

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/heatscope/heatscope/events"
)

// BlockSource is a place sealed blocks are read from: a local data
// directory (DirSource) or an object storage bucket (package bucketstore).
// A DB lists and opens every block through one, and reads a block's data
// only through BlockData, so queries never know which kind they read.
type BlockSource interface {
	// String names the source in logs and warnings. It never holds
	// credentials.
	String() string
	// List returns the keys of the complete blocks there now. A key is
	// unique in the source: a data directory's block id, a bucket's
	// "<node>/<block id>".
	List(ctx context.Context) ([]string, error)
	// Meta reads a block's meta.json. A block not completely written (no
	// meta yet) returns an error that wraps fs.ErrNotExist. A source that
	// knows the block's node sets Meta.Node when the meta leaves it empty.
	Meta(ctx context.Context, key string) (Meta, error)
	// Open opens a block's data. It may read nothing yet: a bucket reads
	// the ranges a query needs, when it needs them.
	Open(ctx context.Context, key string, m Meta) (BlockData, error)
}

// EventSource is a BlockSource that holds system events too: a bucket
// holds each node's event segments. Refresh reads them; DB.Events answers
// with them beside the directory's own.
type EventSource interface {
	// Events returns every event there, each labelled with its node
	// (label "node").
	Events(ctx context.Context) ([]events.Event, error)
}

// ReadEventSegment decodes the pages of an event segment (FORMAT.md) read
// from r, named name in errors. It stops at the first torn or corrupt
// page, returning the events before it and why.
func ReadEventSegment(r io.Reader, name string) ([]events.Event, error) {
	seg, err := readEvents(bufio.NewReader(r), name, &eventSegment{maxTime: -1 << 63})
	return seg.events, err
}

// BlockData is a block's data file, read in ranges: a local file, or an
// object read by ranged GETs.
type BlockData interface {
	io.ReaderAt
	// Size is the data's length in bytes.
	Size() int64
	io.Closer
}

// ErrUnavailable marks a read that failed because the storage could not be
// reached (a bucket that does not answer), not because the data is bad: a
// query fails with it (the web API answers 503) instead of skipping the
// block, and nothing about the block is remembered as broken.
var ErrUnavailable = errors.New("storage unavailable")

// DirSource returns the blocks of the data directory dir (its blocks/
// subdirectory) as a BlockSource.
func DirSource(dir string) BlockSource { return dirSource{root: filepath.Join(dir, blocksDir)} }

type dirSource struct{ root string }

func (s dirSource) String() string { return "data directory " + filepath.Dir(s.root) }

// List returns the block directories, leaving out blocks being written
// ("<id>.tmp").
func (s dirSource) List(context.Context) ([]string, error) {
	blocks, err := LocalBlocks(filepath.Dir(s.root))
	if err != nil {
		return nil, err
	}
	keys := make([]string, len(blocks))
	for i, b := range blocks {
		keys[i] = b.ID
	}
	return keys, nil
}

func (s dirSource) Meta(_ context.Context, key string) (Meta, error) {
	return ReadMeta(filepath.Join(s.root, key, BlockMetaFile))
}

func (s dirSource) Open(_ context.Context, key string, _ Meta) (BlockData, error) {
	f, err := os.Open(filepath.Join(s.root, key, BlockDataFile))
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &fileData{File: f, size: fi.Size()}, nil
}

// fileData is a local data file.
type fileData struct {
	*os.File
	size int64
}

func (f *fileData) Size() int64 { return f.size }

// ReadMeta reads and checks a block's meta.json.
func ReadMeta(path string) (Meta, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Meta{}, err
	}
	return ParseMeta(b)
}

// ParseMeta decodes and checks the bytes of a meta.json.
func ParseMeta(b []byte) (Meta, error) {
	var m Meta
	if err := json.Unmarshal(b, &m); err != nil {
		return Meta{}, fmt.Errorf("%w: %s: %w", errCorrupt, BlockMetaFile, err)
	}
	if m.Version < 1 || m.Version > FormatVersion {
		return Meta{}, fmt.Errorf("%s: format version %d, this heatscope reads 1 to %d", BlockMetaFile, m.Version, FormatVersion)
	}
	return m, nil
}
