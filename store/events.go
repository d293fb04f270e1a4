package store

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/heatscope/heatscope/events"
)

// The event log keeps system events (package events) beside the samples,
// in a directory of its own:
//
//	DIR/events/<16-digit segment>
//
// Events are few (a kernel message that matters, a deploy) and arrive at
// any time, also long after the samples around them were cut into a
// block, so they are not in blocks: each event is one page, the WAL's page
// format (u32 length | u32 CRC-32C | payload), appended to the open
// segment with one write(2) as it arrives and fsynced by the DB's
// background loop with the WAL (every 500 ms). A SIGKILL loses nothing
// written; a power cut, at most the last 500 ms. A writer never appends to
// a segment it did not create, so a torn tail stays a tail. Segments roll
// every eventSegmentAge or eventSegmentBytes; every segment is read into
// memory at Open (events are small; the count is bounded by
// Options.MaxEvents). Retention deletes whole segments: those whose newest
// event is older than the age limit, those older than the oldest recorded
// sample left when the size limit deleted blocks, and the oldest while
// more than MaxEvents are kept. Imports carry no events.
const (
	eventsDir         = "events"
	eventSegmentAge   = time.Hour
	eventSegmentBytes = 4 << 20
	// maxEventPage bounds a page: an event of the largest fields allowed.
	maxEventPage = 64 << 10
	// defaultMaxEvents bounds the events kept (about 300 B each in memory).
	defaultMaxEvents = 200_000
)

// eventSegment is one file of the event log, held in memory.
type eventSegment struct {
	seq     uint64
	size    int64 // bytes read or written
	events  []events.Event
	maxTime int64
}

// eventLog is the DB's event stream.
type eventLog struct {
	dir       string
	readOnly  bool
	maxEvents int
	log       *slog.Logger

	mu      sync.Mutex
	segs    []*eventSegment // by seq
	total   int
	cur     *os.File // the writer's open segment (the last of segs), nil before its first event
	curOpen time.Time
	dirty   bool // written since the last sync
	dropped uint64
}

