// The data directory's blocks that a bucket beside it holds too.

package store

import (
	"cmp"
	"slices"

	"github.com/heatscope/heatscope/events"
)

// copyKey names one recording: the node its samples were recorded as and
// the instance (data directory) that recorded them.
type copyKey struct{ node, instance string }

// shadowCopiesLocked keeps out of what is read the data directory's
// blocks that another source (a bucket) holds too. A recorder that ships
// to a bucket keeps its blocks in its data directory, so serve or export
// with --data DIR and --objstore-config BUCKET on that node finds each of
// them twice, and would count every sample twice. A directory's block is
// such a copy when a block of another source was recorded by the same
// instance as the same node over an overlapping time: the shipper uploads
// every block it cuts before the directory merges it, so the bucket holds
// all its samples, as that block or merged into a larger one. The other
// source's blocks are read; the directory's that none overlaps (not
// shipped yet, or past the bucket's retention) are read as before. A copy
// is kept aside in rd.shadowed, so that listing the directory again does
// not open it again, and comes back when the other source's block goes.
// rd.mu is held for writing.
func (rd *Reader) shadowCopiesLocked() {
	if rd.localBlocks == nil || len(rd.blockSources) < 2 {
		return
	}
	others := map[copyKey][]*Block{}
	for _, b := range rd.blocks {
		if b.src != rd.localBlocks {
			k := copyKey{b.recorded(), b.Meta.Instance}
			others[k] = append(others[k], b)
		}
	}
	spans := make(map[copyKey][][2]int64, len(others))
	for k, bs := range others {
		spans[k] = mergedSpans(bs)
	}
	copied := func(b *Block) bool {
		if b.src != rd.localBlocks {
			return false
		}
		s := spans[copyKey{b.recorded(), b.Meta.Instance}]
		// The first span that ends at or after the block's start.
		i, _ := slices.BinarySearchFunc(s, b.Meta.MinTime, func(sp [2]int64, t int64) int { return cmp.Compare(sp[1], t) })
		return i < len(s) && s[i][0] <= b.Meta.MaxTime
	}
	var back []*Block
	rd.shadowed = slices.DeleteFunc(rd.shadowed, func(b *Block) bool {
		if copied(b) {
			return false
		}
		back = append(back, b)
		return true
	})
	rd.blocks = slices.DeleteFunc(rd.blocks, func(b *Block) bool {
		if copied(b) {
			rd.shadowed = append(rd.shadowed, b)
			return true
		}
		return false
	})
	if len(back) > 0 {
		rd.blocks = append(rd.blocks, back...)
		rd.sortBlocks()
	}
}

// withoutEventCopies returns the sources' events less those that are the
// data directory's own events shipped to a bucket: events of the
// directory's node and instance (InstanceLabel) from the time of the
// directory's oldest event on, which its event log holds too. Older ones
// (the directory's retention dropped them) stay.
func (rd *Reader) withoutEventCopies(all []events.Event) []events.Event {
	if rd.localBlocks == nil {
		return all
	}
	id, ok, err := readIdentity(rd.dir)
	if err != nil || !ok {
		return all
	}
	oldest, ok := rd.events.oldest()
	if !ok {
		return all
	}
	node := rd.LocalNode()
	return slices.DeleteFunc(all, func(e events.Event) bool {
		return e.Time >= oldest && e.Labels[InstanceLabel] == id.Instance && e.Labels[NodeLabel] == node
	})
}
