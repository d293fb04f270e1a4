package bucketcompact

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/heatscope/heatscope/bucketindex"
	"github.com/heatscope/heatscope/bucketlayout"
	"github.com/heatscope/heatscope/store"
)

// maxSmallObject bounds a meta.json or a deletion mark read.
const maxSmallObject = 1 << 20

// blockObj is one block directory of the bucket as a pass found it.
type blockObj struct {
	node, id string
	hasData  bool
	hasMeta  bool
	// newest is the newest modification time of the block's objects.
	newest time.Time
	meta   *store.Meta // nil until read, or when unreadable
	// mark is the block's deletion mark: its deletion-mark.json
	// (markObj), or, for a block a merged block replaced, derived from
	// the merged block's meta (no object: the merged block is the mark).
	mark    *bucketindex.DeletionMark
	markObj bool
}

func (b *blockObj) block() bucketlayout.Block { return bucketlayout.Block{Node: b.node, ID: b.id} }
func (b *blockObj) key() string               { return b.block().Key() }

// object is the name of one of the block's files (bucketlayout.DataFile, ...).
func (b *blockObj) object(file string) string { return b.block().Object(file) }

// scan lists every node's blocks and event segments: one LIST of the top
// level, then one recursive LIST per node (paged by the provider). It
// reads the metas and deletion marks it has not read before (they never
// change).
func (c *Compactor) scan(ctx context.Context) (blocks []*blockObj, segments []bucketindex.Segment, err error) {
	l, err := bucketlayout.List(ctx, c.bkt, bucketlayout.ListOptions{Blocks: true, Segments: true, Files: true,
		OnList: func() { c.stats.lists.Add(1) }})
	if err != nil {
		return nil, nil, err
	}
	for _, sg := range l.Segments {
		s := bucketindex.Segment{Node: sg.Node, Name: sg.Name}
		if !sg.Modified.IsZero() {
			s.Modified = sg.Modified.UnixMilli()
		}
		segments = append(segments, s)
	}
	for _, lb := range l.Blocks {
		b := &blockObj{node: lb.Node, id: lb.ID, hasData: lb.HasData, hasMeta: lb.HasMeta, markObj: lb.HasMark, newest: lb.Newest}
		if b.markObj {
			if b.mark, err = c.readMark(ctx, b); err != nil {
				return nil, nil, err
			}
			b.markObj = b.mark != nil
		}
		if b.hasMeta {
			if err := c.readMeta(ctx, b); err != nil {
				return nil, nil, err
			}
		}
		blocks = append(blocks, b)
	}
	return blocks, segments, nil
}

// readMeta reads a block's meta.json, once: a meta that cannot be parsed
// makes the block corrupt (named, skipped); a bucket that fails fails the
// pass.
func (c *Compactor) readMeta(ctx context.Context, b *blockObj) error {
	if m, ok := c.metas[b.key()]; ok {
		b.meta = &m
		return nil
	}
	if _, bad := c.corrupt[b.key()]; bad {
		return nil
	}
	raw, err := c.getSmall(ctx, b.object(bucketlayout.MetaFile))
	if err != nil {
		if c.bkt.IsObjNotFoundErr(err) {
			b.hasMeta = false // deleted since the listing
			return nil
		}
		return err
	}
	m, err := store.ParseMeta(raw)
	if err == nil && m.ID != b.id {
		err = fmt.Errorf("meta.json names block %q", m.ID)
	}
	if err != nil {
		c.markCorrupt(b.key(), fmt.Errorf("meta.json: %w", err))
		return nil
	}
	m.Node = b.node // the node is the one whose prefix holds the block
	c.metas[b.key()] = m
	b.meta = &m
	return nil
}

// readMark reads a block's deletion mark. One that cannot be parsed counts
// as made when its object was last written.
func (c *Compactor) readMark(ctx context.Context, b *blockObj) (*bucketindex.DeletionMark, error) {
	if m, ok := c.marks[b.key()]; ok {
		return &m, nil
	}
	raw, err := c.getSmall(ctx, b.object(bucketlayout.DeletionMarkFile))
	if err != nil {
		if c.bkt.IsObjNotFoundErr(err) {
			return nil, nil
		}
		return nil, err
	}
	var m bucketindex.DeletionMark
	if err := json.Unmarshal(raw, &m); err != nil || m.DeletionTime <= 0 {
		c.log.Warn("unreadable deletion mark: taking its object's time", "block", b.key(), "err", err)
		m = bucketindex.DeletionMark{Version: 1, DeletionTime: b.newest.UnixMilli(), Reason: "unknown"}
	}
	m.Node, m.ID = b.node, b.id
	c.marks[b.key()] = m
	return &m, nil
}

func (c *Compactor) getSmall(ctx context.Context, name string) ([]byte, error) {
	c.stats.gets.Add(1)
	rc, err := c.bkt.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	raw, err := io.ReadAll(io.LimitReader(rc, maxSmallObject+1))
	if err != nil {
		return nil, err
	}
	if len(raw) > maxSmallObject {
		return nil, fmt.Errorf("%s: more than %d bytes", name, maxSmallObject)
	}
	return raw, nil
}
