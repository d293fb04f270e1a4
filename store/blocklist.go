// Which blocks the DB reads: the listing of its block sources (the data
// directory's and Options.BlockSources) at Open and on every Refresh.

package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/heatscope/heatscope/events"
)

// loadBlocks opens every block of the data directory, removing leftovers
// of interrupted writes and compactions, and lists the other sources'
// blocks (opened when first queried). A source that cannot be listed fails
// the open, its error naming it, unless it is unavailable and
// Options.OpenUnavailable says to go on.
func (rd *Reader) loadBlocks() error {
	var blocks []*Block
	if rd.localBlocks != nil {
		root := filepath.Join(rd.dir, blocksDir)
		entries, err := os.ReadDir(root)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("list blocks: %w", err)
		}
		for _, e := range entries {
			path := filepath.Join(root, e.Name())
			if strings.HasSuffix(e.Name(), ".tmp") {
				if !rd.opts.ReadOnly {
					os.RemoveAll(path) // an interrupted write
				}
				continue
			}
			if !e.IsDir() {
				continue
			}
			b, err := rd.openLocal(path)
			if err != nil {
				rd.corrupt.Add(1)
				rd.log.Warn("skipping unreadable block", "block", path, "err", err)
				continue
			}
			blocks = append(blocks, b)
		}
	}
	for i, src := range rd.blockSources {
		if src == rd.localBlocks {
			continue
		}
		added, err := rd.listNew(i, nil)
		if err != nil && rd.opts.OpenUnavailable && errors.Is(err, ErrUnavailable) {
			rd.log.Warn("a source does not answer: its blocks are listed once it does", "err", err)
			continue
		}
		if err != nil {
			for _, b := range blocks {
				b.Close()
			}
			return err
		}
		blocks = append(blocks, added...)
	}
	// A compaction that crashed after writing its block but before deleting
	// its parents leaves both: the parents go.
	replaced := replacedBy(blocks)
	for _, b := range blocks {
		if replaced[parentKey{b.src, b.recorded(), b.Meta.ID}] {
			b.Close()
			if !rd.opts.ReadOnly && b.Dir != "" {
				os.RemoveAll(b.Dir)
			}
			continue
		}
		rd.blocks = append(rd.blocks, b)
	}
	rd.shadowCopiesLocked()
	for _, b := range rd.separateInstancesLocked() {
		b.Close()
	}
	rd.sortBlocks()
	return nil
}

// openLocal opens a block of the data directory. A block that names no
// node is this directory's node's.
func (rd *Reader) openLocal(path string) (*Block, error) {
	b, err := openBlock(path)
	if err == nil && b.Meta.Node == "" {
		b.Meta.Node = rd.opts.Node
	}
	return b, err
}

// parentKey names a block a compaction may have replaced: compactions
// merge blocks of one node in one source.
type parentKey struct {
	src      BlockSource
	node, id string
}

// replacedBy returns the blocks the given blocks list as their parents.
func replacedBy(blocks []*Block) map[parentKey]bool {
	replaced := map[parentKey]bool{}
	for _, b := range blocks {
		for _, p := range b.Meta.Parents {
			replaced[parentKey{b.src, b.recorded(), p}] = true
		}
	}
	return replaced
}

// listNew lists source i and returns its blocks that known (keys of blocks
// already open) lacks, with the keys it listed. Blocks of the data
// directory are opened at once; others when a query first needs them. A
// block still being written (no meta yet) is left for a later listing; a
// block whose meta cannot be read is skipped with a warning.
func (rd *Reader) listNew(i int, known map[string]bool) ([]*Block, error) {
	added, _, err := rd.listBlockSource(i, known)
	return added, err
}

// blockSourceError names src in err, unless err names it already (a bucket's
// errors name the bucket).
func blockSourceError(src BlockSource, err error) error {
	if strings.Contains(err.Error(), src.String()) {
		return err
	}
	return fmt.Errorf("%s: %w", src, err)
}

