package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/heatscope/heatscope/wallclock"
)

// KmsgPath is the kernel log device.
const KmsgPath = "/dev/kmsg"

// KmsgSourceName is the Source of the events read from the kernel log.
const KmsgSourceName = "kmsg"

// KmsgSource turns kernel log records that match its patterns into
// events.
//
// Where it starts: it reads the kernel's whole ring buffer, then follows
// new records, and keeps only records newer than the time Run is given.
// The recorder passes the newest kernel event the store already holds, or
// its own start time when the store holds none: a recorder restarted
// after a crash picks up the resets it missed while it was down (the
// samples from before the crash are in the store, the ring still has the
// messages), without duplicating the events it stored before, and a new
// data directory does not fill with boot-time messages from before any
// sample.
//
// Times: /dev/kmsg stamps records with the kernel's local_clock in
// microseconds since boot, which runs with CLOCK_MONOTONIC (2.7 ms apart
// after two hours of uptime on the development VM). A record's wall time
// is its stamp plus CLOCK_REALTIME − CLOCK_MONOTONIC, measured when the
// source opens and again every 10 s.
type KmsgSource struct {
	path     string
	patterns []Pattern
	log      *slog.Logger

	mu     sync.Mutex
	reason string // why the source is off, "" while reading

	running                             atomic.Bool
	records, matched, missed, malformed atomic.Uint64
	clock                               *wallclock.Clock
}

// KmsgStatus reports what a KmsgSource did; an exporter of metrics reads
// it (Enabled false means "events off").
type KmsgStatus struct {
	// Enabled is true while the kernel log is being read.
	Enabled bool
	// Reason says why it is not (the open or read error), "" otherwise.
	Reason string
	// Records counts the records read, Matched those kept as events,
	// Missed those the kernel overwrote before they were read, and
	// Malformed those that could not be parsed.
	Records, Matched, Missed, Malformed uint64
}

// NewKmsgSource returns a source reading path (KmsgPath) with patterns.
func NewKmsgSource(path string, patterns []Pattern, log *slog.Logger) *KmsgSource {
	if log == nil {
		log = slog.Default()
	}
	return &KmsgSource{path: path, patterns: patterns, log: log, reason: "not started", clock: wallclock.New()}
}

// Status returns the source's state and counters.
func (k *KmsgSource) Status() KmsgStatus {
	k.mu.Lock()
	reason := k.reason
	k.mu.Unlock()
	return KmsgStatus{Enabled: k.running.Load(), Reason: reason, Records: k.records.Load(),
		Matched: k.matched.Load(), Missed: k.missed.Load(), Malformed: k.malformed.Load()}
}

func (k *KmsgSource) setOff(reason string) {
	k.running.Store(false)
	k.mu.Lock()
	k.reason = reason
	k.mu.Unlock()
}

// Open opens the kernel log. An error (no privilege, no /dev/kmsg in a
// container) is logged as a warning and kept in Status; the caller goes
// on without events.
func (k *KmsgSource) Open() (*os.File, error) {
	f, err := os.OpenFile(k.path, os.O_RDONLY, 0)
	if err != nil {
		err = fmt.Errorf("open kernel log: %w", err)
		k.setOff(err.Error())
		k.log.Warn("kernel log events are off; recording goes on without them", "path", k.path, "err", err)
		return nil, err
	}
	k.clock.Measure()
	k.mu.Lock()
	k.reason = ""
	k.mu.Unlock()
	k.running.Store(true)
	return f, nil
}

// fragmentWait is how long a fragment ('c') waits for its continuations
// ('+') before it is matched as it is.
const fragmentWait = 200 * time.Millisecond

// RecordFile is what Run reads: /dev/kmsg opened by Open, where each
// Read returns one record.
type RecordFile interface {
	Read([]byte) (int, error)
	SetReadDeadline(time.Time) error
	Close() error
}

