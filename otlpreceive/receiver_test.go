package otlpreceive

import (
	"bytes"
	"cmp"
	stdgzip "compress/gzip"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/otlpprofile"
	"github.com/heatscope/heatscope/query"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// dirStores opens a real store per node under dir, as `heatscope
// receive` does, and closes them all at the test's end.
type dirStores struct {
	t   testing.TB
	dir string
	mu  sync.Mutex
	dbs map[string]*store.DB
}

func newDirStores(t testing.TB) *dirStores {
	s := &dirStores{t: t, dir: t.TempDir(), dbs: map[string]*store.DB{}}
	t.Cleanup(s.closeAll)
	return s
}

func (s *dirStores) open(node string) (Store, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	db, err := store.Open(filepath.Join(s.dir, node), store.Options{Node: node, PeriodNs: sample.PeriodOf(99)})
	if err != nil {
		return nil, err
	}
	s.dbs[node] = db
	return db, nil
}

func (s *dirStores) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for n, db := range s.dbs {
		if err := db.Close(); err != nil {
			s.t.Errorf("close %s: %v", n, err)
		}
		delete(s.dbs, n)
	}
}

// nodes lists the nodes that got a store.
func (s *dirStores) nodes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ns []string
	for n := range s.dbs {
		ns = append(ns, n)
	}
	slices.Sort(ns)
	return ns
}

// fingerprint is one sample as a line: everything the mapping keeps, its
// time to the microsecond as the store keeps it (store/FORMAT.md).
func fingerprint(s *sample.Sample, periodNs int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s t=%dus cpu=%d pid=%d tid=%d comm=%q cg=%d period=%d", s.Node, s.Time/1000, s.CPU, s.PID, s.TID, s.Comm, s.CgroupID, periodNs)
	if s.Container != nil {
		fmt.Fprintf(&b, " ctr=%+v", *s.Container)
	}
	for _, f := range s.Stack {
		fmt.Fprintf(&b, " %s|%s|%s|%x|%d", f.Function, f.Module, f.BuildID, f.Address, f.Kind)
	}
	return b.String()
}

// readBack closes the stores and returns each node's samples read back
// from its data directory, as fingerprints in order.
func (s *dirStores) readBack(t *testing.T) map[string][]string {
	t.Helper()
	s.closeAll()
	got := map[string][]string{}
	entries, _ := filepath.Glob(filepath.Join(s.dir, "*"))
	for _, dir := range entries {
		node := filepath.Base(dir)
		db, err := store.Open(dir, store.Options{ReadOnly: true, Node: node})
		if err != nil {
			t.Fatalf("open %s: %v", dir, err)
		}
		_, err = query.Samples(context.Background(), db, store.Range{From: math.MinInt64, To: math.MaxInt64}, &store.Filter{IncludeIdle: true},
			func(smp *sample.Sample, period int64) error {
				got[node] = append(got[node], fingerprint(smp, period))
				return nil
			})
		db.Close()
		if err != nil {
			t.Fatalf("read %s: %v", node, err)
		}
		slices.Sort(got[node])
	}
	return got
}

// workload is a node's synthetic samples (realistic stacks, containers,
// idle CPUs) and the request that carries them.
func workload(t testing.TB, node string, cpus int, seconds float64, seed uint64) ([]string, pprofile.Profiles) {
	t.Helper()
	g := synth.New(synth.Config{CPUs: cpus, Hz: 99, Start: time.Now().Add(-time.Minute).UnixNano(), Seconds: seconds,
		Seed: seed, Containers: true, Stacks: 300})
	enc := otlpprofile.NewEncoder("test", node, sample.PeriodOf(99))
	var want []string
	g.Feed(func(s *sample.Sample) error {
		s.Node, s.PeriodNs = node, sample.PeriodOf(99)
		enc.Add(s)
		want = append(want, fingerprint(s, s.PeriodNs))
		return nil
	})
	slices.Sort(want)
	return want, enc.Profiles()
}

