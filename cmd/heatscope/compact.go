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
	fs := flag.NewFlagSet("compact", flag.ContinueOnError)
	fs.SetOutput(stderr)
	objCfg := fs.String("objstore-config", "", "the bucket's objstore config file (YAML; see README \"A fleet\")")
	workDir := fs.String("work-dir", filepath.Join(os.TempDir(), "heatscope-compact"), "local directory for the blocks being merged (needs about twice the largest merged block)")
	once := fs.Bool("once", false, "run one pass and exit")
	interval := fs.Duration("interval", 5*time.Minute, "time between passes")
	indexInterval := fs.Duration("index-interval", defaultIndexInterval, "between passes, rewrite the bucket index from a fresh listing this often, so that query services reading it follow new uploads within 30 s (0: only at each pass)")
	ranges := fs.String("ranges", "2h,24h", "widths of the aligned windows whose blocks are merged into one, smallest first")
	shipDelay := fs.Duration("ship-delay", bucketcompact.DefaultShipDelay, "how long after a window ends its blocks may still arrive; merged only after that")
	retention := fs.String("retention", "0", "delete blocks whose newest sample is older than this (e.g. 30d; 0 keeps them)")
	retentionSize := fs.String("retention-size", "0", "delete the oldest blocks while the bucket's blocks take more (e.g. 5TB; 0: no limit)")
	deleteDelay := fs.Duration("delete-delay", bucketcompact.DefaultDeleteDelay, "how long a block marked for deletion stays readable; queries in flight finish within it")
	partialAge := fs.Duration("partial-age", bucketcompact.DefaultPartialAge, "delete partial uploads (data without meta.json) this old")
	lockTTL := fs.Duration("lock-ttl", bucketcompact.DefaultLockTTL, "the compactor renews the bucket's lock every quarter of this; another compactor takes over once it has not been renewed for this long")
	listen := fs.String("listen", "127.0.0.1:7472", "address of /metrics ('' for none; with --once, none unless given)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	listenGiven := false
	fs.Visit(func(f *flag.Flag) { listenGiven = listenGiven || f.Name == "listen" })
	if *once && !listenGiven {
		*listen = "" // a single pass serves no metrics unless asked
	}
	if *lockTTL < 4*time.Second {
		return usageError{errors.New("--lock-ttl must be at least 4s: the lock is renewed every quarter of it")}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	if *objCfg == "" {
		return usageError{errors.New("--objstore-config is required: the bucket to maintain")}
	}
	opts := bucketcompact.Options{WorkDir: *workDir, ShipDelay: *shipDelay, PartialAge: *partialAge, LockTTL: *lockTTL}
	for _, r := range strings.Split(*ranges, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(r))
		if err != nil || d <= 0 {
			return usageError{fmt.Errorf("--ranges: %q is not a duration like 2h", r)}
		}
		opts.Ranges = append(opts.Ranges, d)
	}
	var err error
	if opts.Retention, err = parseDays(*retention); err != nil {
		return usageError{fmt.Errorf("--retention: %w", err)}
	}
	if opts.RetentionBytes, err = parseSize(*retentionSize); err != nil {
		return usageError{fmt.Errorf("--retention-size: %w", err)}
	}
	if *deleteDelay <= 0 {
		return usageError{errors.New("--delete-delay must be positive: queries in flight read marked blocks until then")}
	}
	opts.DeleteDelay = *deleteDelay
	if !*once && *interval <= 0 {
		return usageError{errors.New("--interval must be positive (or use --once)")}
	}
	if *indexInterval < 0 {
		return usageError{errors.New("--index-interval must not be negative (0: the index is written at each pass only)")}
	}
	cfg, err := bucket.LoadConfig(*objCfg)
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
	if err := awaitBucket(ctx, bkt, !*once); err != nil {
		return err
	}
	c, err := bucketcompact.New(bkt, bkt.Name(), opts)
	if err != nil {
		return usageError{err}
	}
	if *listen != "" {
		m := metrics.New()
		if err := m.Register(c.Collector()); err != nil {
			return err
		}
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			return fmt.Errorf("--listen: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", m.Handler())
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(ln)
		defer srv.Close()
		slog.Info("compactor metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	}
	// A single pass refuses a bucket another compactor holds; a long-running
	// compactor waits, and takes over should the holder stop renewing.
	if err := c.Lock(ctx, !*once); err != nil {
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
	slog.Info("holding the bucket's compactor lock", "bucket", bkt.Name(), "ttl", *lockTTL)
	held, lost := context.WithCancelCause(ctx)
	defer lost(nil)
	go func() {
		if err := c.KeepLock(held); err != nil {
			lost(err)
		}
	}()
	ctx = held
	for {
		start := time.Now()
		rep, err := c.Run(ctx)
		if err != nil {
			if cause := context.Cause(ctx); errors.Is(cause, bucketcompact.ErrLockLost) {
				return cause
			}
			if *once || ctx.Err() != nil || errors.Is(err, bucketcompact.ErrLockLost) {
				return err
			}
			slog.Error("compaction pass failed; retrying at the next interval", "bucket", bkt.Name(), "err", err)
		} else {
			slog.Info("compaction pass", "bucket", bkt.Name(), "took", time.Since(start).Round(time.Millisecond), "nodes", rep.Nodes, "blocks", rep.Blocks,
				"bytes", rep.Bytes, "merges", rep.Merges, "mergedParents", rep.MergedParents, "marked", rep.Marked, "deleted", rep.Deleted,
				"partialDeleted", rep.PartialDeleted, "corrupt", len(rep.Corrupt), "indexBytes", rep.IndexBytes)
			for _, c := range rep.Corrupt {
				slog.Warn("corrupt block skipped", "bucket", bkt.Name(), "block", c)
			}
			if *once {
				fmt.Fprintf(stdout, "%d nodes, %d blocks (%d bytes); merged %d blocks into %d; marked %d for deletion; deleted %d (and %d partial uploads); %d corrupt\n",
					rep.Nodes, rep.Blocks, rep.Bytes, rep.MergedParents, rep.Merges, sum(rep.Marked), rep.Deleted, rep.PartialDeleted, len(rep.Corrupt))
				for _, c := range rep.Corrupt {
					fmt.Fprintf(stdout, "corrupt: %s\n", c)
				}
				return nil
			}
		}
		if err := updateIndexUntil(ctx, c, bkt.Name(), start.Add(*interval), *indexInterval); err != nil {
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
