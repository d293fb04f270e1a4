package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"github.com/heatscope/heatscope/bucketstore"
	"github.com/heatscope/heatscope/metrics"
	"github.com/heatscope/heatscope/overview"
	"github.com/heatscope/heatscope/store"
	"github.com/heatscope/heatscope/web"
)

// defaultListen is where record and serve answer by default: this machine
// only.
const defaultListen = "127.0.0.1:7070"

// tokenEnv names the environment variable that can carry the auth token,
// which on the command line any user can read in ps.
const tokenEnv = "HEATSCOPE_AUTH_TOKEN"

// webFlags are the flags of the commands that serve the UI and API.
type webFlags struct {
	listen, token *string
	insecure      *bool
}

func addWebFlags(fs *flag.FlagSet, listenHelp string) webFlags {
	return webFlags{
		listen: fs.String("listen", defaultListen, listenHelp),
		token: fs.String("auth-token", "", "require this token on every request (default: $"+tokenEnv+
			"); give one to serve beyond this machine"),
		insecure: fs.Bool("insecure-listen", false, "serve a non-loopback --listen address without --auth-token: anyone who can reach it reads the profiles"),
	}
}

// server returns the web server for db with opts (metrics, health) and the
// flags' token. A non-loopback address without a token is refused unless
// --insecure-listen says so.
func (wf webFlags) server(db web.Reader, opts web.Options) (*web.Server, error) {
	token, err := wf.authToken()
	if err != nil {
		return nil, err
	}
	opts.AuthToken, opts.Logger = token, slog.Default()
	srv, err := web.New(db, opts)
	if err != nil {
		return nil, usageError{fmt.Errorf("--auth-token: %w", err)}
	}
	return srv, nil
}

// authToken returns the token of --auth-token or $HEATSCOPE_AUTH_TOKEN; it
// refuses to serve a non-loopback --listen address without one, unless
// --insecure-listen says so.
func (wf webFlags) authToken() (string, error) {
	token := *wf.token
	if token == "" {
		token = os.Getenv(tokenEnv)
	}
	if token == "" && !*wf.insecure && *wf.listen != "" && !isLoopback(*wf.listen) {
		return "", usageError{fmt.Errorf("--listen %s serves beyond this machine: give --auth-token (or $%s), "+
			"or --insecure-listen to serve without authentication", *wf.listen, tokenEnv)}
	}
	return token, nil
}

// isLoopback reports whether addr (host:port) names a loopback address:
// localhost or a loopback IP. An empty host is every address.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func runServe(args []string, stdout, stderr io.Writer) (err error) {
	fs := newFlagSet("serve", "serve [--data DIR] [--objstore-config FILE] [--listen ADDR] [--auth-token TOKEN]", stderr)
	qf := addQueryFlags(fs, "data directory to serve (opened read-only: no privileges needed)")
	config := addConfigFlag(fs)
	wf := addWebFlags(fs, "address to serve the UI and API on, host:port (a non-loopback host needs --auth-token or --insecure-listen)")
	heapDir := fs.String("heap-profile-dir", "", "on SIGUSR1, write the query service's own Go heap profile into this existing directory ('' for none)")
	memLimit := fs.String("memory-limit", defaultServeMemoryLimit, "soft limit of the query service's Go memory (runtime/debug.SetMemoryLimit): the garbage collector works harder near it, the caches stay within their own bounds ('0' for none; the GOMEMLIMIT environment variable overrides it)")
	warmColumns := fs.Int("overview-warm-columns", defaultOverviewWarmColumns, "at start and as blocks arrive, read in the background what the fleet overview of every node's whole span in this many columns needs (the UI asks for as many as fit its width, 3 px each), so that the first overview is as fast as the next ('0' for no warming)")
	origins, err := parseFlagsWithConfig(fs, config, args)
	if err != nil {
		return err
	}
	defer func() { err = origins.explain(err) }()
	if *warmColumns < 0 || *warmColumns > overview.MaxColumns {
		return usageError{fmt.Errorf("--overview-warm-columns: %d, want 0 (no warming) to %d", *warmColumns, overview.MaxColumns)}
	}
	memoryLimit, err := parseSize(*memLimit)
	if err != nil {
		return usageError{fmt.Errorf("--memory-limit: %w", err)}
	}
	if memoryLimit > 0 && os.Getenv("GOMEMLIMIT") == "" {
		defer debug.SetMemoryLimit(debug.SetMemoryLimit(memoryLimit))
	}
	if *wf.listen == "" {
		return usageError{errors.New("--listen: give an address like " + defaultListen)}
	}
	if *heapDir != "" {
		hp, err := startHeapProfiler(*heapDir)
		if err != nil {
			return usageError{err}
		}
		defer hp.stop()
	}
	db, src, closeBucket, err := qf.open("serve", true)
	if err != nil {
		return err
	}
	defer closeBucket()
	defer db.Close()
	// One budget for the per-CPU steps of the fleet overview's zooms and
	// of the timelines of every thread: the cells'.
	cells := overview.NewCells(0, 0)
	db.KeepStepsIn(cells.Timelines())
	opts, err := serveOptions(db, src, cells)
	if err != nil {
		return err
	}
	every := refreshInterval
	if src != nil {
		every = bucketRefreshInterval
	}
	srv, err := wf.server(db, opts)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	warm := func() {}
	if *warmColumns > 0 {
		w := &overview.Warmer{Store: db, Cells: cells, Columns: *warmColumns, Logger: slog.Default()}
		warm = func() { w.Pass(ctx) }
	}
	go refreshEvery(ctx, db, every, warm)
	defer stop()
	ln, err := listen(*wf.listen)
	if err != nil {
		return err
	}
	return srv.Serve(ctx, ln)
}

