package main

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/heatscope/heatscope/bucket"
	"github.com/heatscope/heatscope/metrics"
	"github.com/heatscope/heatscope/otlpreceive"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/shipper"
	"github.com/heatscope/heatscope/store"
)

// receiveFlags are the flags of heatscope receive.
type receiveFlags struct {
	data, grpcListen, httpListen, token, certFile, keyFile *string
	nodeAttr, objstore, retention, retentionSize           *string
	maxRequest, metricsAddr, memLimit                      *string
	insecure                                               *bool
	nodeRate, totalRate                                    *float64
	blockDuration                                          *time.Duration
}

func runReceive(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("receive", "receive [--data DIR] [--grpc-listen ADDR] [--http-listen ADDR] [--objstore-config FILE]", stderr)
	f := receiveFlags{
		data:          fs.String("data", "./heatscope-received", "data directory: each node's samples go into DIR/NODE, a recorder's data directory (serve it with heatscope serve --data DIR/NODE)"),
		grpcListen:    fs.String("grpc-listen", otlpreceive.DefaultGRPCAddr, "address of the OTLP gRPC receiver, host:port ('' for none; a non-loopback host needs --auth-token or --insecure-listen)"),
		httpListen:    fs.String("http-listen", otlpreceive.DefaultHTTPAddr, "address of the OTLP/HTTP receiver (profiles at "+otlpreceive.HTTPPath+"), host:port ('' for none)"),
		token:         fs.String("auth-token", "", "require \"Authorization: Bearer TOKEN\" on every request (default: $"+tokenEnv+"); give one to receive beyond this machine"),
		insecure:      fs.Bool("insecure-listen", false, "receive on a non-loopback address without --auth-token: anyone who can reach it writes profiles"),
		certFile:      fs.String("tls-cert-file", "", "serve both receivers over TLS with this PEM certificate (and --tls-key-file)"),
		keyFile:       fs.String("tls-key-file", "", "the PEM private key of --tls-cert-file"),
		nodeAttr:      fs.String("node-attribute", "host.name", "the resource attribute naming the node a sample was taken on"),
		objstore:      fs.String("objstore-config", "", "ship every node's sealed blocks to the bucket this YAML file describes, under the node's name (README, A fleet)"),
		retention:     fs.String("retention", "7d", "drop a node's blocks older than this (e.g. 7d, 36h; 0 keeps everything)"),
		retentionSize: fs.String("retention-size", "10GB", "drop a node's oldest blocks while they take more than this (0: no limit); every node has its own"),
		memLimit:      fs.String("memory-limit", "512MiB", "soft limit of the receiver's Go memory (runtime/debug.SetMemoryLimit): the garbage collector works harder near it ('0' for none; the GOMEMLIMIT environment variable overrides it)"),
		maxRequest:    fs.String("max-request-size", "16MiB", "refuse a request larger than this, uncompressed (413 / ResourceExhausted)"),
		nodeRate:      fs.Float64("node-rate", otlpreceive.DefaultNodeRate, "samples per second a node may send (bursts of two seconds' worth); past it: 429 / ResourceExhausted with when to retry"),
		totalRate:     fs.Float64("total-rate", otlpreceive.DefaultTotalRate, "samples per second all nodes together may send"),
		metricsAddr:   fs.String("metrics-listen", "", "serve Prometheus /metrics (heatscope_otlp_receive_*: requests, samples stored, refusals by reason, samples left out, nodes) on this address, with --auth-token's token when one is set ('' for none)"),
		blockDuration: fs.Duration("block-duration", 2*time.Minute, "how much time a node's head covers before it is written as a block (45s with --objstore-config)"),
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	return f.run(stdout)
}

// run checks the flags, serves until SIGINT or SIGTERM, then writes every
// node's head as a block and ships what is left.
func (f receiveFlags) run(stdout io.Writer) error {
	if *f.data == "" {
		return usageError{errors.New("--data '': the received samples need a data directory")}
	}
	if *f.grpcListen == "" && *f.httpListen == "" {
		return usageError{errors.New("--grpc-listen and --http-listen are both '': nothing to receive on")}
	}
	token := *f.token
	if token == "" {
		token = os.Getenv(tokenEnv)
	}
	for _, addr := range []string{*f.grpcListen, *f.httpListen} {
		if token == "" && !*f.insecure && addr != "" && !isLoopback(addr) {
			return usageError{fmt.Errorf("%s receives beyond this machine: give --auth-token (or $%s), or --insecure-listen to receive without authentication", addr, tokenEnv)}
		}
	}
	tlsConfig, err := f.tlsConfig()
	if err != nil {
		return err
	}
	maxRequest, err := parseSize(*f.maxRequest)
	if err != nil || maxRequest <= 0 || maxRequest > 1<<30 {
		return usageError{fmt.Errorf("--max-request-size %q: want a size from 1 byte to 1GiB, such as 16MiB", *f.maxRequest)}
	}
	memoryLimit, err := parseSize(*f.memLimit)
	if err != nil {
		return usageError{fmt.Errorf("--memory-limit: %w", err)}
	}
	if memoryLimit > 0 && os.Getenv("GOMEMLIMIT") == "" {
		defer debug.SetMemoryLimit(debug.SetMemoryLimit(memoryLimit))
	}
	nodes, err := f.nodes()
	if err != nil {
		return err
	}
	if nodes.bucket != nil {
		defer nodes.bucket.Close()
	}
	defer nodes.close(stdout)
	shipping, stopWatch := nodes.watchBucket()
	defer stopWatch()
	rcv, err := otlpreceive.New(otlpreceive.Options{Open: nodes.open, AuthToken: token, NodeAttribute: *f.nodeAttr,
		MaxRequestBytes: int(maxRequest), NodeRate: *f.nodeRate, TotalRate: *f.totalRate, Shipping: shipping, Logger: slog.Default()})
	if err != nil {
		return usageError{fmt.Errorf("--auth-token: %w", err)}
	}
	if *f.metricsAddr != "" {
		stopMetrics, err := serveReceiveMetrics(*f.metricsAddr, token, rcv)
		if err != nil {
			return err
		}
		defer stopMetrics()
	}
	grpcLn, httpLn, err := f.listen()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	scheme := "http"
	if tlsConfig != nil {
		scheme = "https"
	}
	if grpcLn != nil {
		slog.Info("receiving OTLP profiles over gRPC", "address", grpcLn.Addr().String(), "tls", tlsConfig != nil)
	}
	if httpLn != nil {
		slog.Info("receiving OTLP profiles over HTTP", "url", scheme+"://"+httpLn.Addr().String()+otlpreceive.HTTPPath)
	}
	slog.Info("each node's samples go into its own data directory", "data", *f.data, "node attribute", *f.nodeAttr)
	err = rcv.Serve(ctx, grpcLn, httpLn, tlsConfig)
	st := rcv.Stats()
	fmt.Fprintf(stdout, "received %d requests: %d samples stored from %d nodes, %d left out (named in the responses), %s\n",
		st.Requests, st.Samples, st.Nodes, st.Rejected, refusedSummary(st.Refused))
	return err
}

// nodes makes the data directory and, with --objstore-config, opens the
// bucket the nodes' blocks are shipped to; each node's store is opened
// when it first sends (receivedNodes.open), with the flags' retention.
func (f receiveFlags) nodes() (*receivedNodes, error) {
	nodes := &receivedNodes{dir: *f.data, opts: store.Options{BlockDuration: *f.blockDuration, PeriodNs: sample.PeriodOf(99), Logger: slog.Default()}}
	var err error
	if nodes.opts.Retention, err = parseDays(*f.retention); err != nil {
		return nil, usageError{fmt.Errorf("--retention: %w", err)}
	}
	if nodes.opts.RetentionSize, err = parseSize(*f.retentionSize); err != nil {
		return nil, usageError{fmt.Errorf("--retention-size: %w", err)}
	}
	if err := os.MkdirAll(*f.data, 0o755); err != nil {
		return nil, fmt.Errorf("--data: %w", err)
	}
	if *f.objstore != "" {
		if nodes.bucket, err = openReceiveBucket(*f.objstore); err != nil {
			return nil, err
		}
		nodes.config = *f.objstore
		nodes.opts.BlockDuration = shipBlockDuration
	}
	return nodes, nil
}

// listen opens the gRPC and HTTP receivers' listeners (nil where its flag
// is empty); when the second fails, the first is closed.
func (f receiveFlags) listen() (grpcLn, httpLn net.Listener, err error) {
	if *f.grpcListen != "" {
		if grpcLn, err = net.Listen("tcp", *f.grpcListen); err != nil {
			return nil, nil, fmt.Errorf("--grpc-listen: %w", err)
		}
	}
	if *f.httpListen != "" {
		if httpLn, err = net.Listen("tcp", *f.httpListen); err != nil {
			if grpcLn != nil {
				grpcLn.Close()
			}
			return nil, nil, fmt.Errorf("--http-listen: %w", err)
		}
	}
	return grpcLn, httpLn, nil
}

// refusedSummary says how many requests were refused and why, in
// otlpreceive.RefusalReasons' order: "3 requests refused (busy 1,
// rate-limited 2)", "0 requests refused".
func refusedSummary(refused map[string]uint64) string {
	var total uint64
	var parts []string
	for _, reason := range otlpreceive.RefusalReasons {
		if n := refused[reason]; n > 0 {
			total += n
			parts = append(parts, fmt.Sprintf("%s %d", reason, n))
		}
	}
	if total == 0 {
		return "0 requests refused"
	}
	return fmt.Sprintf("%d requests refused (%s)", total, strings.Join(parts, ", "))
}

// serveReceiveMetrics serves the receiver's /metrics on addr (behind the
// token, when there is one) until the returned function is called.
func serveReceiveMetrics(addr, token string, rcv *otlpreceive.Receiver) (func(), error) {
	if token == "" && !isLoopback(addr) {
		slog.Warn("--metrics-listen serves beyond this machine without a token", "address", addr)
	}
	m := metrics.New()
	if err := m.RegisterOTLPReceive(rcv); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen: %w", err)
	}
	h := m.Handler()
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		if token != "" && !bearerIs(r.Header.Get("Authorization"), token) {
			http.Error(w, "unauthorized: send the token as \"Authorization: Bearer TOKEN\"", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	slog.Info("serving the receiver's metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	return func() { srv.Close() }, nil
}

// bearerIs reports whether an Authorization value carries token,
// compared in constant time.
func bearerIs(header, token string) bool {
	scheme, got, ok := strings.Cut(header, " ")
	return ok && strings.EqualFold(scheme, "Bearer") && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}

// tlsConfig loads --tls-cert-file and --tls-key-file, if given.
func (f receiveFlags) tlsConfig() (*tls.Config, error) {
	if *f.certFile == "" && *f.keyFile == "" {
		return nil, nil
	}
	if *f.certFile == "" || *f.keyFile == "" {
		return nil, usageError{errors.New("--tls-cert-file and --tls-key-file go together")}
	}
	cert, err := tls.LoadX509KeyPair(*f.certFile, *f.keyFile)
	if err != nil {
		return nil, usageError{fmt.Errorf("--tls-cert-file %s: %w", *f.certFile, err)}
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}, nil
}

// openReceiveBucket opens the bucket the nodes' blocks are shipped to and
// checks that it answers.
func openReceiveBucket(configPath string) (*bucket.Bucket, error) {
	cfg, err := bucket.LoadConfig(configPath)
	if err != nil {
		return nil, usageError{fmt.Errorf("--objstore-config: %w", err)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bucket.Open(ctx, cfg, bucket.Options{Component: "receive"})
	if err != nil {
		return nil, err
	}
	if err := b.Check(ctx, ""); err != nil {
		b.Close()
		return nil, fmt.Errorf("--objstore-config %s: %w", configPath, err)
	}
	return b, nil
}

// receivedNodes opens each node's data directory (DIR/NODE) the first
// time it sends, and its shipping when there is a bucket, as record does
// for its one node.
type receivedNodes struct {
	dir    string
	opts   store.Options
	bucket *bucket.Bucket
	config string

	mu    sync.Mutex
	nodes []*receivedNode
}

type receivedNode struct {
	name string
	db   *store.DB
	ship *shipping
}

func (n *receivedNodes) open(node string) (otlpreceive.Store, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	opts := n.opts
	opts.Node, opts.Source = node, node
	dir := filepath.Join(n.dir, node)
	rn := &receivedNode{name: node}
	if n.bucket != nil {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return nil, err
		}
		rn.ship = &shipping{bucket: n.bucket, config: n.config, dataDir: abs, node: node}
		rn.ship.hook(&opts)
	}
	db, err := store.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", node, err)
	}
	rn.db = db
	if rn.ship != nil {
		if err := rn.ship.start(db); err != nil {
			rn.ship.halt()
			db.Close()
			return nil, fmt.Errorf("node %s: %w", node, err)
		}
	}
	slog.Info("a new node sends", "node", node, "data", dir)
	n.nodes = append(n.nodes, rn)
	return db, nil
}

// watchBucket asks the nodes' bucket every few seconds whether it
// answers, until stop is called, so that a bucket gone is named at once
// (the log, the metric, the answers), not when a block is due or a lease
// expires. shipping says what it found; it is nil without a bucket.
func (n *receivedNodes) watchBucket() (shipping func() error, stop func()) {
	if n.bucket == nil {
		return nil, func() {}
	}
	reach := shipper.NewReachability(n.bucket, n.bucket.Name(), "", 0, slog.Default())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		reach.Run(ctx)
	}()
	return reach.Err, func() { cancel(); <-done }
}

// close writes every node's head as a block and ships what is left.
func (n *receivedNodes) close(w io.Writer) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, rn := range n.nodes {
		if err := rn.db.Close(); err != nil {
			slog.Error("closing a node's data directory", "node", rn.name, "err", err)
		}
		if rn.ship != nil {
			fmt.Fprintf(w, "node %s: ", rn.name)
			rn.ship.finish(w)
		}
	}
	n.nodes = nil
}
