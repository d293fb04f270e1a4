// Package shipper uploads a recorder's sealed blocks and its system events
// to a bucket, as the Thanos sidecar's shipper uploads Prometheus blocks,
// under the names package bucketlayout gives them: a block's data first,
// its meta.json last (a reader that sees it sees the whole block); the
// event segments, re-uploaded as they grow; the node's lease (Lease): one
// recorder per node name. It reads the data directory through package
// store (store.LocalBlocks, store.EventSegmentFiles). Blocks keep the node they were
// recorded as: a data directory started under another node name ships
// only what it records under the new one. Uploads are idempotent: a block
// whose upload was interrupted (a SIGKILL, the bucket gone) is uploaded
// again whole. What was shipped is remembered in <data>/shipped.json, so a
// restarted recorder ships only what is new; the file lost, it ships
// everything again, harmlessly. Failures are retried with exponential
// backoff. Only blocks cut from the head are shipped (level 1, recorded):
// local compaction and imports stay local, and the bucket's own compactor
// merges what is in the bucket.
package shipper

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/thanos-io/objstore"

	"github.com/heatscope/heatscope/bucketlayout"
	"github.com/heatscope/heatscope/store"
)

// StateFile is the file in the data directory that lists what was shipped.
const StateFile = "shipped.json"

// Options configure a Shipper.
type Options struct {
	// Bucket receives the objects (a *bucket.Bucket: its prefix applied).
	Bucket objstore.Bucket
	// BucketName names the bucket in the state file: shipping to another
	// bucket starts again from nothing.
	BucketName string
	// Dir is the data directory.
	Dir string
	// Node is the directory the node's objects go under.
	Node string
	// Instance is the data directory's instance id (store.Identity): it
	// names the event segment objects, so that no other data directory
	// shipping under Node replaces them.
	Instance string
	Logger   *slog.Logger
	// EventsEvery is how often event segments are looked at (default 15 s);
	// blocks are shipped as soon as Notify says one was written.
	EventsEvery time.Duration
	// MinBackoff and MaxBackoff bound the wait before a failed upload is
	// tried again (default 1 s and 30 s, doubling in between).
	MinBackoff, MaxBackoff time.Duration
	// BeforeMeta, when set, is called between a block's data and its meta
	// (tests: a SIGKILL there leaves a block that must stay invisible).
	BeforeMeta func(id string)
	// Lease, when set, is the node's lease: nothing is uploaded while it
	// is not held (another recorder took the node name over).
	Lease interface{ Held() error }
}

// Shipper uploads a data directory's new blocks and events.
type Shipper struct {
	opts Options
	log  *slog.Logger
	wake chan struct{}

	passMu sync.Mutex // one pass at a time

	mu      sync.Mutex
	state   state
	ignored map[string]bool // blocks never to ship (compacted, imported, another node's)
	// unreadable holds, by block, why the store cannot read a block's
	// meta.json (corrupt, or a format version this build does not read):
	// it is not shipped, is named in a warning once for each reason, and
	// is looked at again every pass.
	unreadable map[string]string
	// otherNode counts, by node, the blocks recorded under another node
	// name than this run's, which stay unshipped (warned about once).
	otherNode map[string]int
	pending   int // blocks to ship, as of the last pass
	stats     Stats
	// delays observes, for each block shipped, the age of its oldest
	// sample when its meta.json made it visible: the bucket's freshness.
	delays prometheus.Histogram
}

// Stats count what the shipper did.
type Stats struct {
	Uploads        uint64 // objects uploaded
	Failures       uint64 // failed uploads
	BlocksShipped  uint64
	EventUploads   uint64
	Bytes          uint64 // bytes uploaded
	Pending        int    // blocks waiting, as of the last pass
	Unreadable     int    // blocks not shipped: their meta.json is one the store cannot read
	NewestShipped  int64  // newest sample time in the bucket (Unix ns, 0: none)
	LastErrorEpoch int64  // Unix s of the last failure (0: none)
}

// state is shipped.json.
type state struct {
	Version int    `json:"version"`
	Bucket  string `json:"bucket"`
	Node    string `json:"node"`
	// Blocks maps each shipped block still on disk to its newest sample.
	Blocks map[string]int64 `json:"blocks"`
	// Events maps each event segment to the bytes of it uploaded.
	Events map[string]int64 `json:"events"`
	// EventObjects maps each event segment in Events to the object it was
	// uploaded to. A segment missing from it (a state file written before
	// objects were named by instance) was uploaded to its old name
	// (bucketlayout.EventSegment with no instance), and grows there: the same
	// events are never in two objects.
	EventObjects map[string]string `json:"eventObjects,omitempty"`
}

