// Package otlpexport sends a recording's samples to an OpenTelemetry
// endpoint (a Collector, or a backend that takes OTLP profiles) while it
// records: a pipeline sink (pipeline.Sink) that encodes each sample with
// otlpprofile, cuts the samples into a batch every few seconds, marshals
// it once, and sends that protobuf over OTLP/gRPC (the profiles service's
// Export) or OTLP/HTTP (POSTed to /v1development/profiles), gzip-compressed
// by default, with TLS and headers such as an authorization token.
//
// Recording never waits for the endpoint. Batches wait in a queue bounded
// in bytes (their protobuf's size); a batch is retried with exponential
// backoff while the endpoint is down or throttling, and when the queue is
// over its bound the oldest waiting batches are dropped: the endpoint gets
// the newest data when it comes back, the data directory keeps it all.
// What is dropped is counted by why (Stats, heatscope_otlp_dropped_samples_total)
// and logged once per episode, with its end.
package otlpexport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heatscope/heatscope/otlpprofile"
	"github.com/heatscope/heatscope/sample"
)

// Defaults of Config. A request carries the whole dictionary its
// samples use, so its cost is partly per request: at 10 s a 2-CPU node's
// export cost its agent about half what it did at 5 s (bench/otlp
// -workload-only, docs/benchmarks.md), the samples reaching the endpoint
// at most 10 s after they were taken.
const (
	DefaultInterval   = 10 * time.Second
	DefaultQueueBytes = 4 << 20
	DefaultTimeout    = 10 * time.Second
)

// maxBatchSamples cuts a batch before its interval ends: a node of many
// CPUs fills one in a second or two.
const maxBatchSamples = 20_000

// Backoff between the attempts at one batch: from minBackoff, doubling
// to maxBackoff, each with up to a fifth of jitter; longer when the
// endpoint asks (up to maxRetryAfter).
const (
	minBackoff    = time.Second
	maxBackoff    = 30 * time.Second
	maxRetryAfter = 5 * time.Minute
)

// Config says where and how to send.
type Config struct {
	// Endpoint is host:port, or a URL (http:// for plaintext, https://);
	// an OTLP/HTTP URL without a path gets ProfilesPath.
	Endpoint string
	// Protocol is "grpc" (the default) or "http".
	Protocol string
	// Insecure sends in plaintext; otherwise TLS, trusting the system's
	// roots or CAFile's.
	Insecure bool
	CAFile   string
	// Headers are sent with every request (gRPC metadata or HTTP
	// headers), names in lower case: never logged.
	Headers map[string]string
	// Compression is CompressionGzip (the default when "") or
	// CompressionNone.
	Compression string
	// Interval is how often a batch is cut (DefaultInterval when 0).
	Interval time.Duration
	// QueueBytes bounds the batches waiting to be sent, by the size of
	// their protobuf, which is what they take in memory
	// (DefaultQueueBytes when 0).
	QueueBytes int64
	// QueueChanged, when not nil, is told the bytes the queue holds (the
	// batch being sent included) each time they change, in order: it is
	// called with the queue locked, so it must be quick and must not
	// call the Exporter. record adds them to the agent's Go memory
	// limit, so that batches waiting for an endpoint that is down do not
	// make the garbage collector run more often for the rest of the agent.
	QueueChanged func(bytes int64)
	// Timeout bounds one request, and Close's wait for the queue
	// (DefaultTimeout when 0).
	Timeout time.Duration
	// Node is the host.name of the samples (sample.Sample.Node is empty
	// in a recording); Version the scope's version.
	Node, Version string
	// Log is where failures and drops are logged (slog.Default when nil).
	Log *slog.Logger
}

// Stats are the exporter's counters since it started.
type Stats struct {
	// ExportedSamples were taken by the endpoint.
	ExportedSamples uint64
	// DroppedQueueFull were dropped with the oldest batches while the
	// queue was over its bound; DroppedRejected were refused by the
	// endpoint for good (a request it cannot take, a partial success);
	// DroppedShutdown were still queued when the recording stopped and
	// the endpoint did not take them within Timeout.
	DroppedQueueFull, DroppedRejected, DroppedShutdown uint64
	// FailedRequests counts the requests that failed, each attempt once.
	FailedRequests uint64
	// QueuedSamples and QueuedBytes are what waits now (the batch being
	// sent included).
	QueuedSamples int64
	QueuedBytes   int64
}

// batch is one request, and how many samples it carries. It is kept as
// its protobuf, marshaled once when the batch is cut: exactly its size in
// memory, nothing the garbage collector scans, and what both protocols
// send as it is (the collector's gRPC client would copy the whole pdata
// of every request before marshaling it).
type batch struct {
	body    []byte
	samples int
}

// size is what the batch takes in the queue.
func (b *batch) size() int64 { return int64(len(b.body)) }

