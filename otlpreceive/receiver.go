// Package otlpreceive is heatscope's OTLP profiles receiver: it takes
// ExportProfilesServiceRequests over gRPC and HTTP (the OpenTelemetry
// Collector's ports and paths), reads them with otlpprofile's mapping, and
// appends every sample, with its own timestamp and period, to the store of
// the node it was taken on (the resource's host.name, or a configured
// attribute), as a recorder would. What the stores are (a data directory
// per node, shipped to a bucket or not) is the caller's: Options.Open.
//
// A request is checked whole before any of it is stored: a malformed or
// hostile one is refused (gRPC InvalidArgument, HTTP 400) and stores
// nothing; one over the size limit is refused (ResourceExhausted, 413); a
// node sending over its rate, or all nodes over the total rate, is told to
// retry later (ResourceExhausted with RetryInfo, 429 with Retry-After); and
// at most MaxInFlight requests are read at once, so that memory stays
// bounded however many senders there are.
package otlpreceive

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"golang.org/x/time/rate"

	"github.com/heatscope/heatscope/otlpprofile"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// Defaults of Options.
const (
	// DefaultMaxRequestBytes bounds a request's body, uncompressed.
	DefaultMaxRequestBytes = 16 << 20
	// DefaultMaxInFlight is how many requests are read at once.
	DefaultMaxInFlight = 4
	// DefaultNodeRate is a node's samples per second: 1000 Hz on 100
	// CPUs, ten times heatscope's 99 Hz on 100 CPUs.
	DefaultNodeRate = 100_000
	// DefaultTotalRate is all nodes' samples per second together.
	DefaultTotalRate = 1_000_000
	// HolderTTL is how long a node name stays with the sender (host.id)
	// that last sent under it: another host.id under the same name is
	// refused meanwhile, as a second recorder is by a node's lease.
	HolderTTL = 90 * time.Second
)

// HTTPPath is where profiles are posted over HTTP: the OpenTelemetry
// Collector's OTLP receiver's path for profiles (v0.165.0, the signal's
// development version).
const HTTPPath = "/v1development/profiles"

// hostIDKey is the resource attribute that tells two machines apart when
// they send under one host.name (the semantic conventions' host.id: the
// machine id).
const hostIDKey = "host.id"

// Store is where one node's samples go: a *store.DB satisfies it, with
// Close added by the caller.
type Store interface {
	// Append stores one sample; it weighs the period last set.
	Append(*sample.Sample) error
	// SetPeriod sets the period of the samples appended from now on.
	SetPeriod(periodNs int64)
}

// Options configure a Receiver.
type Options struct {
	// Open returns the store of a node the first time a sample of it
	// arrives (node is a valid node name: store.ValidNodeName).
	Open func(node string) (Store, error)
	// AuthToken, when not empty, is required on every request as
	// "Authorization: Bearer TOKEN" (gRPC: the authorization metadata).
	AuthToken string
	// NodeAttribute is the resource attribute naming a sample's node;
	// "" is host.name.
	NodeAttribute string
	// MaxRequestBytes bounds a request, uncompressed (default
	// DefaultMaxRequestBytes).
	MaxRequestBytes int
	// MaxInFlight bounds the requests read at once (default
	// DefaultMaxInFlight); past it a request is told to retry.
	MaxInFlight int
	// NodeRate and TotalRate are samples per second, per node and for
	// all nodes (defaults DefaultNodeRate, DefaultTotalRate); each may
	// burst to two seconds' worth.
	NodeRate, TotalRate float64
	// Shipping, when set, says whether what is stored reaches the
	// bucket: nil while it does, else why not (the bucket does not
	// answer). While it fails, every accepted request's answer names it
	// (its partial success, rejecting nothing: the samples are stored,
	// their shipping waits), and so does Stats.
	Shipping func() error
	// Logger receives refusals and store errors (default slog.Default).
	Logger *slog.Logger
	// Now is the clock (default time.Now), for tests.
	Now func() time.Time
}

