package shipper

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// DefaultProbeEvery is how often Reachability asks the bucket.
const DefaultProbeEvery = 5 * time.Second

// Prober is what Reachability needs of a bucket: one cheap request that
// fails when the bucket does not answer (a *bucket.Bucket's Check, a
// listing of dir).
type Prober interface {
	Check(ctx context.Context, dir string) error
}

// Reachability watches whether a bucket answers, by asking it every
// interval: a bucket gone is named within an interval or two, while the
// shipper would only find out when its next block is due, and a node's
// lease only when it expires (90 s). It logs when the bucket stops
// answering and when it answers again, once each.
type Reachability struct {
	bucket  Prober
	name    string
	dir     string
	every   time.Duration
	log     *slog.Logger
	now     func() time.Time
	mu      sync.Mutex
	failing bool
	since   time.Time // the first failed probe of the episode
	lastErr error
}

// NewReachability returns a watcher of b (named bucketName in messages)
// that lists dir (relative to the bucket's prefix) every interval
// (DefaultProbeEvery when 0) once Run runs.
func NewReachability(b Prober, bucketName, dir string, every time.Duration, log *slog.Logger) *Reachability {
	if every <= 0 {
		every = DefaultProbeEvery
	}
	if log == nil {
		log = slog.Default()
	}
	return &Reachability{bucket: b, name: bucketName, dir: dir, every: every, log: log, now: time.Now}
}

// Run asks the bucket every interval until ctx is done. Each request
// gets the interval to answer: one that hangs counts as not answering.
func (r *Reachability) Run(ctx context.Context) {
	t := time.NewTicker(r.every)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, r.every)
		err := r.bucket.Check(pctx, r.dir)
		cancel()
		if ctx.Err() != nil {
			return
		}
		r.record(err)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// record takes a probe's outcome, logging a change.
func (r *Reachability) record(err error) {
	now := r.now()
	r.mu.Lock()
	was, since := r.failing, r.since
	r.failing, r.lastErr = err != nil, err
	if err != nil && !was {
		r.since = now
	}
	r.mu.Unlock()
	switch {
	case err != nil && !was:
		r.log.Warn("the bucket does not answer: what is received is stored here and shipped when it answers",
			"bucket", r.name, "err", err)
	case err == nil && was:
		r.log.Info("the bucket answers again: shipping resumes", "bucket", r.name, "unanswered for", now.Sub(since).Round(time.Second))
	}
}

// Err returns nil while the bucket answered its last probe; otherwise
// an error naming the bucket, since when it has not answered, and why.
func (r *Reachability) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.failing {
		return nil
	}
	return fmt.Errorf("bucket %s has not answered since %s (%s): %w", r.name, r.since.UTC().Format(time.RFC3339),
		r.now().Sub(r.since).Round(time.Second), r.lastErr)
}