// Exporter is the sink. Add and Close are called on the recorder's
// goroutine; two goroutines of its own cut the batches and send them.
type Exporter struct {
	cfg    Config
	client client
	log    *slog.Logger

	encMu sync.Mutex
	enc   *otlpprofile.Encoder

	qMu   sync.Mutex
	queue []batch
	// queued is the samples and bytes of the queue and of the batch
	// being sent.
	queuedSamples, queuedBytes int64
	// overflowing is true from the first drop of a full queue until the
	// queue is under half its bound again; overflowDropped counts that
	// episode's drops.
	overflowing     bool
	overflowDropped uint64
	closing         bool
	wake            chan struct{}

	ctx        context.Context
	cancel     context.CancelFunc
	stopTicker chan struct{}
	wg         sync.WaitGroup
	closeOnce  sync.Once
	// minBackoff is the first backoff (the constant; tests shorten it).
	minBackoff time.Duration

	exported, droppedFull, droppedRejected, droppedShutdown, failures atomic.Uint64
	// answered is set once the endpoint answered a request (took it or
	// not). At stop, an endpoint never reached is not waited for.
	answered atomic.Bool
	// failed is signalled (without waiting) at each failed attempt, for
	// Close to see that the endpoint is hopeless.
	failed chan struct{}
	// warnedAt is when the endpoint's warning was last logged, unwarned
	// how many batches came with one since (the sender's only).
	warnedAt time.Time
	unwarned int
}

// New returns an exporter to cfg's endpoint, sending in the background
// until Close. It does not connect yet: an endpoint down at the start is
// retried like one that goes down later.
func New(cfg Config) (*Exporter, error) { return newExporter(cfg, minBackoff) }

// newExporter is New with the first backoff given (tests shorten it).
func newExporter(cfg Config, firstBackoff time.Duration) (*Exporter, error) {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.QueueBytes <= 0 {
		cfg.QueueBytes = DefaultQueueBytes
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	var err error
	if cfg.Compression, err = checkCompression(cfg.Compression); err != nil {
		return nil, err
	}
	var c client
	switch cfg.Protocol {
	case "", "grpc":
		c, err = newGRPCClient(&cfg, firstBackoff)
	case "http":
		c, err = newHTTPClient(&cfg)
	default:
		err = fmt.Errorf("otlp protocol %q: %w", cfg.Protocol, errUnknownProtocol)
	}
	if err != nil {
		return nil, err
	}
	return start(cfg, c, firstBackoff), nil
}

// start runs an exporter over c, its backoff starting at firstBackoff.
func start(cfg Config, c client, firstBackoff time.Duration) *Exporter {
	x := &Exporter{
		cfg: cfg, client: c, log: cfg.Log.With("otlp endpoint", cfg.Endpoint),
		enc:        otlpprofile.NewEncoder(cfg.Version, cfg.Node, 0),
		wake:       make(chan struct{}, 1),
		failed:     make(chan struct{}, 1),
		stopTicker: make(chan struct{}),
		minBackoff: firstBackoff,
	}
	x.ctx, x.cancel = context.WithCancel(context.Background())
	x.wg.Add(2)
	go x.cutEvery()
	go x.send()
	return x
}

// Add encodes s into the current batch. It never waits for the endpoint.
func (x *Exporter) Add(s *sample.Sample) {
	x.encMu.Lock()
	x.enc.Add(s)
	var b batch
	if x.enc.Len() >= maxBatchSamples {
		b = x.cutLocked()
	}
	x.encMu.Unlock()
	if b.samples > 0 {
		x.enqueue(b)
	}
}

// cutLocked takes the current batch, marshaled; encMu is held. A batch
// that does not marshal is counted and logged, and comes back empty.
func (x *Exporter) cutLocked() batch {
	n := x.enc.Len()
	if n == 0 {
		return batch{}
	}
	body, err := x.enc.Request()
	if err != nil {
		// pdata marshals what it built; this is not expected.
		x.droppedRejected.Add(uint64(n))
		x.log.Error("OTLP export: a batch did not marshal: dropped", "samples", n, "err", err)
		return batch{}
	}
	return batch{body: body, samples: n}
}

// cut takes the current batch and queues it.
func (x *Exporter) cut() {
	x.encMu.Lock()
	b := x.cutLocked()
	x.encMu.Unlock()
	if b.samples > 0 {
		x.enqueue(b)
	}
}

// cutEvery cuts a batch every interval until Close.
func (x *Exporter) cutEvery() {
	defer x.wg.Done()
	t := time.NewTicker(x.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			x.cut()
		case <-x.stopTicker:
			return
		}
	}
}