// New returns a shipper for dir, reading what it shipped before.
func New(opts Options) (*Shipper, error) {
	if opts.Bucket == nil || opts.Dir == "" || opts.Node == "" {
		return nil, errors.New("shipper: a bucket, a data directory and a node are needed")
	}
	if !store.ValidInstance(opts.Instance) {
		return nil, fmt.Errorf("shipper: instance id %q is not 16 hex digits (the data directory's identity)", opts.Instance)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.EventsEvery <= 0 {
		opts.EventsEvery = 15 * time.Second
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = time.Second
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(30*time.Second, opts.MinBackoff)
	}
	s := &Shipper{opts: opts, log: opts.Logger, wake: make(chan struct{}, 1), ignored: map[string]bool{}, unreadable: map[string]string{}, otherNode: map[string]int{},
		delays: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "heatscope_shipper_visible_delay_seconds",
			Help:    "For each block shipped, seconds from its oldest sample to its meta.json's upload, when the bucket's readers see it (the issue's freshness: 60 s by default).",
			Buckets: []float64{5, 15, 30, 45, 60, 90, 120, 300, 600, 3600}})}
	s.state = state{Version: 1, Bucket: opts.BucketName, Node: opts.Node, Blocks: map[string]int64{}, Events: map[string]int64{}, EventObjects: map[string]string{}}
	b, err := os.ReadFile(filepath.Join(opts.Dir, StateFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("shipper: read %s: %w", StateFile, err)
	default:
		var st state
		if err := json.Unmarshal(b, &st); err != nil || st.Version != 1 {
			s.log.Warn("shipper: state file unreadable; shipping every block again", "file", filepath.Join(opts.Dir, StateFile), "err", err)
		} else if st.Bucket != opts.BucketName {
			s.log.Info("shipper: another bucket than last time; shipping every block of this node again", "was", st.Bucket, "now", opts.BucketName)
		} else {
			if st.Node != opts.Node {
				// Blocks keep the node they were recorded as: what was
				// shipped stays under the old name, and only blocks
				// recorded under the new one go under it.
				s.log.Warn("shipper: this data directory shipped as another node before; its blocks stay under the node they were recorded as, and only new blocks go under the new name",
					"was", st.Node, "now", opts.Node)
			}
			if st.Blocks != nil {
				s.state.Blocks = st.Blocks
			}
			if st.Events != nil {
				s.state.Events = st.Events
			}
			if st.Node == opts.Node {
				// A renamed node uploads a segment that grows under its
				// new name; this one's go on to the objects they were in.
				for name := range st.Events {
					if key, ok := st.EventObjects[name]; ok {
						s.state.EventObjects[name] = key
					} else if seq, ok := store.ParseEventSegmentName(name); ok {
						s.state.EventObjects[name] = bucketlayout.EventSegment{Node: opts.Node, Seq: seq}.Key()
					}
				}
			}
		}
	}
	for _, t := range s.state.Blocks {
		s.stats.NewestShipped = max(s.stats.NewestShipped, t)
	}
	return s, nil
}

// Unshipped reports whether a block is one the shipper will upload and
// has not yet: the store keeps it from compaction and age retention.
func (s *Shipper) Unshipped(m *store.Meta) bool {
	if !shippable(m) || !s.ownNode(m) {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.state.Blocks[m.ID]
	return !ok
}

func shippable(m *store.Meta) bool { return m.Level == 1 && m.ImportedAt == 0 }

// ownNode reports whether a block was recorded under this run's node
// name (a block that names no node, written before nodes, is taken to
// be). A block recorded under another name is never shipped under this
// one: a renamed node would otherwise hold samples from before it
// existed, which its old name holds too.
func (s *Shipper) ownNode(m *store.Meta) bool { return m.Node == "" || m.Node == s.opts.Node }

// Notify wakes the shipper: a block was written.
func (s *Shipper) Notify() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Stats returns the shipper's counters.
func (s *Shipper) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Pending = s.pending
	st.Unreadable = len(s.unreadable)
	return st
}

