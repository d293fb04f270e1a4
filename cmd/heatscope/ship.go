package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heatscope/heatscope/bucket"
	"github.com/heatscope/heatscope/bucketlayout"
	"github.com/heatscope/heatscope/shipper"
	"github.com/heatscope/heatscope/store"
)

// shipBlockDuration is record's --block-duration when it ships to a
// bucket and none is given: a sample reaches the bucket at most this long
// after it was taken, plus the write and upload of its block (docs/design.md).
const shipBlockDuration = 45 * time.Second

// shipFinalTimeout bounds the upload of the last block when record stops.
const shipFinalTimeout = 15 * time.Second

// shipFlags are record's flags for a fleet: where to ship, and the node.
type shipFlags struct {
	objstore *string
	node     *string
	labels   stringList
}

func addShipFlags(fs *flag.FlagSet) *shipFlags {
	f := &shipFlags{
		objstore: fs.String("objstore-config", "", "ship every sealed block and the events to the bucket this YAML file describes (README, A fleet: provider, bucket, endpoint, prefix, TLS; credentials from the environment, files or the instance role)"),
		node:     fs.String("node", "", "this machine's name in a fleet: the bucket directory its blocks go to and the node every sample carries (default: $NODE_NAME, else the hostname)"),
	}
	fs.Var(&f.labels, "node-label", "a label of this node, key=value (cluster, zone, instance type), kept in every block's meta; repeatable")
	return f
}