// Stats count what a Receiver did.
type Stats struct {
	// Requests is how many export requests arrived, Samples how many
	// samples were stored.
	Requests, Samples uint64
	// Refused counts refused requests by reason: invalid, too-large,
	// rate-limited, busy, unauthenticated, conflict, store, cancelled.
	Refused map[string]uint64
	// Rejected is how many samples of accepted requests were left out
	// (no period, a time out of range, a profile that is not CPU time),
	// as the responses' partial success said.
	Rejected uint64
	// AppendErrors counts samples a store failed to add.
	AppendErrors uint64
	// Nodes is how many nodes have sent.
	Nodes int
	// Ships says the receiver ships to a bucket (Options.Shipping is
	// set); ShippingErr is why what it stores does not reach the bucket
	// now, "" while it does.
	Ships       bool
	ShippingErr string
}

// Receiver ingests OTLP profiles requests into the nodes' stores.
type Receiver struct {
	opts      Options
	log       *slog.Logger
	tokenHash [sha256.Size]byte
	inflight  chan struct{}
	total     *rate.Limiter

	mu    sync.Mutex
	nodes map[string]*node

	requests, samples, rejected, appendErrors atomic.Uint64
	refusedMu                                 sync.Mutex
	refused                                   map[string]uint64
	// lastLogged and unlogged are, per refusal kind, when one was last
	// logged and how many were refused since without a line.
	lastLogged map[string]time.Time
	unlogged   map[string]uint64
}

// node is one node's store, its rate, and who sends under its name.
type node struct {
	mu       sync.Mutex
	store    Store
	periodNs int64
	limiter  *rate.Limiter
	holder   string // host.id of the last sender, "" when none said
	lastSeen time.Time
}

