package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/heatscope/heatscope/bucket"
	"github.com/heatscope/heatscope/bucketcompact"
	"github.com/heatscope/heatscope/metrics"
)

// runCompact maintains a bucket: merges each node's small blocks, applies
// the bucket's retention, deletes marked blocks after the delay and writes
// the bucket index. One compactor per bucket.
func runCompact(args []string, stdout, stderr io.Writer) error {
	cf, err := parseCompactFlags(args, stderr)
	if err != nil {
		return err
	}
	opts, err := cf.options()
	if err != nil {
		return err
	}
	cfg, err := bucket.LoadConfig(*cf.objCfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	bkt, err := bucket.Open(ctx, cfg, bucket.Options{Component: "compact"})
	if err != nil {
		return err
	}
	defer bkt.Close()
	if err := awaitBucket(ctx, bkt, !*cf.once); err != nil {
		return err
	}
	c, err := bucketcompact.New(bkt, bkt.Name(), opts)
	if err != nil {
		return usageError{err}
	}
	if *cf.listen != "" {
		closeMetrics, err := serveCompactMetrics(c, *cf.listen)
		if err != nil {
			return err
		}
		defer closeMetrics()
	}
	// A single pass refuses a bucket another compactor holds; a long-running
	// compactor waits, and takes over should the holder stop renewing.
	if err := c.Lock(ctx, !*cf.once); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Unlock(uctx); err != nil {
			slog.Warn("release the compactor lock", "err", err)
		}
	}()
	slog.Info("holding the bucket's compactor lock", "bucket", bkt.Name(), "ttl", *cf.lockTTL)
	held, lost := context.WithCancelCause(ctx)
	defer lost(nil)
	go func() {
		if err := c.KeepLock(held); err != nil {
			lost(err)
		}
	}()
	return compactPasses(held, c, bkt.Name(), cf, stdout)
}

// compactFlags are compact's flags.
type compactFlags struct {
	objCfg, workDir, ranges, retention, retentionSize, listen            *string
	once                                                                 *bool
	interval, indexInterval, shipDelay, deleteDelay, partialAge, lockTTL *time.Duration
}

