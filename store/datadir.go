package store

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// A data directory's sealed blocks and event segments as a copy of them
// (the shipper's uploads) reads them, without opening the directory: the
// directory's recorder keeps writing meanwhile.

// LocalBlock is a sealed block of a data directory.
type LocalBlock struct {
	ID string
	// Dir is the block's directory.
	Dir string
}

// MetaPath is the block's meta.json, DataPath its data: a copy takes
// the data first and the meta last.
func (b LocalBlock) MetaPath() string { return filepath.Join(b.Dir, BlockMetaFile) }

// DataPath is the block's data file.
func (b LocalBlock) DataPath() string { return filepath.Join(b.Dir, BlockDataFile) }

// ReadMeta reads the block's meta.json as the store reads it (ParseMeta: a
// format version this heatscope reads) and checks that it names this
// block; raw is the file as it is, for a copy to take unchanged. The error
// wraps fs.ErrNotExist when the block was deleted since it was listed.
func (b LocalBlock) ReadMeta() (m Meta, raw []byte, err error) {
	if raw, err = os.ReadFile(b.MetaPath()); err != nil {
		return Meta{}, nil, fmt.Errorf("block %s: %w", b.ID, err)
	}
	if m, err = ParseMeta(raw); err != nil {
		return Meta{}, nil, fmt.Errorf("block %s: %w", b.ID, err)
	}
	if m.ID != b.ID {
		return Meta{}, nil, fmt.Errorf("block %s: %w: %s names block %q", b.ID, errCorrupt, BlockMetaFile, m.ID)
	}
	return m, raw, nil
}

// LocalBlocks lists the sealed blocks of data directory dir, leaving out
// blocks being written ("<id>.tmp"); none when it has no blocks/ yet.
func LocalBlocks(dir string) ([]LocalBlock, error) {
	root := filepath.Join(dir, blocksDir)
	entries, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list blocks: %w", err)
	}
	blocks := make([]LocalBlock, 0, len(entries))
	for _, e := range entries {
		if e.IsDir() && !strings.HasSuffix(e.Name(), ".tmp") {
			blocks = append(blocks, LocalBlock{ID: e.Name(), Dir: filepath.Join(root, e.Name())})
		}
	}
	return blocks, nil
}

// EventSegmentFile is an event segment file of a data directory.
type EventSegmentFile struct {
	// Name is its file name (EventSegmentName), Seq its number.
	Name string
	Seq  uint64
	Path string
	// Size is its size when listed; a recorder may be appending to it.
	Size int64
}

// EventSegmentFiles lists the event segments of data directory dir
// (FORMAT.md, "Event log"), leaving out every other file; none when it
// has no events/ yet.
func EventSegmentFiles(dir string) ([]EventSegmentFile, error) {
	root := filepath.Join(dir, eventsDir)
	entries, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	var segs []EventSegmentFile
	for _, e := range entries {
		seq, ok := ParseEventSegmentName(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // deleted since the listing
		}
		segs = append(segs, EventSegmentFile{Name: e.Name(), Seq: seq, Path: filepath.Join(root, e.Name()), Size: info.Size()})
	}
	return segs, nil
}

// WholePages reads the segment's leading whole, intact pages: a copy of a
// segment its recorder may be appending a page to holds these. The error
// wraps fs.ErrNotExist when the segment was deleted since it was listed.
func (f EventSegmentFile) WholePages() ([]byte, error) {
	b, err := os.ReadFile(f.Path)
	if err != nil {
		return nil, fmt.Errorf("read event segment: %w", err)
	}
	pages := newEventPageReader(bytes.NewReader(b), f.Path)
	for {
		if _, err := pages.next(); err != nil {
			return b[:pages.offset], nil
		}
	}
}