// New returns a Receiver; it serves nothing until its handlers are
// mounted (HTTPHandler, RegisterGRPC) or Serve runs.
func New(opts Options) (*Receiver, error) {
	if opts.Open == nil {
		return nil, errors.New("otlpreceive: no Open")
	}
	for _, c := range []byte(opts.AuthToken) {
		if c <= ' ' || c == 0x7f {
			return nil, errors.New("auth token: spaces and control characters cannot be sent in a header")
		}
	}
	if opts.MaxRequestBytes <= 0 {
		opts.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = DefaultMaxInFlight
	}
	if opts.NodeRate <= 0 {
		opts.NodeRate = DefaultNodeRate
	}
	if opts.TotalRate <= 0 {
		opts.TotalRate = DefaultTotalRate
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Receiver{
		opts: opts, log: opts.Logger,
		tokenHash:  sha256.Sum256([]byte(opts.AuthToken)),
		inflight:   make(chan struct{}, opts.MaxInFlight),
		total:      rate.NewLimiter(rate.Limit(opts.TotalRate), burst(opts.TotalRate)),
		nodes:      map[string]*node{},
		refused:    map[string]uint64{},
		lastLogged: map[string]time.Time{},
		unlogged:   map[string]uint64{},
	}, nil
}

// burst is two seconds' worth of a rate.
func burst(perSecond float64) int { return int(min(2*perSecond, math.MaxInt32)) }

// Stats returns the counts so far.
func (r *Receiver) Stats() Stats {
	st := Stats{Requests: r.requests.Load(), Samples: r.samples.Load(), Rejected: r.rejected.Load(),
		AppendErrors: r.appendErrors.Load(), Refused: map[string]uint64{}}
	r.refusedMu.Lock()
	for k, v := range r.refused {
		st.Refused[k] = v
	}
	r.refusedMu.Unlock()
	r.mu.Lock()
	st.Nodes = len(r.nodes)
	r.mu.Unlock()
	if r.opts.Shipping != nil {
		st.Ships = true
		if err := r.opts.Shipping(); err != nil {
			st.ShippingErr = err.Error()
		}
	}
	return st
}

// refusal is why a request was refused, for both protocols.
type refusal struct {
	kind       string // a Stats.Refused key
	msg        string
	retryAfter time.Duration // rate-limited and busy: when to try again
}

func (e *refusal) Error() string { return e.msg }

// RefusalReasons are the keys of Stats.Refused.
var RefusalReasons = []string{refInvalid, refTooLarge, refRateLimited, refBusy, refUnauthenticated, refConflict, refStore, refCancelled}

// Refusal kinds.
const (
	refInvalid         = "invalid"
	refTooLarge        = "too-large"
	refRateLimited     = "rate-limited"
	refBusy            = "busy"
	refUnauthenticated = "unauthenticated"
	refConflict        = "conflict"
	refStore           = "store"
	// refCancelled is a request its sender gave up on (cancelled, or
	// its deadline passed) before it was stored: nothing is stored, as
	// the sender sends it again.
	refCancelled = "cancelled"
)

func (r *Receiver) refuse(kind, format string, args ...any) *refusal {
	return &refusal{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// logEvery is how often refusals of one kind are logged: a flood of
// them is one line per interval, saying how many it stands for.
const logEvery = 10 * time.Second

// count records a refusal and logs it, at most once per logEvery for
// each kind (with how many were refused since the last line).
func (r *Receiver) count(e *refusal, peer string) {
	now := r.opts.Now()
	r.refusedMu.Lock()
	r.refused[e.kind]++
	last, quiet := r.lastLogged[e.kind], r.unlogged[e.kind]
	if !last.IsZero() && now.Sub(last) < logEvery {
		r.unlogged[e.kind]++
		r.refusedMu.Unlock()
		return
	}
	r.lastLogged[e.kind], r.unlogged[e.kind] = now, 0
	r.refusedMu.Unlock()
	r.log.Warn("OTLP request refused", "reason", e.kind, "peer", peer, "err", e.msg, "refused unlogged before it", quiet)
}

// authorized reports whether an Authorization value carries the token.
func (r *Receiver) authorized(header string) bool {
	if r.opts.AuthToken == "" {
		return true
	}
	scheme, tok, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	h := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(h[:], r.tokenHash[:]) == 1
}

// acquire takes one of the in-flight slots, or says to retry.
func (r *Receiver) acquire() (release func(), err *refusal) {
	select {
	case r.inflight <- struct{}{}:
		return func() { <-r.inflight }, nil
	default:
		e := r.refuse(refBusy, "the receiver is reading %d requests already: retry later", r.opts.MaxInFlight)
		e.retryAfter = time.Second
		return nil, e
	}
}

// result is what an accepted request stored and left out.
type result struct {
	stored   int
	rejected int
	why      string // what was left out or not shipped, for the partial success
}

// response is the OTLP answer to an accepted request: a partial success
// naming what was left out, if anything was.
func (res result) response() pprofileotlp.ExportResponse {
	resp := pprofileotlp.NewExportResponse()
	if res.rejected > 0 || res.why != "" {
		resp.PartialSuccess().SetRejectedProfiles(int64(res.rejected))
		resp.PartialSuccess().SetErrorMessage(res.why)
	}
	return resp
}

// plan is what a request holds, per node, checked before anything is
// stored.
type plan struct {
	nodes    map[string]*nodePlan
	rejected map[string]int // reason -> samples left out
	// groups are the request's samples' periods, each with its epoch:
	// how many times the sample's CPU had changed period before it
	// (periodEpochs). They are stored in this order, one group after
	// another, so that a node's store changes period once for each
	// change of its recorder's rate, not at every sample of one CPU
	// interleaved with another's still at the other period.
	groups []periodGroup
}

// periodGroup is one period of a request's samples in one epoch of its
// CPUs' period changes.
type periodGroup struct {
	epoch    int
	periodNs int64
}

// periodEpochs follows each CPU's period through a request, in its order.
type periodEpochs struct {
	last  map[nodeCPU]int64
	epoch map[nodeCPU]int
}

type nodeCPU struct {
	node string
	cpu  uint32
}

func newPeriodEpochs() *periodEpochs {
	return &periodEpochs{last: map[nodeCPU]int64{}, epoch: map[nodeCPU]int{}}
}

// of returns s's group: its period, and how many times its CPU's period
// changed before it in the request. A recorder's rate change reaches its
// CPUs at slightly different times, and a request's samples come in time
// order across CPUs: stored group by group, each CPU's samples stay in
// their order, and a change is one cut of the store's head.
func (e *periodEpochs) of(s *sample.Sample) periodGroup {
	k := nodeCPU{s.Node, s.CPU}
	if p, ok := e.last[k]; ok && p != s.PeriodNs {
		e.epoch[k]++
	}
	e.last[k] = s.PeriodNs
	return periodGroup{epoch: e.epoch[k], periodNs: s.PeriodNs}
}

type nodePlan struct {
	samples int
	hostID  string
}

// ingest checks p whole, then stores it.
func (r *Receiver) ingest(ctx context.Context, p pprofile.Profiles) (result, *refusal) {
	r.requests.Add(1)
	now := r.opts.Now()
	pl, rep, err := r.plan(p, now)
	if err != nil {
		return result{}, err
	}
	if err := r.admit(pl, now); err != nil {
		return result{}, err
	}
	if err := ctx.Err(); err != nil {
		return result{}, r.refuse(refCancelled, "the sender gave up on the request before it was stored (%v): nothing stored", err)
	}
	stored, appendErrs := r.store(p, now, pl.groups)
	res := result{stored: stored}
	var why []string
	for reason, n := range pl.rejected {
		res.rejected += n
		why = append(why, fmt.Sprintf("%d samples %s", n, reason))
	}
	for _, s := range rep.Skipped {
		why = append(why, s.String()+": left out")
	}
	if rep.NoCPU > 0 {
		why = append(why, fmt.Sprintf("%d samples did not say which CPU they ran on (cpu.logical_number): left out, "+
			"since heatscope keeps each CPU's time apart and theirs would be added to one CPU's", rep.NoCPU))
		res.rejected += rep.NoCPU
	}
	if rep.TruncatedStacks > 0 {
		why = append(why, fmt.Sprintf("%d stacks cut to their %d leaf-most frames", rep.TruncatedStacks, otlpprofile.MaxStackFrames))
	}
	if appendErrs > 0 {
		why = append(why, fmt.Sprintf("%d samples could not be stored (see the receiver's log)", appendErrs))
		res.rejected += appendErrs
	}
	slices.Sort(why)
	if r.opts.Shipping != nil && stored > 0 {
		if err := r.opts.Shipping(); err != nil {
			why = append(why, fmt.Sprintf("%d samples stored on the receiver, not shipped yet: %v; they are shipped when it answers", stored, err))
		}
	}
	res.why = strings.Join(why, "; ")
	r.samples.Add(uint64(stored))
	r.rejected.Add(uint64(res.rejected))
	return res, nil
}

// accepts reports whether a sample can be stored truthfully, and if not
// why not: a sample without a period weighs nothing known; one without a
// time, or more than an hour ahead of this clock, has no place in the
// timeline.
func accepts(s *sample.Sample, now time.Time) (ok bool, why string) {
	switch {
	case s.PeriodNs <= 0:
		return false, "had no CPU period (a count without a period type): their CPU time is not known"
	case s.Time <= 0:
		return false, "had no timestamp"
	case s.Time > now.Add(time.Hour).UnixNano():
		return false, "were timed more than an hour ahead of the receiver's clock"
	}
	return true, ""
}

// plan reads p once, storing nothing: it checks every index (Decode),
// every node name and who sends under it, and counts the samples per
// node for the rates.
func (r *Receiver) plan(p pprofile.Profiles, now time.Time) (*plan, otlpprofile.Report, *refusal) {
	pl := &plan{nodes: map[string]*nodePlan{}, rejected: map[string]int{}}
	hostIDs, herr := r.hostIDs(p)
	if herr != nil {
		return nil, otlpprofile.Report{}, herr
	}
	var badNode string
	epochs, seen := newPeriodEpochs(), map[periodGroup]bool{}
	rep, err := otlpprofile.Decode(p, otlpprofile.DecodeOptions{NodeAttribute: r.opts.NodeAttribute, RequireCPU: true}, func(s *sample.Sample) error {
		if ok, why := accepts(s, now); !ok {
			pl.rejected[why]++
			return nil
		}
		if g := epochs.of(s); !seen[g] {
			seen[g] = true
			pl.groups = append(pl.groups, g)
		}
		np := pl.nodes[s.Node]
		if np == nil {
			if !store.ValidNodeName(s.Node) {
				badNode = s.Node
				return errBadNode
			}
			np = &nodePlan{hostID: hostIDs[s.Node]}
			pl.nodes[s.Node] = np
		}
		np.samples++
		return nil
	})
	switch {
	case errors.Is(err, errBadNode):
		attr := cmp.Or(r.opts.NodeAttribute, "host.name")
		if badNode == "" {
			return nil, rep, r.refuse(refInvalid, "a resource has no %s attribute: the node its samples were taken on is not known", attr)
		}
		return nil, rep, r.refuse(refInvalid, "resource attribute %s %q is not a node name: %s", attr, truncate(badNode, 80), store.NodeNameRule)
	case err != nil:
		return nil, rep, r.refuse(refInvalid, "malformed profiles: %v", err)
	}
	slices.SortStableFunc(pl.groups, func(a, b periodGroup) int { return cmp.Compare(a.epoch, b.epoch) })
	return pl, rep, nil
}

var errBadNode = errors.New("bad node name")

// hostIDs returns each node name's host.id, read from the resources; two
// resources of one name with different host.ids in one request are
// refused.
func (r *Receiver) hostIDs(p pprofile.Profiles) (map[string]string, *refusal) {
	attr := cmp.Or(r.opts.NodeAttribute, "host.name")
	ids := map[string]string{}
	for _, rp := range p.ResourceProfiles().All() {
		attrs := rp.Resource().Attributes()
		name, ok := attrs.Get(attr)
		if !ok {
			continue
		}
		id, ok := attrs.Get(hostIDKey)
		if !ok || id.AsString() == "" {
			continue
		}
		n := name.AsString()
		if prev, seen := ids[n]; seen && prev != id.AsString() {
			return nil, r.refuse(refConflict, "two machines (host.id %q and %q) send under node name %q: give each its own %s",
				truncate(prev, 64), truncate(id.AsString(), 64), truncate(n, 80), attr)
		}
		ids[n] = id.AsString()
	}
	return ids, nil
}

// admit checks who sends under each node name and takes the request's
// samples from the rates; when a node or the total is over its rate
// nothing is taken, and the refusal says when to retry.
func (r *Receiver) admit(pl *plan, now time.Time) *refusal {
	var reservations []*rate.Reservation
	cancel := func() {
		for _, res := range reservations {
			res.CancelAt(now)
		}
	}
	total := 0
	for name, np := range pl.nodes {
		n, err := r.node(name)
		if err != nil {
			cancel()
			return err
		}
		n.mu.Lock()
		if np.hostID != "" && n.holder != "" && n.holder != np.hostID && now.Sub(n.lastSeen) < HolderTTL {
			holder, seen := n.holder, now.Sub(n.lastSeen).Round(time.Second)
			n.mu.Unlock()
			cancel()
			return r.refuse(refConflict, "node name %q is being sent by another machine (host.id %q, %s ago; this request's host.id is %q): "+
				"two machines under one node name would mix their samples; give each its own %s (it passes on %s after the other's last request)",
				name, truncate(holder, 64), seen, truncate(np.hostID, 64), cmp.Or(r.opts.NodeAttribute, "host.name"), HolderTTL)
		}
		n.mu.Unlock()
		res := n.limiter.ReserveN(now, np.samples)
		if !res.OK() {
			cancel()
			return r.refuse(refTooLarge, "%d samples of node %q in one request: more than its rate allows at once (%d); send smaller batches",
				np.samples, name, n.limiter.Burst())
		}
		reservations = append(reservations, res)
		total += np.samples
	}
	res := r.total.ReserveN(now, total)
	if !res.OK() {
		cancel()
		return r.refuse(refTooLarge, "%d samples in one request: more than the receiver's total rate allows at once (%d); send smaller batches",
			total, r.total.Burst())
	}
	reservations = append(reservations, res)
	var wait time.Duration
	for _, res := range reservations {
		wait = max(wait, res.DelayFrom(now))
	}
	if wait > 0 {
		cancel()
		e := r.refuse(refRateLimited, "over the rate of %.0f samples/s per node or %.0f in total: retry in %s",
			r.opts.NodeRate, r.opts.TotalRate, wait.Round(time.Millisecond))
		e.retryAfter = wait
		return e
	}
	for name, np := range pl.nodes {
		n, _ := r.node(name)
		n.mu.Lock()
		if np.hostID != "" {
			n.holder = np.hostID
		}
		n.lastSeen = now
		n.mu.Unlock()
	}
	return nil
}

// node returns a node's state, opening its store the first time.
func (r *Receiver) node(name string) (*node, *refusal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n, ok := r.nodes[name]; ok {
		return n, nil
	}
	st, err := r.opts.Open(name)
	if err != nil {
		r.log.Error("cannot open a node's store", "node", name, "err", err)
		e := r.refuse(refStore, "node %q: cannot open its store (see the receiver's log): retry later", name)
		e.retryAfter = 5 * time.Second
		return nil, e
	}
	n := &node{store: st, limiter: rate.NewLimiter(rate.Limit(r.opts.NodeRate), burst(r.opts.NodeRate))}
	r.nodes[name] = n
	return n, nil
}

// store reads p a second time and appends the samples plan accepted,
// in plan's groups of periods: one read a group, and a single one (no
// group to pick) in the usual case of one period.
func (r *Receiver) store(p pprofile.Profiles, now time.Time, groups []periodGroup) (stored, failed int) {
	if len(groups) <= 1 {
		return r.storeGroup(p, now, nil)
	}
	for _, g := range groups {
		s, f := r.storeGroup(p, now, &g)
		stored, failed = stored+s, failed+f
	}
	return stored, failed
}

// storeGroup appends p's accepted samples of group g (nil: all of them).
func (r *Receiver) storeGroup(p pprofile.Profiles, now time.Time, g *periodGroup) (stored, failed int) {
	var cur *node
	curName := ""
	var lastErr error
	epochs := newPeriodEpochs()
	otlpprofile.Decode(p, otlpprofile.DecodeOptions{NodeAttribute: r.opts.NodeAttribute, RequireCPU: true}, func(s *sample.Sample) error {
		if ok, _ := accepts(s, now); !ok {
			return nil
		}
		if g != nil && epochs.of(s) != *g {
			return nil
		}
		if cur == nil || s.Node != curName {
			if cur != nil {
				cur.mu.Unlock()
			}
			cur, _ = r.node(s.Node) // opened by admit
			curName = s.Node
			cur.mu.Lock()
		}
		if s.PeriodNs != cur.periodNs {
			cur.store.SetPeriod(s.PeriodNs)
			cur.periodNs = s.PeriodNs
		}
		if err := cur.store.Append(s); err != nil && !errors.Is(err, store.ErrNotDurable) {
			failed++
			lastErr = err
			return nil
		}
		stored++
		return nil
	})
	if cur != nil {
		cur.mu.Unlock()
	}
	if failed > 0 {
		r.appendErrors.Add(uint64(failed))
		r.log.Error("received samples not stored", "samples", failed, "err", lastErr)
	}
	return stored, failed
}

// truncate cuts an untrusted name for a message.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
