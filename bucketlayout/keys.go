// Package bucketlayout is the one owner of a fleet bucket's layout
// (store/FORMAT.md, "Bucket layout"): it alone builds and parses the
// objects' names, lists a bucket's blocks and event segments, and reads
// an object's byte ranges. Every name is relative to the bucket config's
// prefix:
//
//	<node>/blocks/<id>/data                 a block's data, uploaded first
//	<node>/blocks/<id>/meta.json            its meta, uploaded last: the block is complete
//	<node>/blocks/<id>/deletion-mark.json   the compactor's mark: deleted after a delay
//	<node>/events/<instance>-<segment>      an event segment of one data directory
//	<node>/events/<segment>                 one shipped before instances named them (read, never written)
//	<node>/lease.json                       the node's lease: one recorder per node name
//	bucket-index.json.gz                    the bucket index (package bucketindex)
//	compactor-lock.json                     the compactor's lock (package bucketcompact)
//
// A new kind of object gets its name here, and its parser a case in
// Parse.
package bucketlayout

import (
	"errors"
	"fmt"
	"strings"

	"github.com/heatscope/heatscope/store"
)

// The objects at the top of the bucket.
const (
	// IndexKey is the bucket index's object.
	IndexKey = "bucket-index.json.gz"
	// CompactorLockKey is the compactor's lock object.
	CompactorLockKey = "compactor-lock.json"
)

// A block's files: its data and meta, as in a data directory, and the
// compactor's deletion mark.
const (
	DataFile         = store.BlockDataFile
	MetaFile         = store.BlockMetaFile
	DeletionMarkFile = "deletion-mark.json"
)

const (
	blocksDir = "blocks"
	eventsDir = "events"
	leaseFile = "lease.json"
	// eventSegmentSep joins an instance id and a segment number in an
	// event segment's name: '-' is in neither.
	eventSegmentSep = "-"
	maxNameBytes    = 253
)

// ValidName reports whether s is a node name or block id as recorders
// write them into the layout: letters, digits, '-', '.' and '_', at most
// 253 bytes, not "." or "..". Readers and the compactor leave objects of
// other names alone.
func ValidName(s string) bool {
	if s == "" || s == "." || s == ".." || len(s) > maxNameBytes {
		return false
	}
	for _, c := range s {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_') {
			return false
		}
	}
	return true
}

// Block is one block of one node.
type Block struct {
	Node, ID string
}

// Key is the block's key as a bucket's store.BlockSource lists it:
// "<node>/<id>".
func (b Block) Key() string { return b.Node + "/" + b.ID }

// Object is the name of one of the block's files (DataFile, MetaFile,
// DeletionMarkFile): <node>/blocks/<id>/<file>.
func (b Block) Object(file string) string { return blocksPrefix(b.Node) + b.ID + "/" + file }

// ParseBlockKey parses a block's key ("<node>/<id>", Block.Key).
func ParseBlockKey(key string) (Block, error) {
	node, id, ok := strings.Cut(key, "/")
	if !ok || !ValidName(node) || !ValidName(id) {
		return Block{}, fmt.Errorf("bad block key %q: not <node>/<block id>", key)
	}
	return Block{Node: node, ID: id}, nil
}

// NodePrefix is the prefix of every object of node: "<node>/".
func NodePrefix(node string) string { return node + "/" }

// blocksPrefix is the prefix of node's blocks' directories.
func blocksPrefix(node string) string { return NodePrefix(node) + blocksDir + "/" }

// LeaseKey is the node's lease object: <node>/lease.json.
func LeaseKey(node string) string { return NodePrefix(node) + leaseFile }

// EventsPrefix is the prefix of node's event segment objects, of every
// instance.
func EventsPrefix(node string) string { return NodePrefix(node) + eventsDir + "/" }

// EventSegment is an event segment object.
type EventSegment struct {
	Node string
	// Instance is the data directory's instance id (store.Identity);
	// "" for an object named before instances named them.
	Instance string
	// Seq is the segment's number in its data directory
	// (store.EventSegmentName).
	Seq uint64
}

// Key is the object's name.
func (o EventSegment) Key() string {
	if o.Instance == "" {
		return EventsPrefix(o.Node) + store.EventSegmentName(o.Seq)
	}
	return EventsPrefix(o.Node) + o.Instance + eventSegmentSep + store.EventSegmentName(o.Seq)
}

// ShippedSegment returns the name of the object the event segment file
// file (store.EventSegmentName) of the data directory of instance is
// shipped to under node.
func ShippedSegment(node, instance, file string) (string, error) {
	seq, ok := store.ParseEventSegmentName(file)
	if !ok {
		return "", fmt.Errorf("event segment %q: not a segment number (16 digits)", file)
	}
	if !ValidName(node) {
		return "", fmt.Errorf("event segment %s: node name %q is not valid (letters, digits, '-', '.', '_')", file, node)
	}
	if !store.ValidInstance(instance) {
		return "", fmt.Errorf("event segment %s: instance id %q is not 16 hex digits", file, instance)
	}
	return EventSegment{Node: node, Instance: instance, Seq: seq}.Key(), nil
}

