package bucketlayout

import (
	"context"
	"strings"
	"time"

	"github.com/thanos-io/objstore"
)

// ListOptions choose what List reads and how.
type ListOptions struct {
	// Blocks and Segments choose what is listed: the blocks, the event
	// segments, or both.
	Blocks, Segments bool
	// Files lists each node with one recursive LIST that reads the
	// objects' modification times: each block's files and newest time,
	// each segment's time (the compactor's listing). Without it each
	// node's blocks/ and events/ are listed, names only (a reader's).
	Files bool
	// Timeout bounds each LIST request (0: only ctx bounds them).
	Timeout time.Duration
	// OnList, when set, is called before each LIST request.
	OnList func()
}

// Listing is what one listing of a bucket found, by node in the order
// the bucket listed them.
type Listing struct {
	Nodes    []string
	Blocks   []ListedBlock
	Segments []ListedSegment
}

// ListedBlock is a block directory a listing found. Without
// ListOptions.Files only Block is known: a block whose meta is not there
// yet (still being uploaded) is listed too.
type ListedBlock struct {
	Block
	HasData, HasMeta, HasMark bool
	// Newest is the newest modification time of its files.
	Newest time.Time
}

// ListedSegment is an object a listing found directly under a node's
// events/. Its name is not checked: ParseEventSegment says whether it is
// an event segment (an index keeps every such name, its readers leave the
// others alone).
type ListedSegment struct {
	Node, Name string
	// Modified is the object's modification time (zero without
	// ListOptions.Files, or when the provider does not say).
	Modified time.Time
}

// List lists the bucket's nodes (the top level's directories with valid
// node names), then each node's blocks and event segments as opts says.
// An error is the bucket's, as it returned it: callers classify it.
func List(ctx context.Context, bkt objstore.BucketReader, opts ListOptions) (Listing, error) {
	var l Listing
	err := iter(ctx, bkt, opts, "", func(name string) {
		if node, ok := strings.CutSuffix(name, "/"); ok && ValidName(node) {
			l.Nodes = append(l.Nodes, node)
		}
	})
	if err != nil {
		return Listing{}, err
	}
	for _, node := range l.Nodes {
		var err error
		if opts.Files {
			err = l.listFiles(ctx, bkt, opts, node)
		} else {
			err = l.listNames(ctx, bkt, opts, node)
		}
		if err != nil {
			return Listing{}, err
		}
	}
	return l, nil
}

// listNames lists node's blocks/ and events/ directories.
func (l *Listing) listNames(ctx context.Context, bkt objstore.BucketReader, opts ListOptions, node string) error {
	if opts.Blocks {
		prefix := blocksPrefix(node)
		err := iter(ctx, bkt, opts, prefix, func(name string) {
			dir, ok := strings.CutSuffix(name, "/")
			if id, found := strings.CutPrefix(dir, prefix); ok && found && ValidName(id) {
				l.Blocks = append(l.Blocks, ListedBlock{Block: Block{Node: node, ID: id}})
			}
		})
		if err != nil {
			return err
		}
	}
	if opts.Segments {
		prefix := EventsPrefix(node)
		return iter(ctx, bkt, opts, prefix, func(name string) {
			if seg, ok := strings.CutPrefix(name, prefix); ok && seg != "" && !strings.Contains(seg, "/") {
				l.Segments = append(l.Segments, ListedSegment{Node: node, Name: name})
			}
		})
	}
	return nil
}

// listFiles lists all of node's objects with one recursive LIST.
func (l *Listing) listFiles(ctx context.Context, bkt objstore.BucketReader, opts ListOptions, node string) error {
	byID := map[string]int{} // index in l.Blocks
	blocks, events := blocksPrefix(node), EventsPrefix(node)
	ctx, cancel := requestContext(ctx, opts)
	defer cancel()
	if opts.OnList != nil {
		opts.OnList()
	}
	return bkt.IterWithAttributes(ctx, NodePrefix(node), func(a objstore.IterObjectAttributes) error {
		modified, _ := a.LastModified()
		if seg, ok := strings.CutPrefix(a.Name, events); ok {
			if opts.Segments && seg != "" && !strings.Contains(seg, "/") {
				l.Segments = append(l.Segments, ListedSegment{Node: node, Name: a.Name, Modified: modified})
			}
			return nil
		}
		rest, ok := strings.CutPrefix(a.Name, blocks)
		if !ok || !opts.Blocks {
			return nil
		}
		id, file, ok := strings.Cut(rest, "/")
		if !ok || !ValidName(id) {
			return nil
		}
		i, seen := byID[id]
		if !seen {
			i = len(l.Blocks)
			byID[id] = i
			l.Blocks = append(l.Blocks, ListedBlock{Block: Block{Node: node, ID: id}})
		}
		b := &l.Blocks[i]
		switch file {
		case DataFile:
			b.HasData = true
		case MetaFile:
			b.HasMeta = true
		case DeletionMarkFile:
			b.HasMark = true
		}
		if modified.After(b.Newest) {
			b.Newest = modified
		}
		return nil
	}, objstore.WithRecursiveIter(), objstore.WithUpdatedAt())
}

// iter runs one LIST of dir (not recursive).
func iter(ctx context.Context, bkt objstore.BucketReader, opts ListOptions, dir string, f func(name string)) error {
	ctx, cancel := requestContext(ctx, opts)
	defer cancel()
	if opts.OnList != nil {
		opts.OnList()
	}
	return bkt.Iter(ctx, dir, func(name string) error {
		f(name)
		return nil
	})
}

func requestContext(ctx context.Context, opts ListOptions) (context.Context, context.CancelFunc) {
	if opts.Timeout > 0 {
		return context.WithTimeout(ctx, opts.Timeout)
	}
	return context.WithCancel(ctx)
}
