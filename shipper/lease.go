package shipper

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/heatscope/heatscope/bucket"
	"github.com/heatscope/heatscope/bucketlayout"
)

// Lease defaults: a holder renews its lease every DefaultLeaseRenew and
// is live while its last renewal is younger than DefaultLeaseTTL, so a
// recorder that died frees its node name within 90 s.
const (
	DefaultLeaseTTL   = 90 * time.Second
	DefaultLeaseRenew = 15 * time.Second
)

// LeaseBucket is what a node lease needs of the bucket: conditional
// writes (a *bucket.Bucket).
type LeaseBucket interface {
	ReadVersioned(ctx context.Context, name string) (data []byte, etag string, err error)
	CreateIfAbsent(ctx context.Context, name string, data []byte) (etag string, err error)
	ReplaceIfVersion(ctx context.Context, name string, data []byte, etag string) (newEtag string, err error)
	IsObjNotFoundErr(err error) bool
}

// LeaseRecord is the lease object's content (store/FORMAT.md, "Node
// leases").
type LeaseRecord struct {
	Version int    `json:"version"`
	Node    string `json:"node"`
	// Instance is the holder's data directory's instance id.
	Instance string `json:"instance"`
	// Session is random per process: a restart of one instance is a new
	// session.
	Session  string `json:"session"`
	Hostname string `json:"hostname,omitempty"`
	DataDir  string `json:"dataDir,omitempty"`
	BootID   string `json:"bootId,omitempty"`
	Pid      int    `json:"pid,omitempty"`
	// Started is when the holder took the lease, Renewed when it last
	// renewed it (Unix ms, the holder's clock).
	Started int64 `json:"started"`
	Renewed int64 `json:"renewed"`
	// TTLMs is how long after Renewed the holder counts as live;
	// RenewMs how often it renews.
	TTLMs   int64 `json:"ttlMs"`
	RenewMs int64 `json:"renewMs"`
	// Released is set by a holder that stopped cleanly: the node is free.
	Released bool `json:"released,omitempty"`
}

// ParseLease decodes a lease object: version 1, an instance id, times
// and a time to live that are not negative.
func ParseLease(raw []byte) (LeaseRecord, error) {
	var r LeaseRecord
	if err := json.Unmarshal(raw, &r); err != nil {
		return LeaseRecord{}, err
	}
	switch {
	case r.Version != 1:
		return LeaseRecord{}, fmt.Errorf("version %d, this heatscope reads 1", r.Version)
	case r.Instance == "":
		return LeaseRecord{}, errors.New("no instance")
	case r.Started < 0 || r.Renewed < 0 || r.TTLMs < 0 || r.RenewMs < 0:
		return LeaseRecord{}, errors.New("a negative time")
	}
	return r, nil
}

// live reports whether the holder counts as recording at now.
func (r *LeaseRecord) live(now time.Time) bool {
	return !r.Released && now.Sub(time.UnixMilli(r.Renewed)) < time.Duration(r.TTLMs)*time.Millisecond
}

// describe names the holder for a person: its instance, host, data
// directory and start.
func (r *LeaseRecord) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "instance %s", r.Instance)
	if r.Hostname != "" {
		fmt.Fprintf(&b, " on host %s", r.Hostname)
	}
	if r.DataDir != "" {
		fmt.Fprintf(&b, ", data directory %s", r.DataDir)
	}
	if r.Pid != 0 {
		fmt.Fprintf(&b, ", pid %d", r.Pid)
	}
	if r.Started != 0 {
		fmt.Fprintf(&b, ", started %s", time.UnixMilli(r.Started).UTC().Format(time.RFC3339))
	}
	return b.String()
}

// NodeTakenError is another live recorder holding the node's lease.
type NodeTakenError struct {
	Bucket string
	Node   string
	Holder LeaseRecord
	// Age is how long ago the holder last renewed the lease.
	Age time.Duration
	// SameInstance is a holder with this directory's own instance id on
	// another machine or directory: a copy of the data directory.
	SameInstance bool
}