// ParseEventSegment parses an event segment object's name:
// <node>/events/<instance>-<segment>, or the older <node>/events/<segment>.
func ParseEventSegment(name string) (EventSegment, error) {
	o, err := Parse(name)
	if err != nil {
		return EventSegment{}, err
	}
	if o.Kind != KindEventSegment {
		return EventSegment{}, fmt.Errorf("object %q: %s, not an event segment", name, o.Kind)
	}
	return o.Segment, nil
}

// Kind is what an object of the layout is.
type Kind int

// The kinds of objects.
const (
	KindBlockFile Kind = iota + 1
	KindEventSegment
	KindLease
	KindIndex
	KindCompactorLock
)

func (k Kind) String() string {
	switch k {
	case KindBlockFile:
		return "a block's file"
	case KindEventSegment:
		return "an event segment"
	case KindLease:
		return "a node's lease"
	case KindIndex:
		return "the bucket index"
	case KindCompactorLock:
		return "the compactor lock"
	}
	return fmt.Sprintf("kind %d", int(k))
}

// Object is a parsed object name.
type Object struct {
	Kind Kind
	// Node is the node of every kind but the index and the lock.
	Node string
	// Block and File name a block's file (KindBlockFile).
	Block Block
	File  string
	// Segment is the event segment (KindEventSegment).
	Segment EventSegment
}

// Key is the object's name again: Parse(o.Key()) is o.
func (o Object) Key() string {
	switch o.Kind {
	case KindBlockFile:
		return o.Block.Object(o.File)
	case KindEventSegment:
		return o.Segment.Key()
	case KindLease:
		return LeaseKey(o.Node)
	case KindIndex:
		return IndexKey
	case KindCompactorLock:
		return CompactorLockKey
	}
	return ""
}

// errNotLayout is the cause of every name Parse refuses.
var errNotLayout = errors.New("not an object of the bucket layout")

// Parse parses an object's name. A name outside the layout (another
// file, a bad node name or block id, a malformed segment) is an error
// that says what is wrong with it.
func Parse(name string) (Object, error) {
	switch name {
	case IndexKey:
		return Object{Kind: KindIndex}, nil
	case CompactorLockKey:
		return Object{Kind: KindCompactorLock}, nil
	}
	node, rest, ok := strings.Cut(name, "/")
	if !ok {
		return Object{}, fmt.Errorf("object %q: %w (no <node>/ before it)", name, errNotLayout)
	}
	if !ValidName(node) {
		return Object{}, fmt.Errorf("object %q: %w (node name %q: letters, digits, '-', '.', '_', at most %d bytes)", name, errNotLayout, node, maxNameBytes)
	}
	if rest == leaseFile {
		return Object{Kind: KindLease, Node: node}, nil
	}
	if seg, ok := strings.CutPrefix(rest, eventsDir+"/"); ok {
		s, err := parseSegmentName(node, seg)
		if err != nil {
			return Object{}, fmt.Errorf("object %q: %w (%w)", name, errNotLayout, err)
		}
		return Object{Kind: KindEventSegment, Node: node, Segment: s}, nil
	}
	if rest, ok := strings.CutPrefix(rest, blocksDir+"/"); ok {
		id, file, ok := strings.Cut(rest, "/")
		if !ok || !ValidName(id) {
			return Object{}, fmt.Errorf("object %q: %w (no valid block id after %s/)", name, errNotLayout, blocksDir)
		}
		if file != DataFile && file != MetaFile && file != DeletionMarkFile {
			return Object{}, fmt.Errorf("object %q: %w (a block holds %s, %s and %s)", name, errNotLayout, DataFile, MetaFile, DeletionMarkFile)
		}
		b := Block{Node: node, ID: id}
		return Object{Kind: KindBlockFile, Node: node, Block: b, File: file}, nil
	}
	return Object{}, fmt.Errorf("object %q: %w (a node holds %s/, %s/ and %s)", name, errNotLayout, blocksDir, eventsDir, leaseFile)
}

// parseSegmentName parses the part of an event segment's name after
// <node>/events/.
func parseSegmentName(node, name string) (EventSegment, error) {
	s := EventSegment{Node: node}
	num := name
	if inst, n, found := strings.Cut(name, eventSegmentSep); found {
		if !store.ValidInstance(inst) {
			return EventSegment{}, fmt.Errorf("event segment %q: %q is not an instance id (16 hex digits)", name, inst)
		}
		s.Instance, num = inst, n
	}
	seq, ok := store.ParseEventSegmentName(num)
	if !ok {
		return EventSegment{}, fmt.Errorf("event segment %q: %q is not a segment number (16 digits)", name, num)
	}
	s.Seq = seq
	return s, nil
}
