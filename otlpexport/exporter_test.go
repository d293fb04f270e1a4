package otlpexport

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/heatscope/heatscope/otlpprofile"
	"github.com/heatscope/heatscope/sample"
)

const secret = "Bearer s3cret-t0ken"

// receiver is an OTLP profiles endpoint: the collector's own gRPC
// service (pprofileotlp.RegisterGRPCServer) or an OTLP/HTTP handler,
// decoding what it takes with otlpprofile. refuse, when set, answers a
// call (numbered from 1) with an error instead.
type receiver struct {
	pprofileotlp.UnimplementedGRPCServer
	mu      sync.Mutex
	calls   int
	samples []sample.Sample
	auth    []string
	// encodings are the requests' compressions as they arrived ("" for
	// none: gRPC's message encoding, HTTP's Content-Encoding).
	encodings []string
	refuse    func(call int) error
	// warning, when set, is the partial success of every answer,
	// rejecting nothing: OTLP's warning.
	warning string
}

// encoding records the compression of a request as it arrived.
func (r *receiver) encoding(e string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.encodings = append(r.encodings, e)
}

// HandleRPC records the compression of each gRPC request (a
// stats.Handler of the test's server).
func (r *receiver) HandleRPC(_ context.Context, s stats.RPCStats) {
	if h, ok := s.(*stats.InHeader); ok {
		r.encoding(h.Compression)
	}
}

func (r *receiver) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (r *receiver) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (r *receiver) HandleConn(context.Context, stats.ConnStats)                       {}

func (r *receiver) take(auth string, req pprofileotlp.ExportRequest) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	r.auth = append(r.auth, auth)
	if r.refuse != nil {
		if err := r.refuse(r.calls); err != nil {
			return err
		}
	}
	_, err := otlpprofile.Decode(req.Profiles(), otlpprofile.DecodeOptions{}, func(s *sample.Sample) error {
		c := *s
		c.Stack = slices.Clone(s.Stack)
		r.samples = append(r.samples, c)
		return nil
	})
	return err
}

func (r *receiver) Export(ctx context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	auth := ""
	if v := md.Get("authorization"); len(v) == 1 {
		auth = v[0]
	}
	resp := pprofileotlp.NewExportResponse()
	if r.warning != "" {
		resp.PartialSuccess().SetErrorMessage(r.warning)
	}
	return resp, r.take(auth, req)
}

func (r *receiver) got() ([]sample.Sample, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.samples), r.calls
}

// serveGRPC serves r's gRPC service on addr ("127.0.0.1:0" for any
// port), with TLS when cert is not nil.
func serveGRPC(t *testing.T, r *receiver, addr string, cert *tls.Certificate) string {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	opts := []grpc.ServerOption{grpc.StatsHandler(r)}
	if cert != nil {
		opts = append(opts, grpc.Creds(credentials.NewServerTLSFromCert(cert)))
	}
	s := grpc.NewServer(opts...)
	pprofileotlp.RegisterGRPCServer(s, r)
	go s.Serve(l)
	t.Cleanup(s.Stop)
	return l.Addr().String()
}

// testSamples returns n samples of two stacks and a container, 10 ms
// apart, each of its own period.
func testSamples(n int) []sample.Sample {
	c := &sample.Container{ID: "abc", Runtime: "containerd", Pod: "cart", Namespace: "shop"}
	stacks := [][]sample.Frame{
		{{Function: "do_syscall_64", Module: sample.KernelModule, Address: 0xffffffff81000010, Kind: sample.KindKernel},
			{Function: "main", Module: "/bin/app", BuildID: "beef", Address: 0x401000, Kind: sample.KindUser}},
		{{Function: "spin", Module: "/bin/app", BuildID: "beef", Address: 0x401100, Kind: sample.KindUser}},
	}
	out := make([]sample.Sample, n)
	for i := range out {
		out[i] = sample.Sample{Time: 1_790_000_000_000_000_000 + int64(i)*10_000_000, CPU: uint32(i % 2), PID: 42, TID: 43 + uint32(i%3),
			Comm: "app", Container: c, Stack: stacks[i%2], PeriodNs: 10_101_010 * int64(1+i%2), Node: "node-1"}
	}
	return out
}

