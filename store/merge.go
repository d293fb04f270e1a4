package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// BlockError is a failure to read one block: it names the block's key in
// its source, so that a caller merging many blocks can tell which one is
// damaged and leave it out.
type BlockError struct {
	Key string
	Err error
}

func (e *BlockError) Error() string {
	if msg := e.Err.Error(); strings.Contains(msg, e.Key) {
		return msg // the block reader's message names it already
	}
	return fmt.Sprintf("block %s: %v", e.Key, e.Err)
}
func (e *BlockError) Unwrap() error { return e.Err }

// mergedMeta is the meta of the block that merges blocks with these metas
// (before its times, counts and id are known). Blocks taken at different
// sampling periods cannot merge: a block states one period, what each of
// its samples weighs, and any one period would weigh some samples wrong.
// Nor can imports placed by different clock shifts (Meta.ClockShift).
func mergedMeta(metas []Meta) (Meta, error) {
	meta := Meta{Source: metas[0].Source, Node: metas[0].Node, Instance: metas[0].Instance, NodeLabels: metas[0].NodeLabels, PeriodNs: metas[0].PeriodNs,
		ClockShift: metas[0].ClockShift}
	for _, m := range metas {
		if m.PeriodNs != meta.PeriodNs {
			return Meta{}, fmt.Errorf("merge: block %s was sampled every %d ns, block %s every %d ns: "+
				"blocks of different sampling periods stay apart", metas[0].ID, meta.PeriodNs, m.ID, m.PeriodNs)
		}
		if m.ClockShift != meta.ClockShift {
			return Meta{}, fmt.Errorf("merge: block %s was placed at wall time by %d ns, block %s by %d ns: "+
				"imports of different clock shifts stay apart", metas[0].ID, meta.ClockShift, m.ID, m.ClockShift)
		}
		meta.Level = max(meta.Level, m.Level+1)
		meta.Parents = append(meta.Parents, m.ID)
		meta.WALSegment = max(meta.WALSegment, m.WALSegment)
		meta.ImportedAt = max(meta.ImportedAt, m.ImportedAt)
		meta.Relative = meta.Relative || m.Relative
		for _, f := range m.Files {
			if !slices.Contains(meta.Files, f) {
				meta.Files = append(meta.Files, f)
			}
		}
	}
	meta.Level = min(meta.Level, len(levelFactors))
	return meta, nil
}

// MergeBlocks merges the blocks with these keys in src (one node's, one
// source's) into one block written under dir ("<dir>/<id>/data" and
// meta.json, written into "<id>.tmp" first and renamed, so dir never holds
// a partial block). It streams: the parents are read a chunk at a time, as
// the data directory's own compaction reads them. The new block's meta
// lists the parents' ids in Parents, so readers that see it stop reading
// them. A parent that cannot be read fails the merge with a *BlockError
// naming it.
func MergeBlocks(ctx context.Context, src BlockSource, keys []string, dir string) (Meta, error) {
	if len(keys) < 2 {
		return Meta{}, errors.New("merge: fewer than two blocks")
	}
	blocks := make([]*Block, 0, len(keys))
	defer func() {
		for _, b := range blocks {
			b.Close()
		}
	}()
	metas := make([]Meta, 0, len(keys))
	for _, key := range keys {
		m, err := src.Meta(ctx, key)
		if err != nil {
			return Meta{}, &BlockError{Key: key, Err: err}
		}
		b := newBlock(src, key, m)
		blocks = append(blocks, b)
		if err := b.header(); err != nil {
			return Meta{}, &BlockError{Key: key, Err: err}
		}
		if len(metas) > 0 && (m.Node != metas[0].Node || m.Source != metas[0].Source || m.Instance != metas[0].Instance) {
			return Meta{}, fmt.Errorf("merge: block %s is node %q instance %q source %q, block %s node %q instance %q source %q",
				key, m.Node, m.Instance, m.Source, keys[0], metas[0].Node, metas[0].Instance, metas[0].Source)
		}
		metas = append(metas, m)
	}
	merged, err := mergedMeta(metas)
	if err != nil {
		return Meta{}, err
	}
	meta, err := writeBlockFrom(dir, merged, nil, func(w *blockWriter) error {
		_, err := mergeInTimeOrder(blocks, w)
		return err
	})
	if err != nil {
		return Meta{}, fmt.Errorf("merge %d blocks: %w", len(keys), err)
	}
	return meta, nil
}