// parseCompactFlags defines compact's flags and parses args into them.
func parseCompactFlags(args []string, stderr io.Writer) (*compactFlags, error) {
	fs := flag.NewFlagSet("compact", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cf := &compactFlags{}
	cf.objCfg = fs.String("objstore-config", "", "the bucket's objstore config file (YAML; see README \"A fleet\")")
	cf.workDir = fs.String("work-dir", filepath.Join(os.TempDir(), "heatscope-compact"), "local directory for the blocks being merged (needs about twice the largest merged block)")
	cf.once = fs.Bool("once", false, "run one pass and exit")
	cf.interval = fs.Duration("interval", 5*time.Minute, "time between passes")
	cf.indexInterval = fs.Duration("index-interval", defaultIndexInterval, "between passes, rewrite the bucket index from a fresh listing this often, so that query services reading it follow new uploads within 30 s (0: only at each pass)")
	cf.ranges = fs.String("ranges", "2h,24h", "widths of the aligned windows whose blocks are merged into one, smallest first")
	cf.shipDelay = fs.Duration("ship-delay", bucketcompact.DefaultShipDelay, "how long after a window ends its blocks may still arrive; merged only after that")
	cf.retention = fs.String("retention", "0", "delete blocks whose newest sample is older than this (e.g. 30d; 0 keeps them)")
	cf.retentionSize = fs.String("retention-size", "0", "delete the oldest blocks while the bucket's blocks take more (e.g. 5TB; 0: no limit)")
	cf.deleteDelay = fs.Duration("delete-delay", bucketcompact.DefaultDeleteDelay, "how long a block marked for deletion stays readable; queries in flight finish within it")
	cf.partialAge = fs.Duration("partial-age", bucketcompact.DefaultPartialAge, "delete partial uploads (data without meta.json) this old")
	cf.lockTTL = fs.Duration("lock-ttl", bucketcompact.DefaultLockTTL, "the compactor renews the bucket's lock every quarter of this; another compactor takes over once it has not been renewed for this long")
	cf.listen = fs.String("listen", "127.0.0.1:7472", "address of /metrics ('' for none; with --once, none unless given)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	listenGiven := false
	fs.Visit(func(f *flag.Flag) { listenGiven = listenGiven || f.Name == "listen" })
	if *cf.once && !listenGiven {
		*cf.listen = "" // a single pass serves no metrics unless asked
	}
	if fs.NArg() > 0 {
		return nil, usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	return cf, nil
}

// options checks the flags: a wrong one is a usage error that names it.
func (cf *compactFlags) options() (bucketcompact.Options, error) {
	opts := bucketcompact.Options{WorkDir: *cf.workDir, ShipDelay: *cf.shipDelay, PartialAge: *cf.partialAge, LockTTL: *cf.lockTTL}
	if *cf.lockTTL < 4*time.Second {
		return opts, usageError{errors.New("--lock-ttl must be at least 4s: the lock is renewed every quarter of it")}
	}
	if *cf.objCfg == "" {
		return opts, usageError{errors.New("--objstore-config is required: the bucket to maintain")}
	}
	for _, r := range strings.Split(*cf.ranges, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(r))
		if err != nil || d <= 0 {
			return opts, usageError{fmt.Errorf("--ranges: %q is not a duration like 2h", r)}
		}
		opts.Ranges = append(opts.Ranges, d)
	}
	var err error
	if opts.Retention, err = parseDays(*cf.retention); err != nil {
		return opts, usageError{fmt.Errorf("--retention: %w", err)}
	}
	if opts.RetentionBytes, err = parseSize(*cf.retentionSize); err != nil {
		return opts, usageError{fmt.Errorf("--retention-size: %w", err)}
	}
	if *cf.deleteDelay <= 0 {
		return opts, usageError{errors.New("--delete-delay must be positive: queries in flight read marked blocks until then")}
	}
	opts.DeleteDelay = *cf.deleteDelay
	if !*cf.once && *cf.interval <= 0 {
		return opts, usageError{errors.New("--interval must be positive (or use --once)")}
	}
	if *cf.indexInterval < 0 {
		return opts, usageError{errors.New("--index-interval must not be negative (0: the index is written at each pass only)")}
	}
	return opts, nil
}

// serveCompactMetrics serves the compactor's /metrics on addr until the
// returned function is called.
func serveCompactMetrics(c *bucketcompact.Compactor, addr string) (closeFn func(), err error) {
	m := metrics.New()
	if err := m.Register(c.Collector()); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	slog.Info("compactor metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	return func() { srv.Close() }, nil
}

// compactPasses runs compaction passes (one with --once, printing its
// report) until ctx is done or the lock is lost, keeping the bucket index
// fresh between them.
func compactPasses(ctx context.Context, c *bucketcompact.Compactor, bucketName string, cf *compactFlags, stdout io.Writer) error {
	for {
		start := time.Now()
		rep, err := c.Run(ctx)
		if err != nil {
			if cause := context.Cause(ctx); errors.Is(cause, bucketcompact.ErrLockLost) {
				return cause
			}
			if *cf.once || ctx.Err() != nil || errors.Is(err, bucketcompact.ErrLockLost) {
				return err
			}
			slog.Error("compaction pass failed; retrying at the next interval", "bucket", bucketName, "err", err)
		} else {
			slog.Info("compaction pass", "bucket", bucketName, "took", time.Since(start).Round(time.Millisecond), "nodes", rep.Nodes, "blocks", rep.Blocks,
				"bytes", rep.Bytes, "merges", rep.Merges, "mergedParents", rep.MergedParents, "marked", rep.Marked, "deleted", rep.Deleted,
				"partialDeleted", rep.PartialDeleted, "corrupt", len(rep.Corrupt), "indexBytes", rep.IndexBytes)
			for _, c := range rep.Corrupt {
				slog.Warn("corrupt block skipped", "bucket", bucketName, "block", c)
			}
			if *cf.once {
				fmt.Fprintf(stdout, "%d nodes, %d blocks (%d bytes); merged %d blocks into %d; marked %d for deletion; deleted %d (and %d partial uploads); %d corrupt\n",
					rep.Nodes, rep.Blocks, rep.Bytes, rep.MergedParents, rep.Merges, sum(rep.Marked), rep.Deleted, rep.PartialDeleted, len(rep.Corrupt))
				for _, c := range rep.Corrupt {
					fmt.Fprintf(stdout, "corrupt: %s\n", c)
				}
				return nil
			}
		}
		if err := updateIndexUntil(ctx, c, bucketName, start.Add(*cf.interval), *cf.indexInterval); err != nil {
			if cause := context.Cause(ctx); errors.Is(cause, bucketcompact.ErrLockLost) {
				return cause
			}
			if errors.Is(err, bucketcompact.ErrLockLost) {
				return err
			}
			return nil
		}
	}
}

// bucketRetry is how often a long-running compactor started while its
// bucket does not answer tries it again; bucketCheckTimeout bounds each
// try.
const (
	bucketRetry        = 10 * time.Second
	bucketCheckTimeout = 10 * time.Second
)

// awaitBucket checks that the bucket answers and may be listed. A refusal
// (bucket.Permanent) is an error at once; a bucket that does not answer
// is one too unless wait is set, when it is tried again every bucketRetry
// until it answers or ctx is done (nil then: the compactor stops).
func awaitBucket(ctx context.Context, bkt *bucket.Bucket, wait bool) error {
	for logged := false; ; logged = true {
		checkCtx, cancel := context.WithTimeout(ctx, bucketCheckTimeout)
		err := bkt.Check(checkCtx, "")
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err == nil || !wait || bucket.Permanent(err) {
			return err
		}
		if !logged {
			slog.Warn("the bucket does not answer: waiting for it", "bucket", bkt.Name(), "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(bucketRetry):
		}
	}
}

// defaultIndexInterval is how often the compactor rewrites the bucket index
// between passes: with serve's bucket refresh (bucketRefreshInterval) and
// the age up to which it trusts an index (bucketstore's IndexMaxAge), a
// new block reaches the query services within 30 s.
const defaultIndexInterval = 10 * time.Second

// updateIndexUntil rewrites the bucket index every interval, counted from
// one rewrite's start to the next (so that the index's listing is never
// more than the interval plus one listing old), until the next pass is
// due; it returns ctx's error when the compactor stops. An update that
// fails is logged: query services list the bucket meanwhile.
func updateIndexUntil(ctx context.Context, c *bucketcompact.Compactor, name string, next time.Time, interval time.Duration) error {
	began := time.Now()
	for {
		until := next
		if t := began.Add(interval); interval > 0 && t.Before(next) {
			until = t
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(until)):
		}
		if !time.Now().Before(next) {
			return nil
		}
		began = time.Now()
		if _, err := c.UpdateIndex(ctx); errors.Is(err, bucketcompact.ErrLockLost) {
			return err
		} else if err != nil && ctx.Err() == nil {
			slog.Warn("bucket index update failed; query services list the bucket until the next one", "bucket", name, "err", err)
		}
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