// Run reads f (from Open) until ctx is done or the file fails, calling
// emit for every record newer than since (Unix ns) that matches a pattern.
// It closes f.
func (k *KmsgSource) Run(ctx context.Context, f RecordFile, since int64, emit func(Event)) error {
	stop := context.AfterFunc(ctx, func() { f.Close() })
	defer stop()
	defer f.Close()
	buf := make([]byte, 16<<10) // a record is at most 8 KiB with its dictionary
	var pending *KmsgRecord     // a 'c' fragment collecting its '+' continuations
	var lastSeq uint64
	flush := func() {
		if pending != nil {
			k.match(pending, since, emit)
			pending = nil
		}
	}
	for {
		if pending != nil {
			f.SetReadDeadline(time.Now().Add(fragmentWait))
		} else {
			f.SetReadDeadline(time.Time{})
		}
		n, err := f.Read(buf)
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			flush()
			continue
		case errors.Is(err, syscall.EPIPE):
			// The kernel overwrote records before we read them; the next
			// read returns the oldest one left.
			k.missed.Add(1)
			continue
		case err != nil:
			flush()
			if ctx.Err() != nil {
				k.setOff("stopped")
				return nil
			}
			err = fmt.Errorf("read kernel log: %w", err)
			k.setOff(err.Error())
			k.log.Warn("kernel log events are off", "err", err)
			return err
		}
		rec, perr := ParseKmsg(buf[:n])
		if perr != nil {
			k.malformed.Add(1)
			continue
		}
		k.records.Add(1)
		if lastSeq != 0 && rec.Seq > lastSeq+1 {
			k.missed.Add(rec.Seq - lastSeq - 1)
		}
		lastSeq = rec.Seq
		k.clock.MaybeMeasure()
		switch {
		case rec.Flag == '+' && pending != nil:
			pending.Text = cleanText([]byte(pending.Text+rec.Text), MaxTextLen)
		case rec.Flag == 'c':
			flush()
			pending = &rec
		default:
			flush()
			k.match(&rec, since, emit)
		}
	}
}

// match emits rec as an event when it is newer than since and matches.
func (k *KmsgSource) match(rec *KmsgRecord, since int64, emit func(Event)) {
	wall := k.clock.Wall(rec.Monotonic)
	if wall <= since || rec.Text == "" {
		return
	}
	p := Match(k.patterns, rec.Text)
	if p == nil {
		return
	}
	k.matched.Add(1)
	emit(KmsgEvent(rec, wall, p.Name))
}

// KmsgEvent makes the event of a kernel log record that pattern matched,
// at wall time (Unix ns). Its labels are the pattern, the record's
// sequence number and facility, and its dictionary's SUBSYSTEM and DEVICE.
func KmsgEvent(rec *KmsgRecord, wall int64, pattern string) Event {
	labels := map[string]string{
		"pattern":  pattern,
		"seq":      strconv.FormatUint(rec.Seq, 10),
		"facility": facilityName(rec.Facility),
	}
	for _, key := range []string{"SUBSYSTEM", "DEVICE"} {
		if v := rec.Dict[key]; v != "" {
			labels[strings.ToLower(key)] = v
		}
	}
	return Event{Time: wall, Source: KmsgSourceName, Severity: rec.Level, Text: rec.Text, Labels: labels}
}

var facilityNames = []string{"kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron", "authpriv", "ftp"}

func facilityName(f uint32) string {
	switch {
	case int(f) < len(facilityNames):
		return facilityNames[f]
	case f >= 16 && f <= 23:
		return fmt.Sprintf("local%d", f-16)
	}
	return strconv.FormatUint(uint64(f), 10)
}

// EventStore keeps a recording's events: store.DB.
type EventStore interface {
	AppendEvent(e Event) error
	// LatestEvent is the time of the newest event of source kept.
	LatestEvent(source string) (int64, bool)
}

// RecordInto reads the kernel log into st until the returned function is
// called, keeping records newer than the newest kernel event st holds, or
// than start on a store without one. When the kernel log cannot be read
// it warns and returns at once: the recording goes on without events, and
// Status says why.
func (k *KmsgSource) RecordInto(st EventStore, start time.Time) (stop func()) {
	f, err := k.Open()
	if err != nil {
		return func() {}
	}
	since := start.UnixNano()
	if last, ok := st.LatestEvent(KmsgSourceName); ok {
		since = last
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		k.Run(ctx, f, since, func(e Event) {
			if err := st.AppendEvent(e); err != nil {
				k.log.Warn("store a kernel log event", "err", err)
				return
			}
			k.log.Info("kernel log event", "pattern", e.Labels["pattern"], "text", e.Text)
		})
	}()
	return sync.OnceFunc(func() { cancel(); <-done })
}