func (e *NodeTakenError) Error() string {
	ttl := time.Duration(e.Holder.TTLMs) * time.Millisecond
	if e.SameInstance {
		return fmt.Sprintf("bucket %s: node %s is being recorded by a copy of this data directory (%s; lease renewed %s ago): "+
			"a cloned machine or a copied directory shares its instance id; remove identity.json from the copy's data directory "+
			"and give it its own name with --node NAME (or $NODE_NAME)",
			e.Bucket, e.Node, e.Holder.describe(), e.Age.Round(time.Second))
	}
	return fmt.Sprintf("bucket %s: node %s is being recorded by another heatscope (%s; lease renewed %s ago): "+
		"two recorders under one node name would mix their samples; give this one its own name with --node NAME (or $NODE_NAME), "+
		"or stop the other (its lease expires %s after its last renewal)",
		e.Bucket, e.Node, e.Holder.describe(), e.Age.Round(time.Second), ttl)
}

// LeaseOptions configure a node lease.
type LeaseOptions struct {
	Bucket LeaseBucket
	// BucketName names the bucket in messages.
	BucketName string
	Node       string
	// Instance is the data directory's instance id; DataDir its path.
	Instance, DataDir string
	// TTL and Renew default to DefaultLeaseTTL and DefaultLeaseRenew.
	TTL, Renew time.Duration
	Logger     *slog.Logger
	// Now is the clock (default time.Now); Hostname and BootID name this
	// machine (default: os.Hostname and the kernel's boot id).
	Now      func() time.Time
	Hostname string
	BootID   string
}

// Lease is a recorder's hold on its node name in the bucket: one object,
// <node>/lease.json, created with a conditional write and renewed with
// one, so two recorders of one node name cannot both hold it. A shipper
// uploads only while Held says so.
type Lease struct {
	opts LeaseOptions
	log  *slog.Logger
	name string
	me   LeaseRecord

	mu   sync.Mutex
	etag string
	// renewed is when this process last wrote the lease (its clock);
	// lost why it does not hold it (nil while it does).
	renewed time.Time
	lost    error
}