func marshal(t testing.TB, p pprofile.Profiles) []byte {
	t.Helper()
	b, err := otlpprofile.MarshalRequest(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func gzipped(b []byte) []byte {
	var buf bytes.Buffer
	zw := stdgzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

// served starts r on loopback ports, returning the gRPC address and the
// HTTP URL of the profiles.
func served(t testing.TB, r *Receiver) (grpcAddr, httpURL string) {
	t.Helper()
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Serve(ctx, gl, hl, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return gl.Addr().String(), "http://" + hl.Addr().String() + HTTPPath
}

func post(t testing.TB, url, token string, body []byte, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", contentProtobuf)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func grpcClient(t testing.TB, addr string) pprofileotlp.GRPCClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return pprofileotlp.NewGRPCClient(cc)
}

// TestRoundTrip: two nodes' samples, one over HTTP (gzip) and one over
// gRPC (gzip), land each in its own node's data directory, every sample
// with its own time, CPU, thread, command, container, stack and period;
// node a's directory holds node a's samples only.
func TestRoundTrip(t *testing.T) {
	ds := newDirStores(t)
	r, err := New(Options{Open: ds.open, AuthToken: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	grpcAddr, url := served(t, r)
	wantA, pa := workload(t, "node-a", 4, 3, 1)
	wantB, pb := workload(t, "node-b", 2, 3, 2)

	resp, body := post(t, url, "s3cret", gzipped(marshal(t, pa)), map[string]string{"Content-Encoding": "gzip"})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTP: %s: %s", resp.Status, body)
	}
	out := pprofileotlp.NewExportResponse()
	if err := out.UnmarshalProto(body); err != nil || out.PartialSuccess().RejectedProfiles() != 0 || out.PartialSuccess().ErrorMessage() != "" {
		t.Fatalf("HTTP response: %v, partial success %d %q", err, out.PartialSuccess().RejectedProfiles(), out.PartialSuccess().ErrorMessage())
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer s3cret")
	if _, err := grpcClient(t, grpcAddr).Export(ctx, pprofileotlp.NewExportRequestFromProfiles(pb), grpc.UseCompressor(gzip.Name)); err != nil {
		t.Fatalf("gRPC: %v", err)
	}
	if st := r.Stats(); st.Samples != uint64(len(wantA)+len(wantB)) || st.Nodes != 2 {
		t.Fatalf("stats %+v, want %d samples of 2 nodes", st, len(wantA)+len(wantB))
	}
	got := ds.readBack(t)
	for node, want := range map[string][]string{"node-a": wantA, "node-b": wantB} {
		if !slices.Equal(got[node], want) {
			t.Errorf("%s: %d samples read back, want %d; first difference:\n%s", node, len(got[node]), len(want), firstDiff(got[node], want))
		}
	}
	if len(got) != 2 {
		t.Errorf("data directories of %d nodes, want 2", len(got))
	}
}

func firstDiff(got, want []string) string {
	for i := range max(len(got), len(want)) {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			return fmt.Sprintf(" got  %s\n want %s", g, w)
		}
	}
	return ""
}

// TestRefused: a malformed or hostile request is refused with a clear
// status on both protocols and stores nothing, not even its valid part.
func TestRefused(t *testing.T) {
	_, good := workload(t, "good", 2, 1, 3)

	withResource := func(name string, attrs map[string]string) pprofile.Profiles {
		_, p := workload(t, "good", 2, 1, 3)
		_, extra := workload(t, "other", 1, 1, 4)
		rp := extra.ResourceProfiles().At(0)
		rp.Resource().Attributes().Remove("host.name")
		for k, v := range attrs {
			rp.Resource().Attributes().PutStr(k, v)
		}
		// other's samples index other's dictionary: move them in one request
		// through MergeTo, the model's own way, so that only the resource differs.
		if err := extra.MergeTo(p); err != nil {
			t.Fatalf("%s: merge: %v", name, err)
		}
		return p
	}
	hostile := func() pprofile.Profiles {
		_, p := workload(t, "good", 2, 1, 3)
		s := p.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().At(0)
		s.SetStackIndex(1 << 30)
		return p
	}()
	cases := []struct {
		name     string
		body     []byte
		header   map[string]string
		token    string
		status   int
		code     codes.Code
		contains string
	}{
		{"garbage", []byte("\xff\xff\xff\xffnot a protobuf"), nil, "tok", 400, codes.InvalidArgument, "malformed"},
		{"index out of range", marshal(t, hostile), nil, "tok", 400, codes.InvalidArgument, "malformed profiles"},
		{"no host.name", marshal(t, withResource("no host.name", nil)), nil, "tok", 400, codes.InvalidArgument, "no host.name"},
		{"bad node name", marshal(t, withResource("bad node", map[string]string{"host.name": "../../etc"})), nil, "tok", 400, codes.InvalidArgument, "not a node name"},
		{"two machines one name", marshal(t, withResource("two", map[string]string{"host.name": "good", "host.id": "m2"})), nil, "tok", 0, 0, ""},
		{"wrong token", marshal(t, good), nil, "wrong", 401, codes.Unauthenticated, "unauthorized"},
		{"no token", marshal(t, good), nil, "", 401, codes.Unauthenticated, "unauthorized"},
		{"too large", bytes.Repeat([]byte{0}, 2<<20), nil, "tok", 413, codes.ResourceExhausted, ""},
		{"gzip bomb", gzipped(bytes.Repeat([]byte{0}, 8<<20)), map[string]string{"Content-Encoding": "gzip"}, "tok", 413, codes.OK, "limit"},
		{"unknown encoding", marshal(t, good), map[string]string{"Content-Encoding": "br"}, "tok", 400, codes.OK, "Content-Encoding"},
		{"unknown type", marshal(t, good), map[string]string{"Content-Type": "text/plain"}, "tok", 415, codes.OK, "Content-Type"},
	}
	for _, c := range cases {
		if c.status == 0 {
			continue // below, with host.id on both
		}
		t.Run(c.name, func(t *testing.T) {
			ds := newDirStores(t)
			r, err := New(Options{Open: ds.open, AuthToken: "tok", MaxRequestBytes: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			grpcAddr, url := served(t, r)
			resp, body := post(t, url, c.token, c.body, c.header)
			if resp.StatusCode != c.status {
				t.Errorf("HTTP %s, want %d: %q", resp.Status, c.status, body)
			}
			msg := statusMessage(body)
			if !strings.Contains(msg, c.contains) {
				t.Errorf("HTTP error %q does not say %q", msg, c.contains)
			}
			if c.code != codes.OK && len(c.body) < 2<<20 {
				req := pprofileotlp.NewExportRequest()
				if req.UnmarshalProto(c.body) == nil {
					ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+c.token)
					_, err := grpcClient(t, grpcAddr).Export(ctx, req)
					if st := status.Convert(err); st.Code() != c.code || !strings.Contains(st.Message(), c.contains) {
						t.Errorf("gRPC %v, want %v saying %q", st, c.code, c.contains)
					}
				}
			}
			if n := r.Stats().Samples; n != 0 {
				t.Errorf("%d samples stored from a refused request", n)
			}
			if got := ds.readBack(t); len(got) != 0 {
				t.Errorf("a refused request left data directories %v", got)
			}
		})
	}
}

// statusMessage reads an OTLP/HTTP error body: a google.rpc.Status.
func statusMessage(b []byte) string {
	var st spb.Status
	if err := proto.Unmarshal(b, &st); err != nil {
		return ""
	}
	return st.GetMessage()
}

// TestRateLimited: a node over its rate is told when to retry (HTTP 429
// with Retry-After, gRPC ResourceExhausted with RetryInfo) and nothing of
// the refused request is stored; once the rate allows, it is taken.
func TestRateLimited(t *testing.T) {
	ds := newDirStores(t)
	now := time.Now()
	r, err := New(Options{Open: ds.open, NodeRate: 400, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	grpcAddr, url := served(t, r)
	want1, p1 := workload(t, "flood", 4, 1, 5) // 396 samples: within the burst of 800
	_, p2 := workload(t, "flood", 4, 1, 6)
	want3, p3 := workload(t, "flood", 4, 1, 7)
	if resp, body := post(t, url, "", marshal(t, p1), nil); resp.StatusCode != 200 {
		t.Fatalf("first request: %s %s", resp.Status, body)
	}
	if resp, body := post(t, url, "", marshal(t, p2), nil); resp.StatusCode != 200 {
		t.Fatalf("second request (the burst's rest): %s %s", resp.Status, body)
	}
	resp, body := post(t, url, "", marshal(t, p3), nil)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("third request: %s, Retry-After %q, want 429 with Retry-After: %s", resp.Status, resp.Header.Get("Retry-After"), statusMessage(body))
	}
	_, err = grpcClient(t, grpcAddr).Export(context.Background(), pprofileotlp.NewExportRequestFromProfiles(p3))
	st := status.Convert(err)
	var retry *errdetails.RetryInfo
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			retry = ri
		}
	}
	if st.Code() != codes.ResourceExhausted || retry == nil || retry.GetRetryDelay().AsDuration() <= 0 {
		t.Fatalf("gRPC over the rate: %v, RetryInfo %v; want ResourceExhausted with a delay", st, retry)
	}
	if got := r.Stats().Refused[refRateLimited]; got != 2 {
		t.Errorf("%d requests counted as rate-limited, want 2", got)
	}
	now = now.Add(time.Duration(retry.GetRetryDelay().AsDuration()) + time.Millisecond)
	if resp, body := post(t, url, "", marshal(t, p3), nil); resp.StatusCode != 200 {
		t.Fatalf("after the delay: %s %s", resp.Status, statusMessage(body))
	}
	got := ds.readBack(t)["flood"]
	if n := len(want1) * 3; len(got) != n || len(want3) != len(want1) {
		t.Fatalf("%d samples stored, want %d (three requests of %d; the refused ones not)", len(got), n, len(want1))
	}
}

// TestTwoMachinesOneName: two machines (host.id) sending under one
// host.name are kept apart: the second is refused, naming the first,
// while the first sends; after HolderTTL of silence the name passes on.
func TestTwoMachinesOneName(t *testing.T) {
	ds := newDirStores(t)
	now := time.Now()
	r, err := New(Options{Open: ds.open, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	_, url := served(t, r)
	perRequest := 0
	as := func(hostID string, seed uint64) []byte {
		want, p := workload(t, "clone", 1, 1, seed)
		perRequest = len(want)
		p.ResourceProfiles().At(0).Resource().Attributes().PutStr("host.id", hostID)
		return marshal(t, p)
	}
	if resp, body := post(t, url, "", as("machine-1", 1), nil); resp.StatusCode != 200 {
		t.Fatalf("first machine: %s %s", resp.Status, statusMessage(body))
	}
	resp, body := post(t, url, "", as("machine-2", 2), nil)
	if msg := statusMessage(body); resp.StatusCode != http.StatusConflict || !strings.Contains(msg, "machine-1") || !strings.Contains(msg, "machine-2") {
		t.Fatalf("second machine under the same name: %s %q, want 409 naming both", resp.Status, msg)
	}
	now = now.Add(HolderTTL + time.Second)
	if resp, body := post(t, url, "", as("machine-2", 3), nil); resp.StatusCode != 200 {
		t.Fatalf("second machine after the first fell silent: %s %s", resp.Status, statusMessage(body))
	}
	if n := len(ds.readBack(t)["clone"]); n != 2*perRequest {
		t.Fatalf("%d samples stored, want %d (the refused request's none)", n, 2*perRequest)
	}
}

// TestPartialSuccess: samples that cannot be stored truthfully (no
// period, no time) are left out and counted in the partial success, the
// rest stored.
func TestPartialSuccess(t *testing.T) {
	ds := newDirStores(t)
	r, err := New(Options{Open: ds.open})
	if err != nil {
		t.Fatal(err)
	}
	_, url := served(t, r)
	enc := otlpprofile.NewEncoder("test", "n", sample.PeriodOf(99))
	at := time.Now().Add(-time.Minute).UnixNano()
	stack := []sample.Frame{{Function: "main", Module: "/bin/x", Kind: sample.KindUser}}
	enc.Add(&sample.Sample{Time: at, CPU: 1, PID: 2, TID: 2, Comm: "x", Stack: stack, PeriodNs: sample.PeriodOf(99)})
	enc.Add(&sample.Sample{Time: time.Now().Add(48 * time.Hour).UnixNano(), CPU: 1, PID: 2, TID: 2, Comm: "x", Stack: stack, PeriodNs: sample.PeriodOf(99)})
	resp, body := post(t, url, "", marshal(t, enc.Profiles()), nil)
	out := pprofileotlp.NewExportResponse()
	if resp.StatusCode != 200 || out.UnmarshalProto(body) != nil {
		t.Fatalf("%s %s", resp.Status, statusMessage(body))
	}
	if ps := out.PartialSuccess(); ps.RejectedProfiles() != 1 || !strings.Contains(ps.ErrorMessage(), "ahead of the receiver's clock") {
		t.Fatalf("partial success %d %q, want 1 sample named", ps.RejectedProfiles(), ps.ErrorMessage())
	}
	if n := len(ds.readBack(t)["n"]); n != 1 {
		t.Fatalf("%d samples stored, want 1", n)
	}
}

// TestTLS: with a TLS config both protocols serve TLS only, with the token.
func TestTLS(t *testing.T) {
	// httptest's certificate for 127.0.0.1, and a client that trusts it.
	ts := httptest.NewUnstartedServer(http.NotFoundHandler())
	ts.StartTLS()
	defer ts.Close()
	client := ts.Client()
	ds := newDirStores(t)
	r, err := New(Options{Open: ds.open, AuthToken: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	gl, _ := net.Listen("tcp", "127.0.0.1:0")
	hl, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Serve(ctx, gl, hl, ts.TLS) }()
	defer func() { cancel(); <-done }()

	want, p := workload(t, "tls-node", 2, 1, 9)
	req, _ := http.NewRequest(http.MethodPost, "https://"+hl.Addr().String()+HTTPPath, bytes.NewReader(marshal(t, p)))
	req.Header.Set("Content-Type", contentProtobuf)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := client.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("HTTPS: %v %v", resp, err)
	}
	resp.Body.Close()
	if _, err := http.Post("http://"+hl.Addr().String()+HTTPPath, contentProtobuf, bytes.NewReader(marshal(t, p))); err == nil {
		// A TLS server answers plain HTTP with a 400 of its own; what
		// matters is that nothing was stored from it.
		if n := r.Stats().Samples; n != uint64(len(want)) {
			t.Fatalf("plain HTTP to the TLS port stored samples: %d", n)
		}
	}
	pool := client.Transport.(*http.Transport).TLSClientConfig.RootCAs
	cc, err := grpc.NewClient(gl.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	mctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer tok")
	if _, err := pprofileotlp.NewGRPCClient(cc).Export(mctx, pprofileotlp.NewExportRequestFromProfiles(p)); err != nil {
		t.Fatalf("gRPC over TLS: %v", err)
	}
	if n := r.Stats().Samples; n != 2*uint64(len(want)) {
		t.Fatalf("%d samples stored over TLS, want %d", n, 2*len(want))
	}
}

// TestRefusalsLoggedOncePerInterval: a flood of refusals is one log line
// per kind and interval, the next one saying how many went unlogged.
func TestRefusalsLoggedOncePerInterval(t *testing.T) {
	var logs bytes.Buffer
	now := time.Now()
	r, err := New(Options{Open: newDirStores(t).open, AuthToken: "tok", Now: func() time.Time { return now },
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	_, url := served(t, r)
	for range 5 {
		post(t, url, "wrong", []byte("x"), nil)
	}
	now = now.Add(logEvery)
	post(t, url, "wrong", []byte("x"), nil)
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], `"refused unlogged before it"=4`) {
		t.Fatalf("log of 6 refusals over two intervals:\n%s", logs.String())
	}
	if got := r.Stats().Refused[refUnauthenticated]; got != 6 {
		t.Fatalf("%d refusals counted, want 6", got)
	}
}

// TestNoCPUNamed: samples that do not say which CPU they ran on are left
// out and named in the partial success: stored on one CPU, a node's
// CPUs would add up as one CPU busier than a CPU can be (they were stored
// on CPU 0 before).
func TestNoCPUNamed(t *testing.T) {
	ds := newDirStores(t)
	r, err := New(Options{Open: ds.open})
	if err != nil {
		t.Fatal(err)
	}
	_, url := served(t, r)
	want, p := workload(t, "nocpu", 2, 1, 4)
	attrs := p.Dictionary().AttributeTable()
	for i := range attrs.Len() {
		if attrs.At(i).KeyStrindex() != 0 && p.Dictionary().StringTable().At(int(attrs.At(i).KeyStrindex())) == "cpu.logical_number" {
			attrs.At(i).Value().SetStr("not a number")
		}
	}
	resp, body := post(t, url, "", marshal(t, p), nil)
	out := pprofileotlp.NewExportResponse()
	if resp.StatusCode != 200 || out.UnmarshalProto(body) != nil {
		t.Fatalf("%s %s", resp.Status, statusMessage(body))
	}
	if ps := out.PartialSuccess(); ps.RejectedProfiles() != int64(len(want)) || !strings.Contains(ps.ErrorMessage(), "did not say which CPU") {
		t.Fatalf("partial success %d %q, want all %d samples left out and named", ps.RejectedProfiles(), ps.ErrorMessage(), len(want))
	}
	if got := ds.readBack(t)["nocpu"]; len(got) != 0 {
		t.Errorf("%d samples that named no CPU were stored", len(got))
	}
}

// TestRefusalNamesGRPCPeer: a gRPC request refused for its token is
// logged with the sender's address, as an HTTP one is (it was peer="").
func TestRefusalNamesGRPCPeer(t *testing.T) {
	var logs bytes.Buffer
	r, err := New(Options{Open: newDirStores(t).open, AuthToken: "tok", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := served(t, r)
	_, p := workload(t, "good", 1, 1, 3)
	if _, err := grpcClient(t, addr).Export(context.Background(), pprofileotlp.NewExportRequestFromProfiles(p)); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("export without the token: %v, want Unauthenticated", err)
	}
	if !strings.Contains(logs.String(), "peer=127.0.0.1:") {
		t.Fatalf("the refusal's log does not name the sender:\n%s", logs.String())
	}
}

// TestSenderCancelled: a request its sender cancels while the receiver
// holds it (here: while the node's store opens) stores nothing and is
// counted and logged as cancelled, over both protocols: it was counted as
// busy, the receiver's fault, which it is not.
func TestSenderCancelled(t *testing.T) {
	for _, proto := range []string{"grpc", "http"} {
		t.Run(proto, func(t *testing.T) {
			ds := newDirStores(t)
			// The server's context of the request under way, and the
			// sender's cancel.
			serverCtx := make(chan context.Context, 1)
			clientCtx, cancelClient := context.WithCancel(context.Background())
			defer cancelClient()
			open := func(node string) (Store, error) {
				cancelClient()
				<-(<-serverCtx).Done() // the cancellation reached the receiver
				return ds.open(node)
			}
			var logs syncLog
			r, err := New(Options{Open: open, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			_, p := workload(t, "gone", 1, 1, 5)
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			if proto == "grpc" {
				capture := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
					serverCtx <- ctx
					return h(ctx, req)
				}
				s := grpc.NewServer(append(r.GRPCServerOptions(), grpc.ChainUnaryInterceptor(capture))...)
				r.RegisterGRPC(s)
				go s.Serve(l)
				defer s.Stop()
				_, err = grpcClient(t, l.Addr().String()).Export(clientCtx, pprofileotlp.NewExportRequestFromProfiles(p))
			} else {
				h := r.HTTPHandler()
				s := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
					serverCtx <- req.Context()
					h.ServeHTTP(w, req)
				})}
				go s.Serve(l)
				defer s.Close()
				req, _ := http.NewRequestWithContext(clientCtx, http.MethodPost, "http://"+l.Addr().String()+HTTPPath, bytes.NewReader(marshal(t, p)))
				req.Header.Set("Content-Type", contentProtobuf)
				var resp *http.Response
				if resp, err = http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			}
			if err == nil {
				t.Fatalf("the cancelled request succeeded")
			}
			// The handler returns after the sender's call did; its
			// refusal is counted, then logged.
			deadline := time.Now().Add(30 * time.Second)
			for !strings.Contains(logs.String(), "OTLP request refused") && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			st := r.Stats()
			if st.Refused[refCancelled] != 1 || st.Refused[refBusy] != 0 {
				t.Errorf("refusals %v, want the request counted as cancelled, not busy", st.Refused)
			}
			if l := logs.String(); !strings.Contains(l, "reason=cancelled") || !strings.Contains(l, "gave up") {
				t.Errorf("log:\n%s", l)
			}
			if st.Samples != 0 || len(ds.readBack(t)["gone"]) != 0 {
				t.Errorf("a cancelled request stored samples")
			}
		})
	}
}

// syncLog is a log's buffer, written by the server's goroutines.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// periodCounter is a node's real store, counting the period changes the
// receiver asks of it (each one cuts the store's head into a block).
type periodCounter struct {
	Store
	changes int
	last    int64
}

func (c *periodCounter) SetPeriod(periodNs int64) {
	if periodNs != c.last {
		c.changes++
		c.last = periodNs
	}
	c.Store.SetPeriod(periodNs)
}

// TestRateChangeInOneRequest: a recorder's overhead guard halves its rate
// in the middle of a batch, and the change reaches its two CPUs 100 ms
// apart. The request holds each CPU's samples apart (the CPU is a sample
// attribute), so its periods go fast, slow, fast, slow. The receiver
// stores them with one change of period (one cut of the node's head),
// every sample at its own period. Before, it changed period at every
// alternation (3 here; 11 in a second in a trial of record → receive,
// whose blocks overlapped in time so that a CPU's samples, read out of
// order across them, gave a 20 ms heatmap cell 20.006 ms of one CPU).
func TestRateChangeInOneRequest(t *testing.T) {
	ds := newDirStores(t)
	var counter *periodCounter
	open := func(node string) (Store, error) {
		st, err := ds.open(node)
		counter = &periodCounter{Store: st, last: sample.PeriodOf(99)}
		return counter, err
	}
	r, err := New(Options{Open: open})
	if err != nil {
		t.Fatal(err)
	}
	fast, slow := sample.PeriodOf(99), sample.PeriodOf(49)
	start := time.Now().Add(-time.Minute).Truncate(time.Second).UnixNano()
	switchAt := [2]int64{start + int64(time.Second), start + int64(1100*time.Millisecond)} // CPU 0's, CPU 1's
	enc := otlpprofile.NewEncoder("test", "ratenode", fast)
	var samples []*sample.Sample
	for cpu := range 2 {
		for ts := start + int64(cpu)*int64(3*time.Millisecond); ts < start+2*int64(time.Second); {
			period := fast
			if ts >= switchAt[cpu] {
				period = slow
			}
			samples = append(samples, &sample.Sample{Time: ts, CPU: uint32(cpu), PID: 7, TID: 7, Comm: "loop", Node: "ratenode", PeriodNs: period,
				Stack: []sample.Frame{{Function: "loop", Kind: sample.KindUser}}})
			ts += period
		}
	}
	slices.SortFunc(samples, func(a, b *sample.Sample) int { return cmp.Compare(a.Time, b.Time) })
	var want []string
	for _, s := range samples {
		enc.Add(s)
		want = append(want, fingerprint(s, s.PeriodNs))
	}
	slices.Sort(want)
	req := enc.Profiles()
	alternations, last := 0, fast
	if _, err := otlpprofile.Decode(req, otlpprofile.DecodeOptions{}, func(s *sample.Sample) error {
		if s.PeriodNs != last {
			alternations++
			last = s.PeriodNs
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if alternations < 3 {
		t.Fatalf("the request changes period %d times in its order: the test needs its CPUs' periods to alternate", alternations)
	}
	res, rerr := r.ingest(context.Background(), req)
	if rerr != nil {
		t.Fatal(rerr.msg)
	}
	if res.stored != len(samples) {
		t.Errorf("stored %d of %d samples", res.stored, len(samples))
	}
	if counter.changes != 1 {
		t.Errorf("the node's store changed period %d times for one change of rate (the request alternates %d times), want 1", counter.changes, alternations)
	}
	if got := ds.readBack(t)["ratenode"]; !slices.Equal(got, want) {
		t.Errorf("read back %d samples, want %d; first difference: %s", len(got), len(want), firstDiff(got, want))
	}
}