// enqueue adds a batch to the queue, dropping the oldest waiting batches
// while the queue is over its bound (this one itself when it alone is).
func (x *Exporter) enqueue(b batch) {
	x.qMu.Lock()
	x.queue = append(x.queue, b)
	x.queuedSamples += int64(b.samples)
	x.queuedBytes += b.size()
	var dropped uint64
	for x.queuedBytes > x.cfg.QueueBytes && len(x.queue) > 0 {
		old := x.queue[0]
		x.queue[0] = batch{}
		x.queue = x.queue[1:]
		x.queuedSamples -= int64(old.samples)
		x.queuedBytes -= old.size()
		dropped += uint64(old.samples)
	}
	first := dropped > 0 && !x.overflowing
	if dropped > 0 {
		x.overflowing = true
		x.overflowDropped += dropped
	}
	queued := x.queuedBytes
	x.queueChangedLocked()
	x.qMu.Unlock()
	if dropped > 0 {
		x.droppedFull.Add(dropped)
	}
	if first {
		x.log.Warn("OTLP export queue full: dropping the oldest batches (recording goes on; counted in heatscope_otlp_dropped_samples_total)",
			"queue bytes", queued, "bound", x.cfg.QueueBytes, "dropped samples", dropped)
	}
	select {
	case x.wake <- struct{}{}:
	default:
	}
}

// queueChangedLocked tells Config.QueueChanged the bytes queued; qMu is
// held.
func (x *Exporter) queueChangedLocked() {
	if x.cfg.QueueChanged != nil {
		x.cfg.QueueChanged(x.queuedBytes)
	}
}

// next takes the oldest batch, waiting for one; false when the exporter
// is closing and the queue is empty, or cancelled.
func (x *Exporter) next() (batch, bool) {
	for {
		x.qMu.Lock()
		if len(x.queue) > 0 {
			b := x.queue[0]
			x.queue[0] = batch{}
			x.queue = x.queue[1:]
			x.qMu.Unlock()
			return b, true
		}
		closing := x.closing
		x.qMu.Unlock()
		if closing {
			return batch{}, false
		}
		select {
		case <-x.wake:
		case <-x.ctx.Done():
			return batch{}, false
		}
	}
}

// sent takes a batch off the queue's count, and ends an overflow episode
// once the queue is under half its bound.
func (x *Exporter) sent(b batch) {
	x.qMu.Lock()
	x.queuedSamples -= int64(b.samples)
	x.queuedBytes -= b.size()
	x.queueChangedLocked()
	var ended uint64
	if x.overflowing && x.queuedBytes < x.cfg.QueueBytes/2 {
		ended, x.overflowing, x.overflowDropped = x.overflowDropped, false, 0
	}
	x.qMu.Unlock()
	if ended > 0 {
		x.log.Info("OTLP export queue has room again", "dropped samples in all", ended)
	}
}

// send sends the batches in order until the exporter is closed and its
// queue empty, or cancelled.
func (x *Exporter) send() {
	defer x.wg.Done()
	var failing int // the attempts failed in a row
	for {
		b, ok := x.next()
		if !ok {
			return
		}
		failing = x.deliver(b, failing)
	}
}

// deliver sends b until the endpoint takes it, refuses it for good, or
// the exporter is cancelled; failing is the attempts that failed in a row
// before it, and it returns that count after.
func (x *Exporter) deliver(b batch, failing int) int {
	defer x.sent(b)
	for {
		ctx, cancel := context.WithTimeout(x.ctx, x.cfg.Timeout)
		warning, err := x.client.export(ctx, b.body)
		cancel()
		if err == nil {
			x.answered.Store(true)
			x.exported.Add(uint64(b.samples))
			if failing > 0 {
				x.log.Info("OTLP export works again", "failed attempts", failing)
			}
			if warning != "" {
				x.warn(warning)
			}
			return 0
		}
		if x.ctx.Err() != nil {
			x.droppedShutdown.Add(uint64(b.samples))
			return failing
		}
		var ee *exportError
		if !errors.As(err, &ee) || !ee.unreached {
			x.answered.Store(true)
		}
		x.failures.Add(1)
		select {
		case x.failed <- struct{}{}:
		default:
		}
		var partial *partialError
		if errors.As(err, &partial) {
			// Taken, but not all of it: what was refused is not
			// sent again.
			x.droppedRejected.Add(uint64(b.samples))
			x.log.Warn("OTLP endpoint took part of a batch", "err", err)
			return 0
		}
		if !errors.As(err, &ee) || !ee.retryable {
			x.droppedRejected.Add(uint64(b.samples))
			if failing == 0 {
				x.log.Warn("OTLP endpoint refused a batch: dropped, not retried (the next refusals are counted, not logged)", "samples", b.samples, "err", err)
			}
			return failing + 1
		}
		failing++
		wait := x.backoff(failing, ee.after)
		if failing == 1 {
			x.log.Warn("OTLP export failing: retrying with backoff (recording goes on)", "err", err, "retry in", wait.Round(time.Millisecond))
		}
		select {
		case <-time.After(wait):
		case <-x.ctx.Done():
			x.droppedShutdown.Add(uint64(b.samples))
			return failing
		}
	}
}