func (rd *Reader) listBlockSource(i int, known map[string]bool) (added []*Block, listed map[string]bool, err error) {
	src := rd.blockSources[i]
	ctx := context.Background()
	keys, err := src.List(ctx)
	if err != nil {
		err = blockSourceError(src, err)
		rd.blockSourceErr[i].Store(&err)
		return nil, nil, err
	}
	rd.blockSourceErr[i].Store(nil)
	listed = make(map[string]bool, len(keys))
	for _, key := range keys {
		listed[key] = true
		if known[key] {
			continue
		}
		if src == rd.localBlocks {
			b, err := rd.openLocal(filepath.Join(rd.dir, blocksDir, key))
			if err != nil {
				continue // being written or damaged: next time, or never
			}
			added = append(added, b)
			continue
		}
		m, err := src.Meta(ctx, key)
		if errors.Is(err, fs.ErrNotExist) {
			continue // not completely uploaded yet
		}
		if err != nil {
			if errors.Is(err, ErrUnavailable) {
				err = blockSourceError(src, err)
				rd.blockSourceErr[i].Store(&err)
				for _, b := range added {
					b.Close()
				}
				return nil, nil, err
			}
			if !rd.badMeta[key] {
				rd.badMeta[key] = true
				rd.corrupt.Add(1)
				rd.log.Warn("skipping block with an unreadable meta", "source", src.String(), "block", key, "err", err)
			}
			continue
		}
		added = append(added, newBlock(src, key, m))
	}
	return added, listed, nil
}

func (rd *Reader) sortBlocks() {
	slices.SortFunc(rd.blocks, func(a, b *Block) int {
		return cmp.Or(cmp.Compare(a.Meta.MinTime, b.Meta.MinTime), cmp.Compare(a.Meta.ID, b.Meta.ID))
	})
}

// Refresh brings a read-only DB up to date with its sources: it opens
// blocks written (or uploaded) since Open or the last Refresh and forgets
// blocks that were deleted or compacted away. A reader beside a running
// recorder calls it every few seconds; data still in the recorder's head
// shows up once the head is cut into a block (record's own server shows it
// at once). A source that cannot be listed keeps the blocks it had; the
// error names it.
func (rd *Reader) Refresh() error {
	if !rd.opts.ReadOnly {
		return nil
	}
	if err := rd.events.refresh(); err != nil {
		return err
	}
	rd.refreshMu.Lock()
	defer rd.refreshMu.Unlock()
	var errs []error
	for i, src := range rd.blockSources {
		rd.mu.RLock()
		known := map[string]bool{}
		for _, b := range rd.blocks {
			if b.src == src {
				known[b.key] = true
			}
		}
		for _, b := range rd.shadowed {
			if b.src == src {
				known[b.key] = true
			}
		}
		rd.mu.RUnlock()
		added, listed, err := rd.listBlockSource(i, known)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		anyGone := false
		for key := range known {
			anyGone = anyGone || !listed[key]
		}
		if len(added) == 0 && !anyGone {
			continue
		}
		// A compacted block replaces its parents even before they are deleted.
		replaced := replacedBy(added)
		rd.mu.Lock()
		rd.blocks = append(rd.blocks, added...)
		var gone []*Block
		isGone := func(b *Block) bool {
			if b.src == src && (!listed[b.key] || replaced[parentKey{b.src, b.recorded(), b.Meta.ID}]) {
				gone = append(gone, b)
				return true
			}
			return false
		}
		rd.blocks = slices.DeleteFunc(rd.blocks, isGone)
		rd.shadowed = slices.DeleteFunc(rd.shadowed, isGone)
		rd.sortBlocks()
		rd.mu.Unlock()
		for _, b := range gone {
			rd.retire(b)
		}
	}
	rd.mu.Lock()
	rd.shadowCopiesLocked()
	retired := rd.separateInstancesLocked()
	rd.mu.Unlock()
	for _, b := range retired {
		rd.retire(b)
	}
	if err := rd.refreshBlockSourceEvents(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// refreshBlockSourceEvents reads the events of the sources that hold some,
// keeping the newest MaxEvents. A source that fails keeps its events out
// until it answers again; the error names it.
func (rd *Reader) refreshBlockSourceEvents() error {
	var all []events.Event
	var errs []error
	found := false
	for _, src := range rd.blockSources {
		es, ok := src.(EventSource)
		if !ok {
			continue
		}
		found = true
		evs, err := es.Events(context.Background())
		if err != nil {
			errs = append(errs, blockSourceError(src, fmt.Errorf("events: %w", err)))
		}
		all = append(all, evs...)
	}
	if !found {
		return nil
	}
	all = rd.withoutEventCopies(all)
	slices.SortStableFunc(all, func(a, b events.Event) int { return cmp.Compare(a.Time, b.Time) })
	if limit := rd.events.maxEvents; len(all) > limit {
		all = all[len(all)-limit:]
	}
	rd.mu.RLock()
	blockNotices := slices.Clone(rd.notices)
	rd.mu.RUnlock()
	notices := separateEventInstances(all, blockNotices)
	rd.mu.Lock()
	rd.eventNotices = notices
	rd.mu.Unlock()
	rd.blockSourceEvents.Store(&all)
	return errors.Join(errs...)
}