// sameSamples fails t unless got holds want's samples, each once.
func sameSamples(t *testing.T, got, want []sample.Sample) {
	t.Helper()
	slices.SortFunc(got, func(a, b sample.Sample) int { return int(a.Time - b.Time) })
	if len(got) != len(want) {
		t.Fatalf("the endpoint got %d samples, want %d", len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Fatalf("sample %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

// logBuffer is a logger writing into a buffer, to check what is logged.
func logBuffer() (*slog.Logger, *syncBuffer) {
	b := &syncBuffer{}
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})), b
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestGRPC: over the collector's gRPC service, every sample arrives
// once, with its time, period and labels, the authorization header with
// it; the counters say so; nothing logged holds the header.
func TestGRPC(t *testing.T) {
	r := &receiver{}
	addr := serveGRPC(t, r, "127.0.0.1:0", nil)
	log, logs := logBuffer()
	x, err := New(Config{Endpoint: addr, Insecure: true, Headers: map[string]string{"authorization": secret},
		Interval: 50 * time.Millisecond, Node: "node-1", Version: "test", Log: log})
	if err != nil {
		t.Fatal(err)
	}
	want := testSamples(3000)
	for i := range want {
		s := want[i]
		s.Node = "" // a recording's samples name no node: the exporter's
		x.Add(&s)
		if i%500 == 0 {
			time.Sleep(60 * time.Millisecond) // across batches
		}
	}
	x.Close()
	got, calls := r.got()
	sameSamples(t, got, want)
	if calls < 2 {
		t.Errorf("%d requests: want several batches", calls)
	}
	for _, a := range r.auth {
		if a != secret {
			t.Fatalf("authorization %q, want the configured header", a)
		}
	}
	if st := x.Stats(); st.ExportedSamples != 3000 || st.QueuedSamples != 0 || st.QueuedBytes != 0 || st.FailedRequests != 0 {
		t.Errorf("stats %+v", st)
	}
	if strings.Contains(logs.String(), "s3cret") {
		t.Errorf("the log holds the credential:\n%s", logs.String())
	}
}

// TestRetry: an endpoint that is unavailable for its first calls gets
// every sample once, by the exporter's retries; each failed attempt is
// counted; the failure and the recovery are logged once each.
func TestRetry(t *testing.T) {
	r := &receiver{refuse: func(call int) error {
		if call <= 3 {
			return status.Error(codes.Unavailable, "warming up")
		}
		return nil
	}}
	addr := serveGRPC(t, r, "127.0.0.1:0", nil)
	log, logs := logBuffer()
	x, err := newExporter(Config{Endpoint: addr, Insecure: true, Interval: time.Hour, Node: "node-1", Log: log}, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	want := testSamples(100)
	for i := range want {
		x.Add(&want[i])
	}
	x.Close()
	got, calls := r.got()
	sameSamples(t, got, want)
	if st := x.Stats(); calls != 4 || st.FailedRequests != 3 || st.ExportedSamples != 100 {
		t.Errorf("%d calls, stats %+v; want 4 calls, 3 failed", calls, st)
	}
	if l := logs.String(); strings.Count(l, "OTLP export failing") != 1 || strings.Count(l, "works again") != 1 || !strings.Contains(l, "warming up") {
		t.Errorf("log:\n%s", l)
	}
}

// TestRefused: an endpoint that refuses a request for good (a code OTLP
// does not retry) drops its batch at once, counted as refused, never
// sent again.
func TestRefused(t *testing.T) {
	r := &receiver{refuse: func(int) error { return status.Error(codes.InvalidArgument, "no thanks") }}
	addr := serveGRPC(t, r, "127.0.0.1:0", nil)
	log, logs := logBuffer()
	x, err := newExporter(Config{Endpoint: addr, Insecure: true, Interval: time.Hour, Headers: map[string]string{"authorization": secret}, Log: log}, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	want := testSamples(10)
	for i := range want {
		x.Add(&want[i])
	}
	x.Close()
	if _, calls := r.got(); calls != 1 {
		t.Errorf("%d calls, want 1: a refused batch is not retried", calls)
	}
	if st := x.Stats(); st.DroppedRejected != 10 || st.ExportedSamples != 0 || st.FailedRequests != 1 {
		t.Errorf("stats %+v", st)
	}
	if l := logs.String(); !strings.Contains(l, "no thanks") || strings.Contains(l, "s3cret") {
		t.Errorf("log:\n%s", l)
	}
}

// TestEndpointDown: with the endpoint down, Add goes on (it never waits
// for the endpoint) while the queue stays within its bound, dropping its
// oldest batches, counted; once the endpoint is up, what the queue holds
// arrives; every sample is exported or counted as dropped. QueueChanged
// is told the queue's bytes as they change, and 0 at the end.
func TestEndpointDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // down: connections are refused
	log, logs := logBuffer()
	const bound = 32 << 10
	var told []int64 // what QueueChanged was told, in order
	var toldMu sync.Mutex
	queueChanged := func(n int64) {
		toldMu.Lock()
		told = append(told, n)
		toldMu.Unlock()
	}
	x, err := newExporter(Config{Endpoint: addr, Insecure: true, Interval: 20 * time.Millisecond, QueueBytes: bound, Log: log, Timeout: 2 * time.Second,
		QueueChanged: queueChanged}, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	all := testSamples(20_500)
	for i := range 20_000 {
		x.Add(&all[i])
		if i%2000 == 0 {
			time.Sleep(25 * time.Millisecond) // a batch cut
			if st := x.Stats(); st.QueuedBytes > bound+batchSlack {
				t.Fatalf("queue %d bytes, bound %d", st.QueuedBytes, bound)
			}
		}
	}
	down := x.Stats()
	if down.DroppedQueueFull == 0 || down.ExportedSamples != 0 || down.FailedRequests == 0 {
		t.Fatalf("stats with the endpoint down %+v: want drops of a full queue and failed requests", down)
	}
	if !strings.Contains(logs.String(), "queue full") {
		t.Errorf("no log of the full queue:\n%s", logs.String())
	}
	r := &receiver{}
	serveGRPC(t, r, addr, nil) // up again, same port
	// What the queue holds is sent; then samples added are, all of them.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if st := x.Stats(); st.ExportedSamples > 0 && st.QueuedSamples == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the endpoint is up, the queue not sent in 30 s: %+v", x.Stats())
		}
	}
	late := all[20_000:20_500]
	for i := range late {
		x.Add(&late[i])
	}
	x.Close()
	got, _ := r.got()
	st := x.Stats()
	if int(st.ExportedSamples) != len(got) || st.ExportedSamples+st.DroppedQueueFull+st.DroppedShutdown+st.DroppedRejected != 20_500 {
		t.Errorf("stats %+v, %d received: exported and dropped must add up to the 20500 samples", st, len(got))
	}
	times := map[int64]bool{}
	for _, s := range got {
		times[s.Time] = true
	}
	for _, s := range late {
		if !times[s.Time] {
			t.Fatalf("a sample added once the endpoint was up and the queue sent did not arrive")
		}
	}
	toldMu.Lock()
	defer toldMu.Unlock()
	if len(told) == 0 || told[len(told)-1] != 0 || slices.Max(told) < bound/2 || slices.Max(told) > bound+batchSlack {
		t.Errorf("QueueChanged was told %d values, the largest %d, the last %d: want the queue's bytes up to about its bound %d, and 0 at the end",
			len(told), slices.Max(append(told, 0)), append([]int64{-1}, told...)[len(told)], bound)
	}
}

// batchSlack is what one batch may add over the queue's bound: the
// batch being sent is counted in the queue too.
const batchSlack = 64 << 10

// TestShutdownDrops: closing while the endpoint is down waits at most the
// timeout, and counts what was left as dropped at stop.
func TestShutdownDrops(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	x, err := newExporter(Config{Endpoint: addr, Insecure: true, Interval: time.Hour, Timeout: 300 * time.Millisecond, Log: slog.New(slog.DiscardHandler)}, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	want := testSamples(50)
	for i := range want {
		x.Add(&want[i])
	}
	x.Close()
	if st := x.Stats(); st.DroppedShutdown != 50 || st.ExportedSamples != 0 || st.QueuedSamples != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestNeverWorked: closing while the endpoint has never answered (it
// refuses connections) does not wait for it (its Timeout, 10 minutes
// here): once an attempt has failed, what is left is counted as dropped
// at stop and the give-up logged. Close waited the whole Timeout before.
// (An endpoint that answers, if only to refuse for now, is waited for:
// TestRetry, TestHTTP.)
func TestNeverWorked(t *testing.T) {
	for _, attempted := range []bool{true, false} {
		t.Run(fmt.Sprintf("attempted before Close %v", attempted), func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := l.Addr().String()
			l.Close()
			log, logs := logBuffer()
			x, err := newExporter(Config{Endpoint: addr, Insecure: true, Interval: time.Hour, Timeout: 10 * time.Minute, Log: log}, 10*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			want := testSamples(50)
			for i := range want[:25] {
				x.Add(&want[i])
			}
			if attempted {
				x.cut()
				for x.Stats().FailedRequests == 0 {
					time.Sleep(10 * time.Millisecond)
				}
			}
			for i := range want[25:] {
				x.Add(&want[25+i])
			}
			closed := make(chan struct{})
			go func() { x.Close(); close(closed) }()
			select {
			case <-closed:
			case <-time.After(time.Minute):
				t.Fatalf("Close still waits after a minute (its Timeout: 10) for an endpoint that never answered")
			}
			if st := x.Stats(); st.DroppedShutdown != 50 || st.ExportedSamples != 0 || st.QueuedSamples != 0 {
				t.Errorf("stats %+v: want the 50 samples dropped at stop", st)
			}
			if !strings.Contains(logs.String(), "never answered") {
				t.Errorf("the give-up is not logged:\n%s", logs.String())
			}
		})
	}
}

// TestEndpointWarning: an endpoint that takes every batch with a
// warning (a partial success rejecting nothing, as heatscope's receiver
// answers while its bucket does not answer) has every sample counted as
// exported and its warning logged, once a minute, not per batch. It was
// not logged at all before.
func TestEndpointWarning(t *testing.T) {
	r := &receiver{warning: "bucket s3://fleet has not answered since 01:02:03"}
	addr := serveGRPC(t, r, "127.0.0.1:0", nil)
	log, logs := logBuffer()
	x, err := New(Config{Endpoint: addr, Insecure: true, Interval: time.Hour, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	want := testSamples(30)
	for i := range want {
		x.Add(&want[i])
		if i%10 == 9 {
			x.cut()
		}
	}
	x.Close()
	if st := x.Stats(); st.ExportedSamples != 30 || st.DroppedRejected != 0 {
		t.Errorf("stats %+v: want every sample exported, none rejected", st)
	}
	if l := logs.String(); strings.Count(l, "has not answered since") != 1 || !strings.Contains(l, "with a warning") {
		t.Errorf("the endpoint's warning, in three answers, logged other than once:\n%s", l)
	}
}

// TestGRPCTLS: over TLS, trusting the endpoint's CA from a file.
func TestGRPCTLS(t *testing.T) {
	ts := httptest.NewUnstartedServer(nil)
	ts.StartTLS()
	cert := ts.TLS.Certificates[0]
	caFile := writeCA(t, ts)
	ts.Close()
	r := &receiver{}
	addr := serveGRPC(t, r, "127.0.0.1:0", &cert)
	x, err := New(Config{Endpoint: addr, CAFile: caFile, Interval: time.Hour, Node: "node-1"})
	if err != nil {
		t.Fatal(err)
	}
	want := testSamples(20)
	for i := range want {
		x.Add(&want[i])
	}
	x.Close()
	got, _ := r.got()
	sameSamples(t, got, want)
}

// writeCA writes ts's certificate as a PEM CA file.
func writeCA(t *testing.T, ts *httptest.Server) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ca.pem")
	b := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// otlpHTTP is an OTLP/HTTP endpoint as the Collector's receiver serves
// one: the protobuf of a request POSTed to ProfilesPath.
func otlpHTTP(r *receiver) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+ProfilesPath, func(w http.ResponseWriter, req *http.Request) {
		if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
			http.Error(w, "content type "+ct, http.StatusUnsupportedMediaType)
			return
		}
		if err := pprofileotlp.ValidateDevelopmentVersion(req.Header.Values(pprofileotlp.DevelopmentVersionHeader)); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		enc := req.Header.Get("Content-Encoding")
		r.encoding(enc)
		var src io.Reader = req.Body
		if enc == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			src = zr
		}
		body := new(bytes.Buffer)
		if _, err := body.ReadFrom(src); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		otlpReq := pprofileotlp.NewExportRequest()
		if err := otlpReq.UnmarshalProto(body.Bytes()); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := r.take(req.Header.Get("Authorization"), otlpReq); err != nil {
			var he httpError
			if errors.As(err, &he) {
				if he.retryAfter != "" {
					w.Header().Set("Retry-After", he.retryAfter)
				}
				http.Error(w, he.msg, he.code)
				return
			}
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		b, _ := pprofileotlp.NewExportResponse().MarshalProto()
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(b)
	})
	return mux
}

type httpError struct {
	code       int
	msg        string
	retryAfter string
}

func (e httpError) Error() string { return fmt.Sprint(e.code, e.msg) }

// TestHTTP: over OTLP/HTTP with TLS, the protobuf POSTed to the
// Collector's path with the version and authorization headers; a 503
// with Retry-After is retried after the delay asked for; a 400 is not.
func TestHTTP(t *testing.T) {
	r := &receiver{refuse: func(call int) error {
		switch call {
		case 1:
			return httpError{code: http.StatusServiceUnavailable, msg: "busy", retryAfter: "1"}
		case 3:
			return httpError{code: http.StatusBadRequest, msg: "bad batch"}
		}
		return nil
	}}
	ts := httptest.NewTLSServer(otlpHTTP(r))
	defer ts.Close()
	x, err := newExporter(Config{Endpoint: ts.URL, Protocol: "http", CAFile: writeCA(t, ts), Interval: time.Hour,
		Headers: map[string]string{"authorization": secret}, Node: "node-1", Log: slog.New(slog.DiscardHandler)}, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	want := testSamples(30)
	start := time.Now()
	for i := range want[:20] {
		x.Add(&want[i])
	}
	x.cut() // the first batch: 503, then taken
	for i := range want[20:] {
		x.Add(&want[20+i])
	}
	x.Close() // the second: 400, dropped
	got, calls := r.got()
	sameSamples(t, got, want[:20])
	if waited := time.Since(start); waited < time.Second {
		t.Errorf("retried after %v: the endpoint asked for 1 s", waited)
	}
	if st := x.Stats(); calls != 3 || st.ExportedSamples != 20 || st.DroppedRejected != 10 || st.FailedRequests != 2 {
		t.Errorf("%d calls, stats %+v", calls, st)
	}
	for _, a := range r.auth {
		if a != secret {
			t.Fatalf("authorization %q", a)
		}
	}
}

// TestEndpoints: what an endpoint may be, and the errors that say what
// is wrong with one.
func TestEndpoints(t *testing.T) {
	for _, c := range []struct {
		endpoint, protocol string
		insecure           bool
		want               string // "" for no error
	}{
		{"localhost:4317", "grpc", false, ""},
		{"localhost:4317", "grpc", true, ""},
		{"https://collector:4317", "grpc", false, ""},
		{"collector", "grpc", false, "want host:port"},
		{"http://collector:4318", "http", false, "--otlp-insecure"},
		{"https://collector:4318", "http", true, "choose one"},
		{"https://collector", "http", false, "give the port"},
		{"ftp://collector:21", "http", true, "want http or https"},
		{"https://user:pw@collector:4318", "http", false, "want host:port or a URL"},
		{"https://collector:4317/x", "grpc", false, "has no path"},
		{"localhost:4318", "carrier-pigeon", true, "want grpc or http"},
	} {
		x, err := New(Config{Endpoint: c.endpoint, Protocol: c.protocol, Insecure: c.insecure})
		if x != nil {
			x.Close()
		}
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s %s insecure=%v: error %v, want %q", c.protocol, c.endpoint, c.insecure, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "pw") {
			t.Errorf("the error shows the URL's password: %v", err)
		}
	}
	if _, err := New(Config{Endpoint: "localhost:4317", CAFile: "/nonexistent/ca.pem"}); err == nil || !strings.Contains(err.Error(), "CA file") {
		t.Errorf("a missing CA file: %v", err)
	}
	h, err := newHTTPClient(&Config{Endpoint: "collector:4318", Insecure: true})
	if err != nil || h.url != "http://collector:4318/v1development/profiles" {
		t.Errorf("url %v, %v", h, err)
	}
	h, err = newHTTPClient(&Config{Endpoint: "https://gw:443/otlp/profiles"})
	if err != nil || h.url != "https://gw:443/otlp/profiles" {
		t.Errorf("url %v, %v", h, err)
	}
}

// TestBackoff: the default backoff starts at a second, doubles, stops
// at 30 s (each with up to a fifth more of jitter), and waits longer when
// the endpoint asks, up to 5 minutes.
func TestBackoff(t *testing.T) {
	x := &Exporter{minBackoff: minBackoff}
	for _, c := range []struct {
		n     int
		asked time.Duration
		want  time.Duration
	}{
		{1, 0, time.Second}, {2, 0, 2 * time.Second}, {5, 0, 16 * time.Second}, {6, 0, 30 * time.Second}, {60, 0, 30 * time.Second},
		{1, 10 * time.Second, 10 * time.Second}, {1, time.Hour, 5 * time.Minute},
	} {
		got := x.backoff(c.n, c.asked)
		if got < c.want || got > c.want+c.want/5 {
			t.Errorf("attempt %d, asked %v: %v, want %v to %v", c.n, c.asked, got, c.want, c.want+c.want/5)
		}
	}
}

// TestCompression: requests are gzip-compressed by default over both
// protocols (gRPC's gzip message encoding, HTTP's Content-Encoding), as
// the Collector's exporters send them, and plain with "none"; every
// sample arrives either way.
func TestCompression(t *testing.T) {
	for _, c := range []struct {
		protocol, compression, want string
	}{
		{"grpc", "", "gzip"}, {"grpc", CompressionNone, ""},
		{"http", "", "gzip"}, {"http", CompressionNone, ""},
	} {
		t.Run(c.protocol+"/"+c.want, func(t *testing.T) {
			r := &receiver{}
			endpoint := ""
			if c.protocol == "grpc" {
				endpoint = serveGRPC(t, r, "127.0.0.1:0", nil)
			} else {
				ts := httptest.NewServer(otlpHTTP(r))
				defer ts.Close()
				endpoint = ts.URL
			}
			x, err := New(Config{Endpoint: endpoint, Protocol: c.protocol, Insecure: true, Compression: c.compression,
				Interval: time.Hour, Node: "node-1"})
			if err != nil {
				t.Fatal(err)
			}
			want := testSamples(500)
			for i := range want[:250] {
				x.Add(&want[i])
			}
			x.cut()
			for i := range want[250:] {
				x.Add(&want[250+i])
			}
			x.Close()
			got, calls := r.got()
			sameSamples(t, got, want)
			r.mu.Lock()
			encodings := slices.Clone(r.encodings)
			r.mu.Unlock()
			if calls != 2 || len(encodings) != 2 || encodings[0] != c.want || encodings[1] != c.want {
				t.Errorf("%d requests, encodings %q: want 2, each %q", calls, encodings, c.want)
			}
		})
	}
	if _, err := New(Config{Endpoint: "127.0.0.1:4317", Insecure: true, Compression: "zstd"}); err == nil || !strings.Contains(err.Error(), "want gzip or none") {
		t.Errorf("compression zstd: %v", err)
	}
}
