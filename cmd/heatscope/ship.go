package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heatscope/heatscope/bucket"
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
	nodeNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,252}$`)
	labelKeyRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_./-]{0,127}$`)
	labelValRe = regexp.MustCompile(`^[A-Za-z0-9_.:/-]{0,128}$`)
)

// nodeRule says what a node name may be.
const nodeRule = "a node name is 1 to 253 letters, digits, '.', '_' or '-', starting with a letter or digit"

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
	if !nodeNameRe.MatchString(node) {
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

// shipping is record's shipper, running beside the recorder.
type shipping struct {
	bucket *bucket.Bucket
	sh     *shipper.Shipper
	stop   context.CancelFunc
	wg     sync.WaitGroup
}

// openShipping opens the bucket, checks it answers for this node's
// directory (a wrong credential or a missing bucket fails here, naming
// the bucket and the operation), and reads what was shipped before.
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
	if err := b.Check(ctx, node+"/"); err != nil {
		b.Close()
		return nil, fmt.Errorf("--objstore-config %s: %w", configPath, err)
	}
	sh, err := shipper.New(shipper.Options{Bucket: b, BucketName: b.Name(), Dir: dataDir, Node: node, Logger: slog.Default()})
	if err != nil {
		b.Close()
		return nil, err
	}
	slog.Info("shipping blocks and events", "bucket", b.Name(), "node", node)
	return &shipping{bucket: b, sh: sh}, nil
}

// hook wires the store to the shipper.
func (s *shipping) hook(opts *store.Options) {
	opts.Unshipped = s.sh.Unshipped
	opts.OnBlock = func(store.Meta) { s.sh.Notify() }
}

// collector returns the shipper's metrics, with the store's count of
// blocks lost before they were shipped.
func (s *shipping) collector(db *store.DB) prometheus.Collector {
	return s.sh.Collector(func() uint64 { return db.Stats().UnshippedDropped })
}

// start runs the shipper until close or finish.
func (s *shipping) start() {
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	s.wg.Go(func() { s.sh.Run(ctx) })
}

// finish stops the shipper, then uploads what the store wrote at its
// close (the last head), within shipFinalTimeout, and says what is left.
func (s *shipping) finish(w io.Writer) {
	s.halt()
	ctx, cancel := context.WithTimeout(context.Background(), shipFinalTimeout)
	defer cancel()
	err := s.sh.Sync(ctx)
	st := s.sh.Stats()
	fmt.Fprintf(w, "bucket %s: %d blocks and %d event uploads shipped, %d bytes", s.bucket.Name(), st.BlocksShipped, st.EventUploads, st.Bytes)
	if err != nil {
		fmt.Fprintf(w, "; %d blocks not yet shipped (the next start ships them): %v", st.Pending, err)
	}
	fmt.Fprintln(w)
}

// halt stops the shipper's loop; closing twice is harmless.
func (s *shipping) halt() {
	if s.stop != nil {
		s.stop()
		s.wg.Wait()
		s.stop = nil
	}
}

// close stops the shipper and releases the bucket.
func (s *shipping) close() {
	s.halt()
	s.bucket.Close()
}