var (
	labelKeyRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_./-]{0,127}$`)
	labelValRe = regexp.MustCompile(`^[A-Za-z0-9_.:/-]{0,128}$`)
)

// nodeRule says what a node name may be.
const nodeRule = store.NodeNameRule

// nodeName returns --node, else $NODE_NAME, else the machine's name
// (store.DefaultNodeName: the hostname, or on a machine without one its
// machine id), checked: it is a directory name in the bucket. set says
// --node was given (on the command line or in --config): given empty, it
// is an error, not the hostname.
func (f *shipFlags) nodeName(set bool) (string, error) {
	node, from := *f.node, "--node"
	if set && node == "" {
		return "", usageError{fmt.Errorf("--node '': %s (leave --node out for $NODE_NAME, else the hostname)", nodeRule)}
	}
	if node == "" {
		node, from = os.Getenv("NODE_NAME"), "$NODE_NAME"
	}
	if node == "" {
		name, why, err := store.SystemNodeNameSource.DefaultNodeName()
		if err != nil {
			return "", usageError{err}
		}
		node, from = name, why
		slog.Info("node name", "node", node, "from", why)
	}
	if !store.ValidNodeName(node) {
		return "", usageError{fmt.Errorf("%s %q: %s; give one with --node or $NODE_NAME", from, node, nodeRule)}
	}
	return node, nil
}

// nodeLabels parses the --node-label flags.
func (f *shipFlags) nodeLabels() (map[string]string, error) {
	if len(f.labels) == 0 {
		return nil, nil
	}
	labels := map[string]string{}
	for _, kv := range f.labels {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !labelKeyRe.MatchString(k) || !labelValRe.MatchString(v) {
			return nil, usageError{fmt.Errorf("--node-label %q: want key=value (key: letters, digits, '.', '_', '/', '-'; value: also ':', up to 128)", kv)}
		}
		if _, dup := labels[k]; dup {
			return nil, usageError{fmt.Errorf("--node-label %s given twice", k)}
		}
		labels[k] = v
	}
	return labels, nil
}

// shipping is record's shipper, running beside the recorder, and the
// node's lease it ships under.
type shipping struct {
	bucket  *bucket.Bucket
	config  string
	dataDir string
	node    string
	// unanswered is why the bucket did not answer at start: recording
	// starts anyway, and the lease is taken once it answers.
	unanswered error
	lease      *lateLease
	sh         *shipper.Shipper
	stop       context.CancelFunc
	wg         sync.WaitGroup
}

// lateLeaseRetry is how often a recorder whose bucket did not answer at
// start tries again to take its node's lease.
const lateLeaseRetry = 10 * time.Second

// lateLease is the node's lease, taken at start or, when the bucket did
// not answer then, once it does: until then nothing ships, and Held says
// why.
type lateLease struct {
	mu    sync.Mutex
	lease *shipper.Lease
	why   error
}

// Held returns nil while the lease is taken and held (shipper.Options.Lease).
func (l *lateLease) Held() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lease == nil {
		return l.why
	}
	return l.lease.Held()
}

func (l *lateLease) taken() *shipper.Lease {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lease
}

func (l *lateLease) set(lease *shipper.Lease, why error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lease, l.why = lease, why
}

// openShipping opens the bucket and checks it answers for this node's
// directory (a wrong credential or a missing bucket fails here, naming
// the bucket and the operation). A bucket that does not answer (an
// outage, bucket.Permanent says which errors are not) does not stop the
// recording: its blocks wait in the data directory until it answers.
func openShipping(configPath, dataDir, node string) (*shipping, error) {
	cfg, err := bucket.LoadConfig(configPath)
	if err != nil {
		return nil, usageError{fmt.Errorf("--objstore-config: %w", err)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bucket.Open(ctx, cfg, bucket.Options{Component: "record"})
	if err != nil {
		return nil, err
	}
	var unanswered error
	if err := b.Check(ctx, bucketlayout.NodePrefix(node)); err != nil {
		if bucket.Permanent(err) {
			b.Close()
			return nil, fmt.Errorf("--objstore-config %s: %w", configPath, err)
		}
		unanswered = err
		slog.Warn("the bucket does not answer: recording into the data directory, shipping once it answers (the node's lease is taken then)",
			"bucket", b.Name(), "node", node, "retry", lateLeaseRetry, "err", err)
	}
	if abs, err := filepath.Abs(dataDir); err == nil {
		dataDir = abs
	}
	return &shipping{bucket: b, config: configPath, dataDir: dataDir, node: node, unanswered: unanswered}, nil
}

// hook wires the store to the shipper, which start creates once the
// store is open: until then every block counts as unshipped.
func (s *shipping) hook(opts *store.Options) {
	opts.Unshipped = func(m *store.Meta) bool { return s.sh == nil || s.sh.Unshipped(m) }
	opts.OnBlock = func(store.Meta) {
		if s.sh != nil {
			s.sh.Notify()
		}
	}
}

// collector returns the shipper's metrics, with the store's count of
// blocks lost before they were shipped.
func (s *shipping) collector(db *store.DB) prometheus.Collector {
	return s.sh.Collector(func() uint64 { return db.Stats().UnshippedDropped })
}

// start takes the node's lease in the bucket, under the data directory's
// instance id (a live recorder of another instance under this node name
// refuses the start, naming it), reads what was shipped before, and runs
// the shipper and the lease's renewals until close or finish.
//
// When the bucket did not answer at start, or does not while the lease is
// taken, recording goes on: the shipper waits, and the lease is tried
// again every lateLeaseRetry until taken (a live recorder holding the
// node name then is logged as an error, and nothing ships).
func (s *shipping) start(db *store.DB) error {
	opts := shipper.Options{Bucket: s.bucket, BucketName: s.bucket.Name(), Dir: s.dataDir, Node: s.node, Instance: db.Identity().Instance, Logger: slog.Default()}
	leaseOpts := shipper.LeaseOptions{Bucket: s.bucket, BucketName: s.bucket.Name(), Node: s.node,
		Instance: db.Identity().Instance, DataDir: s.dataDir, Logger: slog.Default()}
	s.lease = &lateLease{}
	late := false
	if s.unanswered != nil {
		s.lease.set(nil, fmt.Errorf("node %s's lease not taken yet: the bucket has not answered since the start (%w)", s.node, s.unanswered))
		opts.Lease, late = s.lease, true
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second+2*shipper.DefaultLeaseRenew)
		lease, err := shipper.AcquireLease(ctx, leaseOpts)
		cancel()
		var taken *shipper.NodeTakenError
		switch {
		case errors.Is(err, bucket.ErrConditionalUnsupported):
			slog.Warn("this bucket's provider has no conditional writes: shipping without a node lease, so a second recorder under this node name is not detected",
				"bucket", s.bucket.Name(), "node", s.node)
			s.lease = nil
		case errors.As(err, &taken), err != nil && bucket.Permanent(err):
			return err
		case err != nil:
			slog.Warn("the bucket does not answer: recording into the data directory, shipping once it answers (the node's lease is taken then)",
				"bucket", s.bucket.Name(), "node", s.node, "retry", lateLeaseRetry, "err", err)
			s.lease.set(nil, fmt.Errorf("node %s's lease not taken yet: %w", s.node, err))
			opts.Lease, late = s.lease, true
		default:
			s.lease.set(lease, nil)
			opts.Lease = s.lease
		}
	}
	sh, err := shipper.New(opts)
	if err != nil {
		return err
	}
	s.sh = sh
	slog.Info("shipping blocks and events", "bucket", s.bucket.Name(), "node", s.node, "instance", db.Identity().Instance)
	runCtx, stop := context.WithCancel(context.Background())
	s.stop = stop
	s.wg.Go(func() { sh.Run(runCtx) })
	if s.lease != nil {
		s.wg.Go(func() {
			if late && !s.takeLate(runCtx, leaseOpts) {
				return
			}
			s.lease.taken().Run(runCtx)
		})
	}
	return nil
}

// takeLate tries to take the node's lease every lateLeaseRetry until it
// has it (then wakes the shipper) or ctx is done; it says which.
func (s *shipping) takeLate(ctx context.Context, opts shipper.LeaseOptions) bool {
	var logged string
	for {
		tctx, cancel := context.WithTimeout(ctx, 30*time.Second+2*shipper.DefaultLeaseRenew)
		lease, err := shipper.AcquireLease(tctx, opts)
		cancel()
		if err == nil {
			s.lease.set(lease, nil)
			slog.Info("the bucket answers: took the node's lease, shipping what waited", "bucket", s.bucket.Name(), "node", s.node)
			s.sh.Notify()
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		var taken *shipper.NodeTakenError
		if errors.As(err, &taken) || bucket.Permanent(err) {
			s.lease.set(nil, err)
			if msg := err.Error(); msg != logged {
				slog.Error("the node's lease cannot be taken: recording goes on, nothing ships", "node", s.node, "err", err)
				logged = msg
			}
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(lateLeaseRetry):
		}
	}
}

// finish stops the shipper, then uploads what the store wrote at its
// close (the last head), within shipFinalTimeout, says what is left, and
// releases the node's lease.
func (s *shipping) finish(w io.Writer) {
	s.halt()
	if s.sh == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), shipFinalTimeout)
	defer cancel()
	err := s.sh.Sync(ctx)
	st := s.sh.Stats()
	fmt.Fprintf(w, "bucket %s: %d blocks and %d event uploads shipped, %d bytes", s.bucket.Name(), st.BlocksShipped, st.EventUploads, st.Bytes)
	if err != nil {
		fmt.Fprintf(w, "; %d blocks not yet shipped (the next start ships them): %v", st.Pending, err)
	}
	fmt.Fprintln(w)
	s.release(ctx)
}

// release frees the node's lease, so that another recorder may take the
// node name at once.
func (s *shipping) release(ctx context.Context) {
	if s.lease == nil || s.lease.taken() == nil {
		return
	}
	if err := s.lease.taken().Release(ctx); err != nil {
		slog.Warn("node lease not released: it expires by itself", "node", s.node, "ttl", shipper.DefaultLeaseTTL, "err", err)
	}
}

// halt stops the shipper's loop and the lease's renewals; calling it
// twice is harmless.
func (s *shipping) halt() {
	if s.stop != nil {
		s.stop()
		s.wg.Wait()
		s.stop = nil
	}
}

// close stops the shipper, releases the lease (if finish did not) and
// the bucket.
func (s *shipping) close() {
	s.halt()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	s.release(ctx)
	cancel()
	s.bucket.Close()
}