// warnEvery bounds how often the endpoint's warnings are logged.
const warnEvery = time.Minute

// warn logs a warning the endpoint answered a batch it took with (a
// receiver whose bucket does not answer says so), at most once every
// warnEvery, with how many batches came with one since the last line.
func (x *Exporter) warn(msg string) {
	now := time.Now()
	if !x.warnedAt.IsZero() && now.Sub(x.warnedAt) < warnEvery {
		x.unwarned++
		return
	}
	x.log.Warn("OTLP endpoint took a batch with a warning", "warning", msg, "warned batches not logged before it", x.unwarned)
	x.warnedAt, x.unwarned = now, 0
}

// backoff is the wait before attempt n+1 at a batch: exponential with
// jitter, or what the endpoint asked for when longer.
func (x *Exporter) backoff(n int, asked time.Duration) time.Duration {
	d := x.minBackoff << min(n-1, 5)
	d = min(d, x.minBackoff*(maxBackoff/minBackoff))
	d += time.Duration(rand.Int64N(int64(d)/5 + 1))
	return max(d, min(asked, maxRetryAfter))
}

// Close sends what is left (the batch under way and the queue) for at
// most Timeout, counts what the endpoint did not take in that time as
// dropped, and closes the connection. An endpoint that was never
// reached (no connection, no answer to any request) is given no more
// than the attempt under way: once an attempt has failed, what is left is
// dropped at once (a recording whose endpoint never worked stops
// promptly). It never returns an error: a recording
// does not fail for its export.
func (x *Exporter) Close() error {
	x.closeOnce.Do(func() {
		close(x.stopTicker)
		x.cut()
		x.qMu.Lock()
		x.closing = true
		x.qMu.Unlock()
		select {
		case x.wake <- struct{}{}:
		default:
		}
		done := make(chan struct{})
		go func() {
			x.wg.Wait()
			close(done)
		}()
		timeout := time.NewTimer(x.cfg.Timeout)
		defer timeout.Stop()
		gaveUp := false
	wait:
		for {
			if !gaveUp && x.hopeless() {
				// An endpoint never reached, and failing still, is
				// not waited for: the recording stops now.
				gaveUp = true
				x.log.Warn("OTLP endpoint never answered: not waiting for it at stop", "failed attempts", x.failures.Load())
				x.cancel()
			}
			select {
			case <-done:
				break wait
			case <-x.failed:
			case <-timeout.C:
				x.cancel()
			}
		}
		x.cancel()
		// What the sender never took is dropped.
		x.qMu.Lock()
		for _, b := range x.queue {
			x.droppedShutdown.Add(uint64(b.samples))
			x.queuedSamples -= int64(b.samples)
			x.queuedBytes -= b.size()
		}
		x.queue = nil
		x.queueChangedLocked()
		x.qMu.Unlock()
		if err := x.client.close(); err != nil {
			x.log.Warn("closing the OTLP connection", "err", err)
		}
		st := x.Stats()
		if dropped := st.DroppedQueueFull + st.DroppedRejected + st.DroppedShutdown; dropped > 0 {
			x.log.Warn("OTLP export: samples not exported", "exported", st.ExportedSamples,
				"dropped (queue full)", st.DroppedQueueFull, "dropped (refused)", st.DroppedRejected,
				"dropped (at stop)", st.DroppedShutdown)
		}
	})
	return nil
}

// hopeless reports whether the endpoint never answered and an attempt
// has failed.
func (x *Exporter) hopeless() bool {
	return !x.answered.Load() && x.failures.Load() > 0
}

// Stats returns the exporter's counters.
func (x *Exporter) Stats() Stats {
	x.qMu.Lock()
	qs, qb := x.queuedSamples, x.queuedBytes
	x.qMu.Unlock()
	return Stats{
		ExportedSamples:  x.exported.Load(),
		DroppedQueueFull: x.droppedFull.Load(),
		DroppedRejected:  x.droppedRejected.Load(),
		DroppedShutdown:  x.droppedShutdown.Load(),
		FailedRequests:   x.failures.Load(),
		QueuedSamples:    qs,
		QueuedBytes:      qb,
	}
}

// SetHostID sets the resources' host.id: the recorder's instance id (its
// data directory's), so that a receiver tells apart two machines sending
// under one Node, from the next sample added on.
func (x *Exporter) SetHostID(id string) {
	x.encMu.Lock()
	x.enc.SetHostID(id)
	x.encMu.Unlock()
}