func openEventLog(dir string, readOnly bool, maxEvents int, log *slog.Logger) (*eventLog, error) {
	if maxEvents <= 0 {
		maxEvents = defaultMaxEvents
	}
	l := &eventLog{readOnly: readOnly, maxEvents: maxEvents, log: log}
	if dir != "" {
		l.dir = filepath.Join(dir, eventsDir)
	}
	if err := l.refresh(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *eventLog) segPath(seq uint64) string {
	return filepath.Join(l.dir, EventSegmentName(seq))
}

// refresh reads the segments that are new or have grown since the last
// call, and forgets deleted ones. A writer calls it once, at open; a
// reader at every DB.Refresh.
func (l *eventLog) refresh() error {
	if l.dir == "" {
		return nil // no data directory
	}
	files, err := EventSegmentFiles(filepath.Dir(l.dir))
	if err != nil {
		return err
	}
	onDisk := map[uint64]int64{}
	for _, f := range files {
		onDisk[f.Seq] = f.Size
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.segs = slices.DeleteFunc(l.segs, func(s *eventSegment) bool {
		_, ok := onDisk[s.seq]
		return !ok && s.seq != l.curSeq()
	})
	for seq, size := range onDisk {
		i, found := slices.BinarySearchFunc(l.segs, seq, func(s *eventSegment, seq uint64) int { return cmp.Compare(s.seq, seq) })
		if found && l.segs[i].size == size {
			continue
		}
		seg, err := readEventSegment(l.segPath(seq))
		if err != nil && !l.readOnly {
			// A reader may see a page being written; a writer sees what a
			// crash left.
			l.log.Warn("event segment damaged; keeping the events before the damage", "segment", l.segPath(seq), "events", len(seg.events), "err", err)
		}
		seg.seq = seq
		if found {
			l.segs[i] = seg
		} else {
			l.segs = slices.Insert(l.segs, i, seg)
		}
	}
	l.count()
	return nil
}

func (l *eventLog) curSeq() uint64 {
	if l.cur == nil || len(l.segs) == 0 {
		return 0
	}
	return l.segs[len(l.segs)-1].seq
}

func (l *eventLog) count() {
	l.total = 0
	for _, s := range l.segs {
		l.total += len(s.events)
	}
}

// readEventSegment reads a segment's events up to its end or its first
// torn or corrupt page; err says which.
func readEventSegment(path string) (*eventSegment, error) {
	seg := &eventSegment{maxTime: -1 << 63}
	f, err := os.Open(path)
	if err != nil {
		return seg, fmt.Errorf("read event segment: %w", err)
	}
	defer f.Close()
	return readEvents(bufio.NewReader(f), path, seg)
}

// readEvents reads event pages from r (the file at path) into seg.
func readEvents(r io.Reader, path string, seg *eventSegment) (*eventSegment, error) {
	pages := newEventPageReader(r, path)
	for {
		payload, err := pages.next()
		if errors.Is(err, io.EOF) {
			return seg, nil
		}
		if err != nil {
			return seg, err
		}
		e, err := decodeEvent(payload)
		if err != nil {
			return seg, fmt.Errorf("event segment %s offset %d: %w", path, seg.size, err)
		}
		seg.add(e)
		seg.size = pages.offset
	}
}

// eventPageReader reads an event segment's pages (FORMAT.md, "Event
// log"), checking each; its errors name the segment.
type eventPageReader struct {
	pageReader
	path string
}

func newEventPageReader(r io.Reader, path string) *eventPageReader {
	return &eventPageReader{pageReader: pageReader{r: r, max: maxEventPage}, path: path}
}

// next returns the next page's payload: io.EOF when the segment ends
// after a whole page, an error wrapping errCorrupt at a torn or damaged
// page (one being written, or a crash's).
func (p *eventPageReader) next() ([]byte, error) {
	payload, err := p.pageReader.next()
	if err != nil && err != io.EOF {
		return nil, fmt.Errorf("event segment %s %w", p.path, err)
	}
	return payload, err
}

func (s *eventSegment) add(e events.Event) {
	s.events = append(s.events, e)
	s.maxTime = max(s.maxTime, e.Time)
}

// encodeEvent appends an event's page to b:
//
//	varint time (Unix ns) | uvarint len, source | u8 severity |
//	uvarint len, text | uvarint label count | per label, by key:
//	uvarint len, key | uvarint len, value
func encodeEvent(b []byte, e *events.Event) []byte {
	start := len(b)
	b = append(b, make([]byte, pageHeader)...)
	b = binary.AppendVarint(b, e.Time)
	b = appendString(b, e.Source)
	b = append(b, byte(e.Severity))
	b = appendString(b, e.Text)
	b = binary.AppendUvarint(b, uint64(len(e.Labels)))
	keys := make([]string, 0, len(e.Labels))
	for k := range e.Labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b = appendString(b, k)
		b = appendString(b, e.Labels[k])
	}
	sealPage(b[start:])
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decodeEvent decodes a page's payload and validates the event.
func decodeEvent(payload []byte) (events.Event, error) {
	r := &reader{b: payload}
	var e events.Event
	e.Time = r.varint("event time")
	e.Source = string(r.bytes("event source"))
	sev := r.bytes1()
	e.Severity = events.Severity(sev)
	e.Text = string(r.bytes("event text"))
	n := r.count("event labels", 2)
	if n > 0 {
		e.Labels = make(map[string]string, n)
	}
	for range n {
		k := string(r.bytes("label key"))
		e.Labels[k] = string(r.bytes("label value"))
	}
	if r.err == nil && len(r.b) > 0 {
		r.fail("event: trailing bytes")
	}
	if r.err != nil {
		return e, r.err
	}
	if err := e.Validate(); err != nil {
		return e, fmt.Errorf("%w: invalid event: %w", errCorrupt, err)
	}
	return e, nil
}

// append validates e and writes it.
func (l *eventLog) append(e events.Event) error {
	if l.readOnly {
		return errors.New("append event: data directory opened read-only")
	}
	if err := e.Validate(); err != nil {
		return fmt.Errorf("append event: %w", err)
	}
	page := encodeEvent(nil, &e)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur != nil && (time.Since(l.curOpen) >= eventSegmentAge || l.segs[len(l.segs)-1].size+int64(len(page)) > eventSegmentBytes) {
		l.closeCurrent()
	}
	if l.cur == nil {
		if err := l.startSegment(); err != nil {
			return err
		}
	}
	seg := l.segs[len(l.segs)-1]
	if _, err := l.cur.Write(page); err != nil {
		// Cut a partial page off so that later ones still read.
		l.cur.Truncate(seg.size)
		l.cur.Seek(seg.size, io.SeekStart)
		return fmt.Errorf("append event to %s: %w", l.cur.Name(), err)
	}
	seg.size += int64(len(page))
	seg.add(e)
	l.total++
	l.dirty = true
	return nil
}

// startSegment creates the next segment. l.mu must be held.
func (l *eventLog) startSegment() error {
	if err := os.MkdirAll(l.dir, 0o755); err != nil {
		return fmt.Errorf("create event log: %w", err)
	}
	seq := uint64(1)
	if n := len(l.segs); n > 0 {
		seq = l.segs[n-1].seq + 1
	}
	f, err := os.OpenFile(l.segPath(seq), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("create event segment: %w", err)
	}
	if err := syncDir(l.dir); err != nil {
		f.Close()
		return err
	}
	l.cur, l.curOpen = f, time.Now()
	l.segs = append(l.segs, &eventSegment{seq: seq, maxTime: -1 << 63})
	return nil
}

// closeCurrent syncs and closes the open segment. l.mu must be held.
func (l *eventLog) closeCurrent() {
	if l.cur == nil {
		return
	}
	l.syncLocked()
	l.cur.Close()
	l.cur = nil
}

func (l *eventLog) syncLocked() {
	if l.cur == nil || !l.dirty {
		return
	}
	l.dirty = false
	if err := l.cur.Sync(); err != nil {
		l.log.Warn("sync event segment", "segment", l.cur.Name(), "err", err)
	}
}

// sync fsyncs what was appended since the last sync.
func (l *eventLog) sync() {
	l.mu.Lock()
	l.syncLocked()
	l.mu.Unlock()
}

func (l *eventLog) close() {
	l.mu.Lock()
	l.closeCurrent()
	l.mu.Unlock()
}

// retain deletes the segments whose newest event is older than cutoff
// (Unix ns), then the oldest while more than maxEvents are kept.
func (l *eventLog) retain(cutoff int64) {
	l.mu.Lock()
	var doomed []*eventSegment
	for _, s := range l.segs {
		if len(s.events) > 0 && s.maxTime < cutoff {
			doomed = append(doomed, s)
		}
	}
	total := l.total
	for _, s := range doomed {
		total -= len(s.events)
	}
	for _, s := range l.segs {
		if total <= l.maxEvents {
			break
		}
		if !slices.Contains(doomed, s) {
			doomed = append(doomed, s)
			total -= len(s.events)
		}
	}
	for _, s := range doomed {
		if s.seq == l.curSeq() {
			l.closeCurrent()
		}
		if err := os.Remove(l.segPath(s.seq)); err != nil && !errors.Is(err, os.ErrNotExist) {
			l.log.Warn("delete event segment", "segment", l.segPath(s.seq), "err", err)
			continue
		}
		l.dropped += uint64(len(s.events))
		l.log.Info("dropped events", "segment", s.seq, "events", len(s.events), "why", "retention")
		l.segs = slices.DeleteFunc(l.segs, func(x *eventSegment) bool { return x == s })
	}
	l.count()
	l.mu.Unlock()
}

// query returns the events in r that f selects, in time order, at most
// limit of them (0: all); more says whether there were others.
func (l *eventLog) query(r Range, f EventFilter, limit int) (out []events.Event, more bool) {
	l.mu.Lock()
	for _, s := range l.segs {
		for i := range s.events {
			if e := &s.events[i]; e.Time >= r.From && e.Time < r.To && f.match(e) {
				out = append(out, *e)
			}
		}
	}
	l.mu.Unlock()
	slices.SortStableFunc(out, func(a, b events.Event) int { return cmp.Compare(a.Time, b.Time) })
	if limit > 0 && len(out) > limit {
		return out[:limit], true
	}
	return out, false
}

// EventFilter selects events; an empty list selects all.
type EventFilter struct {
	// Sources are event sources ("kmsg", "heatscope", a POSTer's name).
	Sources []string
	// Kinds are event kinds (events.Event.Kind: "cpu-saturation",
	// "ena-reset").
	Kinds []string
}

func (f *EventFilter) match(e *events.Event) bool {
	return (len(f.Sources) == 0 || slices.Contains(f.Sources, e.Source)) &&
		(len(f.Kinds) == 0 || slices.Contains(f.Kinds, e.Kind()))
}

// oldest returns the time of the oldest event held; ok is false when
// there is none.
func (l *eventLog) oldest() (t int64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.segs {
		for _, e := range s.events {
			if !ok || e.Time < t {
				t, ok = e.Time, true
			}
		}
	}
	return t, ok
}

// latest returns the time of the newest event from source.
func (l *eventLog) latest(source string) (t int64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.segs {
		for _, e := range s.events {
			if e.Source == source && (!ok || e.Time > t) {
				t, ok = e.Time, true
			}
		}
	}
	return t, ok
}

// AppendEvent validates an event and adds it to the store's event log;
// the error of an invalid event wraps an *events.FieldError. It is safe
// for concurrent use and cheap (one write(2); the fsync comes within
// 500 ms), so any part of the recorder may mark the time axis with it.
func (db *DB) AppendEvent(e events.Event) error { return db.events.append(e) }

// Events returns the events in r that f selects, in time order, at most
// limit (0: no limit); more says whether more matched. The sources'
// events are kept sorted by time: a query finds r's first by binary
// search and stops at limit, so that its cost is the events it returns,
// not all that are kept (a fleet's 200,000).
func (rd *Reader) Events(r Range, f EventFilter, limit int) (evs []events.Event, more bool) {
	remote := rd.blockSourceEvents.Load()
	local, localMore := rd.events.query(r, f, limit)
	if remote == nil {
		return local, localMore
	}
	all := *remote
	lo, _ := slices.BinarySearchFunc(all, r.From, func(e events.Event, t int64) int { return cmp.Compare(e.Time, t) })
	n := len(local) + len(all) - lo
	if limit > 0 {
		n = min(n, limit+1)
	}
	evs = make([]events.Event, 0, min(n, 1<<14))
	for i := lo; i < len(all) && all[i].Time < r.To; i++ {
		e := &all[i]
		if !f.match(e) {
			continue
		}
		// The local events first at equal times, as a stable sort of the
		// local ones followed by the sources' would put them.
		for len(local) > 0 && local[0].Time <= e.Time {
			evs, local = append(evs, local[0]), local[1:]
		}
		if limit > 0 && len(evs) >= limit {
			return evs[:limit], true
		}
		evs = append(evs, *e)
	}
	evs = append(evs, local...)
	if limit > 0 && len(evs) > limit {
		return evs[:limit], true
	}
	return evs, localMore
}

// ReadOnly reports whether the DB was opened read-only.
func (db *DB) ReadOnly() bool { return db.opts.ReadOnly }

// LatestEvent returns the time (Unix ns) of the newest event from an
// event source; ok is false when there is none.
func (db *DB) LatestEvent(source string) (t int64, ok bool) { return db.events.latest(source) }
