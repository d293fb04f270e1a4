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
	lease   *shipper.Lease
	sh      *shipper.Shipper
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

// openShipping opens the bucket and checks it answers for this node's
// directory (a wrong credential or a missing bucket fails here, naming
// the bucket and the operation).
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
	if err := b.Check(ctx, bucketlayout.NodePrefix(node)); err != nil {
		b.Close()
		return nil, fmt.Errorf("--objstore-config %s: %w", configPath, err)
	}
	if abs, err := filepath.Abs(dataDir); err == nil {
		dataDir = abs
	}
	return &shipping{bucket: b, config: configPath, dataDir: dataDir, node: node}, nil
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
func (s *shipping) start(db *store.DB) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second+2*shipper.DefaultLeaseRenew)
	defer cancel()
	opts := shipper.Options{Bucket: s.bucket, BucketName: s.bucket.Name(), Dir: s.dataDir, Node: s.node, Instance: db.Identity().Instance, Logger: slog.Default()}
	lease, err := shipper.AcquireLease(ctx, shipper.LeaseOptions{Bucket: s.bucket, BucketName: s.bucket.Name(), Node: s.node,
		Instance: db.Identity().Instance, DataDir: s.dataDir, Logger: slog.Default()})
	switch {
	case errors.Is(err, bucket.ErrConditionalUnsupported):
		slog.Warn("this bucket's provider has no conditional writes: shipping without a node lease, so a second recorder under this node name is not detected",
			"bucket", s.bucket.Name(), "node", s.node)
	case err != nil:
		return err
	default:
		s.lease, opts.Lease = lease, lease
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
		s.wg.Go(func() { s.lease.Run(runCtx) })
	}
	return nil
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
	if s.lease == nil {
		return
	}
	if err := s.lease.Release(ctx); err != nil {
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