// AcquireLease takes the node's lease, or fails with a *NodeTakenError
// naming the live recorder that holds it. The same instance restarting on
// its own directory takes it back at once; a holder that stopped cleanly
// or has not renewed within its TTL is taken over (logged). A holder with
// this directory's instance id elsewhere (a copy) is watched for up to
// two of its renewal intervals: renewed, it is live, and the error says
// so; not, it is taken over.
func AcquireLease(ctx context.Context, opts LeaseOptions) (*Lease, error) {
	if opts.Bucket == nil || opts.Node == "" || opts.Instance == "" {
		return nil, errors.New("lease: a bucket, a node and an instance are needed")
	}
	if opts.TTL <= 0 {
		opts.TTL = DefaultLeaseTTL
	}
	if opts.Renew <= 0 || opts.Renew >= opts.TTL {
		opts.Renew = min(DefaultLeaseRenew, opts.TTL/3)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Hostname == "" {
		opts.Hostname, _ = os.Hostname()
	}
	if opts.BootID == "" {
		b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
		opts.BootID = strings.TrimSpace(string(b))
	}
	var session [8]byte
	rand.Read(session[:])
	l := &Lease{opts: opts, log: opts.Logger, name: bucketlayout.LeaseKey(opts.Node), me: LeaseRecord{
		Version: 1, Node: opts.Node, Instance: opts.Instance, Session: hex.EncodeToString(session[:]),
		Hostname: opts.Hostname, DataDir: opts.DataDir, BootID: opts.BootID, Pid: os.Getpid(),
		TTLMs: opts.TTL.Milliseconds(), RenewMs: opts.Renew.Milliseconds()}}
	if err := l.take(ctx, true); err != nil {
		return nil, err
	}
	return l, nil
}

// record is this holder's record as of now.
func (l *Lease) record(now time.Time) []byte {
	r := l.me
	if r.Started == 0 {
		r.Started = now.UnixMilli()
	}
	r.Renewed = now.UnixMilli()
	b, _ := json.Marshal(r)
	return b
}

// take reads the lease and takes it when this holder may: absent,
// released, expired, or its own instance's. atStart allows watching a
// copy of this instance (AcquireLease); later a renewal that finds one
// gives up at once.
func (l *Lease) take(ctx context.Context, atStart bool) error {
	for attempt := 0; ; attempt++ {
		err := l.takeOnce(ctx, atStart)
		if !errors.Is(err, bucket.ErrConditionFailed) || attempt == 3 {
			return err
		}
		// Another writer got between the read and the write: read again.
	}
}

func (l *Lease) takeOnce(ctx context.Context, atStart bool) error {
	now := l.opts.Now()
	raw, etag, err := l.opts.Bucket.ReadVersioned(ctx, l.name)
	if l.opts.Bucket.IsObjNotFoundErr(err) {
		tag, err := l.opts.Bucket.CreateIfAbsent(ctx, l.name, l.record(now))
		if err != nil {
			return fmt.Errorf("take node %s's lease: %w", l.opts.Node, err)
		}
		l.held(tag, now)
		return nil
	}
	if err != nil {
		return fmt.Errorf("read node %s's lease: %w", l.opts.Node, err)
	}
	cur, err := ParseLease(raw)
	if err != nil {
		// Not a lease this heatscope knows: a newer version's, or damage.
		// Do not overwrite what may be a live holder's.
		return fmt.Errorf("bucket %s: node %s's lease %s is unreadable (%v): a newer heatscope may hold it; delete it if no recorder runs as %s",
			l.opts.BucketName, l.opts.Node, l.name, err, l.opts.Node)
	}
	age := now.Sub(time.UnixMilli(cur.Renewed))
	switch {
	case cur.Instance == l.me.Instance && cur.Session == l.me.Session:
		// Our own write whose answer was lost, or a renewal another
		// write of ours overtook.
	case atStart && cur.Instance == l.me.Instance && cur.BootID == l.me.BootID && cur.DataDir == l.me.DataDir:
		// This directory on this boot: the process before this one (the
		// data directory's lock says none other runs). Later, another
		// session of this instance holding it means this one was
		// superseded.
		l.log.Info("taking back this data directory's lease", "node", l.opts.Node, "previous", cur.describe())
	case !cur.live(now):
		if !cur.Released {
			l.log.Warn("taking over an expired node lease: its recorder stopped renewing it", "node", l.opts.Node,
				"previous", cur.describe(), "renewedAgo", age.Round(time.Second))
		}
	case cur.Instance == l.me.Instance && atStart:
		// A copy of this directory, or this machine's run before a
		// reboot: live if it renews.
		wait := 2*time.Duration(cur.RenewMs)*time.Millisecond + time.Second
		l.log.Warn("node lease held by this instance id elsewhere: watching whether it is renewed", "node", l.opts.Node,
			"holder", cur.describe(), "for", wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		_, etag2, err := l.opts.Bucket.ReadVersioned(ctx, l.name)
		if l.opts.Bucket.IsObjNotFoundErr(err) {
			return l.takeOnce(ctx, false)
		}
		if err != nil {
			return fmt.Errorf("read node %s's lease: %w", l.opts.Node, err)
		}
		if etag2 != etag {
			return &NodeTakenError{Bucket: l.opts.BucketName, Node: l.opts.Node, Holder: cur, Age: age, SameInstance: true}
		}
		// Not renewed while watched: its holder is gone; take it over
		// (the write fails if it renews meanwhile).
	default:
		return &NodeTakenError{Bucket: l.opts.BucketName, Node: l.opts.Node, Holder: cur, Age: age, SameInstance: cur.Instance == l.me.Instance}
	}
	tag, err := l.opts.Bucket.ReplaceIfVersion(ctx, l.name, l.record(now), etag)
	if err != nil {
		return fmt.Errorf("take node %s's lease: %w", l.opts.Node, err)
	}
	l.held(tag, now)
	return nil
}

// held records a successful write of the lease.
func (l *Lease) held(etag string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.me.Started == 0 {
		l.me.Started = now.UnixMilli()
	}
	l.etag, l.renewed, l.lost = etag, now, nil
}

// Held returns nil while this recorder holds the node's lease: it wrote
// it within the TTL and no one took it over. Otherwise the error says why
// (a *NodeTakenError when another recorder took it).
func (l *Lease) Held() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost != nil {
		return l.lost
	}
	if age := l.opts.Now().Sub(l.renewed); age >= l.opts.TTL {
		return fmt.Errorf("bucket %s: node %s's lease not renewed for %s (the bucket did not answer): not shipping until it is",
			l.opts.BucketName, l.opts.Node, age.Round(time.Second))
	}
	return nil
}

// Renew renews the lease once; when it was lost, it tries to take it
// again (another holder may have expired since).
func (l *Lease) Renew(ctx context.Context) error {
	l.mu.Lock()
	etag, lost := l.etag, l.lost
	l.mu.Unlock()
	if lost == nil {
		now := l.opts.Now()
		tag, err := l.opts.Bucket.ReplaceIfVersion(ctx, l.name, l.record(now), etag)
		if err == nil {
			l.held(tag, now)
			return nil
		}
		if !errors.Is(err, bucket.ErrConditionFailed) {
			return fmt.Errorf("renew node %s's lease: %w", l.opts.Node, err)
		}
	}
	err := l.take(ctx, false)
	if err == nil && lost != nil {
		l.log.Info("took the node's lease back: shipping resumes", "node", l.opts.Node)
	}
	var taken *NodeTakenError
	if errors.As(err, &taken) {
		l.mu.Lock()
		first := l.lost == nil
		l.lost = err
		l.mu.Unlock()
		if first {
			l.log.Error("lost the node's lease to another recorder: shipping stops until it is free", "node", l.opts.Node, "holder", taken.Holder.describe())
		}
	}
	return err
}

// Run renews the lease every Renew until ctx is done. Each renewal gets
// the renewal interval to answer: a bucket that hangs (a stopped server
// whose kernel still accepts connections) is named in the log within two
// intervals, not once the client's own timeouts give up (30 s a try,
// three tries: the lease's whole TTL). The first renewal after failures
// logs that the bucket answers again.
func (l *Lease) Run(ctx context.Context) {
	t := time.NewTicker(l.opts.Renew)
	defer t.Stop()
	var failingSince time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			rctx, cancel := context.WithTimeout(ctx, l.opts.Renew)
			err := l.Renew(rctx)
			cancel()
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				if failingSince.IsZero() {
					failingSince = time.Now()
				}
				l.log.Warn("node lease not renewed", "node", l.opts.Node, "failing for", time.Since(failingSince).Round(time.Second), "err", err)
			case !failingSince.IsZero():
				l.log.Info("node lease renewed again: the bucket answers", "node", l.opts.Node, "unrenewed for", time.Since(failingSince).Round(time.Second))
				failingSince = time.Time{}
			}
		}
	}
}

// Release marks the lease released, if this recorder still holds it, so
// that another may take the node name at once.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	etag, lost := l.etag, l.lost
	l.mu.Unlock()
	if lost != nil {
		return nil
	}
	r := l.me
	r.Renewed, r.Released = l.opts.Now().UnixMilli(), true
	b, _ := json.Marshal(r)
	if _, err := l.opts.Bucket.ReplaceIfVersion(ctx, l.name, b, etag); err != nil && !errors.Is(err, bucket.ErrConditionFailed) {
		return fmt.Errorf("release node %s's lease: %w", l.opts.Node, err)
	}
	l.mu.Lock()
	l.lost = fmt.Errorf("node %s's lease released", l.opts.Node)
	l.mu.Unlock()
	return nil
}