// serveOptions are the web server's options of a query service over db
// and, when not nil, the bucket src: its metrics (the store's, the fleet
// overview's cells, the bucket's reads), its health, the overview's cells
// (which its warming shares) and the bucket's outage.
func serveOptions(db queryStore, src *bucketstore.Source, cells *overview.Cells) (web.Options, error) {
	m := metrics.New()
	if err := m.RegisterStore(db); err != nil {
		return web.Options{}, err
	}
	if err := m.RegisterOverview(func() overview.Stats { return cells.Stats(db) }); err != nil {
		return web.Options{}, err
	}
	opts := web.Options{Metrics: m.Handler(), Health: db.Health, ObserveQuery: m.ObserveQuery, Overview: cells}
	if src == nil {
		return opts, nil
	}
	if err := m.RegisterBucketReads(src.Stats); err != nil {
		return web.Options{}, err
	}
	opts.Outage = func() *web.Outage {
		o := src.Outage()
		if o == nil {
			return nil
		}
		return &web.Outage{Storage: src.String(), Since: o.Since, Err: o.Err, Listed: o.Listed}
	}
	return opts, nil
}

// listen listens on addr for the UI and API. An address another program
// holds is an error that says so and names the flag that moves it (and
// make run's LISTEN=, which passes it on).
func listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("--listen %s: the address is in use (another heatscope record or serve?): "+
			"choose a free one with --listen, e.g. --listen 127.0.0.1:7071 (make run LISTEN=127.0.0.1:7071)", addr)
	}
	if err != nil {
		return nil, fmt.Errorf("--listen: %w", err)
	}
	return ln, nil
}

// serveWhileRecording serves db on the --listen address until the returned
// function is called (it waits for the requests under way). When the
// address was not given and the default one is taken, it only warns:
// recording matters more than the UI.
func serveWhileRecording(db *store.DB, wf webFlags, explicit bool, opts web.Options) (stop func(), err error) {
	if db == nil || *wf.listen == "" {
		return func() {}, nil
	}
	srv, err := wf.server(db, opts)
	if err != nil {
		return nil, err
	}
	ln, err := listen(*wf.listen)
	if err != nil {
		if explicit {
			return nil, err
		}
		slog.Warn("not serving the UI and API, recording anyway", "err", err)
		return func() {}, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ctx, ln); err != nil {
			slog.Error("the UI and API stopped", "err", err)
		}
	}()
	return sync.OnceFunc(func() { cancel(); <-done }), nil
}

// defaultServeMemoryLimit is serve's soft Go memory limit: with the
// caches' own bounds (store.Options, bucketstore.Options) it keeps a
// query service over a bucket under 256 MB of RSS whatever the fleet's
// size (docs/benchmarks.md, bench/fleet).
const defaultServeMemoryLimit = "192MiB"

// refreshInterval is how often serve picks up the blocks a recorder writes.
const refreshInterval = 5 * time.Second

// bucketRefreshInterval is how often serve reads a bucket's index (one
// GET), or lists the bucket when the index is missing or older than
// bucketstore's IndexMaxAge (15 s; a LIST of the nodes and two per node),
// for the blocks and events nodes uploaded: either way a block is
// queryable within 15 s + 10 s of its upload (docs/design.md).
const bucketRefreshInterval = 10 * time.Second

// defaultOverviewWarmColumns is the columns of the fleet overview serve
// warms by default: the UI's in a window 1300 px wide (as bench/overview
// drives it).
const defaultOverviewWarmColumns = 362

// refreshEvery keeps a read-only store in step with the recorder writing it:
// new blocks appear, compacted and expired ones go. It calls warm at once
// and after every refresh, in its own goroutine: one block at a time, the
// queries being served go first.
func refreshEvery(ctx context.Context, db queryStore, every time.Duration, warm func()) {
	warm()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := db.Refresh(); err != nil {
				slog.Warn("refresh the blocks", "err", err)
			}
			warm()
		}
	}
}