// Run ships until ctx is done: at once, then whenever Notify is called or
// EventsEvery has passed, and after a failure with backoff (Notify does
// not cut a backoff short).
func (s *Shipper) Run(ctx context.Context) {
	backoff := time.Duration(0)
	// failing is when the uploads began to fail; waited the most blocks
	// pending while they did, and shipped the blocks shipped before.
	var failing time.Time
	var waited int
	var shipped uint64
	for {
		err := s.Sync(ctx)
		if ctx.Err() != nil {
			return
		}
		wait := s.opts.EventsEvery
		wake := s.wake
		st := s.Stats()
		if err != nil {
			if backoff == 0 {
				failing, waited, shipped = time.Now(), 0, st.BlocksShipped
			}
			waited = max(waited, st.Pending)
			backoff = min(max(2*backoff, s.opts.MinBackoff), s.opts.MaxBackoff)
			wait, wake = backoff, nil
			s.log.Warn("shipper: upload failed; retrying", "in", backoff, "pending", st.Pending, "err", err)
		} else if backoff > 0 {
			backoff = 0
			s.log.Info("shipper: uploads resumed", "failing for", time.Since(failing).Round(time.Second),
				"most blocks waiting", waited, "blocks shipped since", st.BlocksShipped-shipped)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// Sync makes one pass: it uploads every block not yet shipped, oldest
// first, then the event segments that grew. It stops at the first failure
// and returns it.
func (s *Shipper) Sync(ctx context.Context) error {
	s.passMu.Lock()
	defer s.passMu.Unlock()
	// The blocks waiting are listed first, so that they are counted
	// (Stats.Pending) while the lease holds them back too.
	todo, err := s.blocksToShip()
	if err == nil && s.opts.Lease != nil {
		err = s.opts.Lease.Held()
	}
	if err == nil {
		err = s.shipBlocks(ctx, todo)
	}
	if err == nil {
		err = s.syncEvents(ctx)
	}
	if err != nil {
		s.mu.Lock()
		s.stats.Failures++
		s.stats.LastErrorEpoch = time.Now().Unix()
		s.mu.Unlock()
	}
	return err
}

// blocksToShip lists the data directory's blocks not yet shipped, oldest
// first, and counts them as pending; it forgets the shipped blocks that
// are no longer on disk.
func (s *Shipper) blocksToShip() ([]store.LocalBlock, error) {
	blocks, err := store.LocalBlocks(s.opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("shipper: %w", err)
	}
	onDisk := map[string]bool{}
	var todo []store.LocalBlock
	waiting := 0
	s.mu.Lock()
	for _, b := range blocks {
		onDisk[b.ID] = true
		if _, done := s.state.Blocks[b.ID]; !done && !s.ignored[b.ID] {
			todo = append(todo, b)
			if _, bad := s.unreadable[b.ID]; !bad {
				waiting++
			}
		}
	}
	// Forget what is no longer on disk (compacted or retained away).
	forgot := false
	for id := range s.state.Blocks {
		if !onDisk[id] {
			delete(s.state.Blocks, id)
			forgot = true
		}
	}
	for id := range s.ignored {
		if !onDisk[id] {
			delete(s.ignored, id)
		}
	}
	for id := range s.unreadable {
		if !onDisk[id] {
			delete(s.unreadable, id)
		}
	}
	s.pending = waiting
	s.mu.Unlock()
	if forgot {
		if err := s.save(); err != nil {
			return nil, err
		}
	}
	slices.SortFunc(todo, func(a, b store.LocalBlock) int { return strings.Compare(a.ID, b.ID) }) // ids start with their creation time
	return todo, nil
}

// shipBlocks uploads the blocks in turn, stopping at the first failure.
func (s *Shipper) shipBlocks(ctx context.Context, todo []store.LocalBlock) error {
	for _, b := range todo {
		if err := s.shipBlock(ctx, b); err != nil {
			return err
		}
	}
	return nil
}

// shipBlock uploads one block: data, then meta.json.
func (s *Shipper) shipBlock(ctx context.Context, b store.LocalBlock) error {
	id := b.ID
	m, metaBytes, err := b.ReadMeta()
	if errors.Is(err, fs.ErrNotExist) {
		return nil // deleted since the listing
	}
	if err != nil {
		s.skipUnreadable(b, err)
		return nil
	}
	s.mu.Lock()
	if _, was := s.unreadable[id]; was {
		delete(s.unreadable, id) // readable again: it waits as the others do
		s.pending++
	}
	s.mu.Unlock()
	if !shippable(&m) {
		s.ignore(id)
		return nil
	}
	if !s.ownNode(&m) {
		s.ignore(id)
		s.mu.Lock()
		s.otherNode[m.Node]++
		n := s.otherNode[m.Node]
		s.mu.Unlock()
		if n == 1 {
			s.log.Warn("shipper: not shipping blocks recorded under another node name; they stay in the data directory (run once with that --node to ship them there)",
				"recordedAs", m.Node, "node", s.opts.Node, "firstBlock", id)
		}
		return nil
	}
	f, err := os.Open(b.DataPath())
	if errors.Is(err, os.ErrNotExist) {
		return nil // deleted since the listing
	}
	if err != nil {
		return fmt.Errorf("shipper: block %s: %w", id, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("shipper: block %s: %w", id, err)
	}
	obj := bucketlayout.Block{Node: s.opts.Node, ID: id}
	if err := s.upload(ctx, obj.Object(bucketlayout.DataFile), f, st.Size()); err != nil {
		return err
	}
	if s.opts.BeforeMeta != nil {
		s.opts.BeforeMeta(id)
	}
	if err := s.upload(ctx, obj.Object(bucketlayout.MetaFile), bytes.NewReader(metaBytes), int64(len(metaBytes))); err != nil {
		return err
	}
	s.mu.Lock()
	s.state.Blocks[id] = m.MaxTime
	s.stats.BlocksShipped++
	s.stats.NewestShipped = max(s.stats.NewestShipped, m.MaxTime)
	s.delays.Observe(time.Since(time.Unix(0, m.MinTime)).Seconds())
	s.pending = max(0, s.pending-1)
	s.mu.Unlock()
	return s.save()
}

// skipUnreadable leaves out a block whose meta.json the store cannot
// read, and warns, once for each reason, that it stays unshipped: a block
// the store refuses is refused by the bucket's readers and compactor too.
// It does not hold back the blocks after it.
func (s *Shipper) skipUnreadable(b store.LocalBlock, err error) {
	s.mu.Lock()
	was, known := s.unreadable[b.ID]
	s.unreadable[b.ID] = err.Error()
	if !known {
		s.pending = max(0, s.pending-1)
	}
	s.mu.Unlock()
	if was != err.Error() {
		s.log.Warn("shipper: not shipping a block whose meta.json this heatscope cannot read (corrupt, or written by a newer heatscope); it stays in the data directory and is looked at again every pass",
			"block", b.ID, "dir", b.Dir, "err", err)
	}
}

func (s *Shipper) ignore(id string) {
	s.mu.Lock()
	s.ignored[id] = true
	s.pending = max(0, s.pending-1)
	s.mu.Unlock()
}

func (s *Shipper) upload(ctx context.Context, name string, r io.Reader, size int64) error {
	if err := s.opts.Bucket.Upload(ctx, name, r); err != nil {
		return err // a *bucket.Error names the bucket, the upload and the object
	}
	s.mu.Lock()
	s.stats.Uploads++
	s.stats.Bytes += uint64(size)
	s.mu.Unlock()
	return nil
}

// syncEvents uploads each event segment that grew since its last upload,
// up to its last whole page (the writer may be appending one).
func (s *Shipper) syncEvents(ctx context.Context) error {
	segs, err := store.EventSegmentFiles(s.opts.Dir)
	if err != nil {
		return fmt.Errorf("shipper: %w", err)
	}
	onDisk := map[string]bool{}
	for _, sf := range segs {
		name := sf.Name
		onDisk[name] = true
		s.mu.Lock()
		done := s.state.Events[name]
		s.mu.Unlock()
		if sf.Size <= done {
			continue
		}
		b, err := sf.WholePages()
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return fmt.Errorf("shipper: %w", err)
		}
		if int64(len(b)) <= done {
			continue
		}
		s.mu.Lock()
		key, ok := s.state.EventObjects[name]
		s.mu.Unlock()
		if !ok {
			if key, err = bucketlayout.ShippedSegment(s.opts.Node, s.opts.Instance, name); err != nil {
				s.log.Warn("shipper: event segment not shipped", "file", sf.Path, "err", err)
				continue
			}
		}
		if err := s.upload(ctx, key, bytes.NewReader(b), int64(len(b))); err != nil {
			return err
		}
		s.mu.Lock()
		s.state.EventObjects[name] = key
		s.state.Events[name] = int64(len(b))
		s.stats.EventUploads++
		s.mu.Unlock()
		if err := s.save(); err != nil {
			return err
		}
	}
	s.mu.Lock()
	forgot := false
	for name := range s.state.Events {
		if !onDisk[name] {
			delete(s.state.Events, name)
			delete(s.state.EventObjects, name)
			forgot = true
		}
	}
	s.mu.Unlock()
	if forgot {
		return s.save()
	}
	return nil
}

// save writes the state file (a temporary file renamed over it).
func (s *Shipper) save() error {
	s.mu.Lock()
	b, err := json.Marshal(&s.state)
	s.mu.Unlock()
	if err != nil {
		return err
	}
	path := filepath.Join(s.opts.Dir, StateFile)
	if err := os.WriteFile(path+".tmp", b, 0o644); err != nil {
		return fmt.Errorf("shipper: write %s: %w", StateFile, err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return fmt.Errorf("shipper: write %s: %w", StateFile, err)
	}
	return nil
}
