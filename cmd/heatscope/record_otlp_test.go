package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/heatscope/heatscope/internal/bpftest"
	"github.com/heatscope/heatscope/otlpprofile"
	"github.com/heatscope/heatscope/sample"
)

// otlpSink is an OTLP profiles endpoint for record's tests: the
// collector's own gRPC service, keeping the samples it takes decoded and
// the authorization each request carried.
type otlpSink struct {
	pprofileotlp.UnimplementedGRPCServer
	mu      sync.Mutex
	samples []sample.Sample
	auth    map[string]int
	// hostIDs counts the resources by their host.id.
	hostIDs map[string]int
}

func (o *otlpSink) Export(ctx context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.auth[strings.Join(md.Get("authorization"), ",")]++
	for _, rp := range req.Profiles().ResourceProfiles().All() {
		id := ""
		if v, ok := rp.Resource().Attributes().Get("host.id"); ok {
			id = v.AsString()
		}
		o.hostIDs[id]++
	}
	_, err := otlpprofile.Decode(req.Profiles(), otlpprofile.DecodeOptions{}, func(s *sample.Sample) error {
		c := *s
		c.Stack = slices.Clone(s.Stack)
		o.samples = append(o.samples, c)
		return nil
	})
	return pprofileotlp.NewExportResponse(), err
}

// TestRecordOTLP: a real recording of a busy program sent to an OTLP
// endpoint while it records (record --otlp-endpoint, the token from a
// headers file): the endpoint gets every sample the data directory holds,
// field for field (time, period, CPU, pid, tid, command, container,
// frames; the time to the microsecond the store keeps), each request
// with the token, which record never prints.
func TestRecordOTLP(t *testing.T) {
	bpftest.Require(t)
	dir := t.TempDir()
	bin := buildHeatscope(t, dir)
	hotc, _ := buildFixtures(t, dir)
	busy := start(t, hotc)

	sink := &otlpSink{auth: map[string]int{}, hostIDs: map[string]int{}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pprofileotlp.RegisterGRPCServer(srv, sink)
	go srv.Serve(l)
	defer srv.Stop()

	const token = "Bearer rec0rd-t0ken"
	headers := filepath.Join(dir, "otlp-headers")
	if err := os.WriteFile(headers, []byte("Authorization: "+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	_, stderr, err := runHeatscope(bin, "record", "--data", data, "--duration", "6s", "--listen", "", "--progress", "0", "--node", "otlp-node",
		"--otlp-endpoint", l.Addr().String(), "--otlp-insecure", "--otlp-interval", "1s", "--otlp-headers-file", headers)
	if err != nil {
		t.Fatalf("record: %v\n%s", err, stderr)
	}
	if strings.Contains(stderr, "rec0rd") {
		t.Errorf("record printed the token:\n%s", stderr)
	}
	if !strings.Contains(stderr, "0 dropped from a full queue, 0 refused, 0 left at stop") {
		t.Errorf("record's OTLP summary:\n%s", stderr)
	}

	// What the data directory holds, read through the same mapping.
	out := filepath.Join(dir, "stored.otlp")
	if _, stderr, err := runHeatscope(bin, "export", "--data", data, "--idle", "include", "--format", "otlp", "-o", out); err != nil {
		t.Fatalf("export: %v\n%s", err, stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	p, err := otlpprofile.UnmarshalRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	var stored []sample.Sample
	if _, err := otlpprofile.Decode(p, otlpprofile.DecodeOptions{}, func(s *sample.Sample) error {
		c := *s
		c.Stack = slices.Clone(s.Stack)
		stored = append(stored, c)
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	sink.mu.Lock()
	got, auth := sink.samples, sink.auth
	sink.mu.Unlock()
	if len(auth) != 1 || auth[token] == 0 {
		t.Errorf("authorization of the requests: %v, want the token on every one", auth)
	}
	// The recorder is its resources' host.id: its data directory's
	// instance id, what a receiver tells two machines of one name by.
	var identity struct{ Instance string }
	if b, err := os.ReadFile(filepath.Join(data, "identity.json")); err != nil || json.Unmarshal(b, &identity) != nil || identity.Instance == "" {
		t.Fatalf("the data directory's identity: %v %s", err, b)
	}
	sink.mu.Lock()
	hostIDs := sink.hostIDs
	sink.mu.Unlock()
	if len(hostIDs) != 1 || hostIDs[identity.Instance] == 0 {
		t.Errorf("host.id of the resources sent: %v, want the instance id %s on every one", hostIDs, identity.Instance)
	}
	// The store keeps times to the microsecond (store/FORMAT.md); the
	// exporter sends the recorder's nanoseconds.
	for i := range got {
		got[i].Time -= got[i].Time % 1000
	}
	order := func(a, b sample.Sample) int {
		if a.Time != b.Time {
			return int(a.Time - b.Time)
		}
		return int(a.CPU) - int(b.CPU)
	}
	slices.SortFunc(got, order)
	slices.SortFunc(stored, order)
	busyPID := uint32(busy.Process.Pid)
	busySamples := 0
	for _, s := range stored {
		if s.PID == busyPID {
			busySamples++
		}
	}
	// A few suffice: what is checked is that the two sets are one. (On
	// a loaded machine the busy program gets little of a CPU.)
	if busySamples < 10 {
		t.Fatalf("the data directory holds %d samples of the busy program: the recording did not work", busySamples)
	}
	if len(got) != len(stored) {
		t.Fatalf("the endpoint got %d samples, the data directory holds %d", len(got), len(stored))
	}
	for i := range stored {
		if !reflect.DeepEqual(got[i], stored[i]) {
			t.Fatalf("sample %d:\nsent   %+v %+v\nstored %+v %+v", i, got[i], got[i].Container, stored[i], stored[i].Container)
		}
	}
}

// TestRecordOTLPEndpointDown: with --otlp-endpoint refusing every
// connection from the start, record stops promptly, not after waiting
// the whole --otlp-timeout for an endpoint it never reached (it waited
// the 2 minutes here before), counts the samples left unsent and logs the
// failure and the give-up without the token.
func TestRecordOTLPEndpointDown(t *testing.T) {
	bpftest.Require(t)
	dir := t.TempDir()
	bin := buildHeatscope(t, dir)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := l.Addr().String()
	l.Close()
	headers := filepath.Join(dir, "otlp-headers")
	if err := os.WriteFile(headers, []byte("Authorization: Bearer d0wn-t0ken\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const timeout = 2 * time.Minute
	began := time.Now()
	_, stderr, err := runHeatscope(bin, "record", "--data", filepath.Join(dir, "data"), "--duration", "2s", "--listen", "", "--progress", "0",
		"--otlp-endpoint", down, "--otlp-insecure", "--otlp-interval", "500ms", "--otlp-timeout", timeout.String(), "--otlp-headers-file", headers)
	wall := time.Since(began)
	if err != nil {
		t.Fatalf("record: %v\n%s", err, stderr)
	}
	if strings.Contains(stderr, "d0wn") {
		t.Errorf("record printed the token:\n%s", stderr)
	}
	if !strings.Contains(stderr, "OTLP export failing") || !strings.Contains(stderr, "never answered") ||
		!regexp.MustCompile(`exported 0 samples; not exported: .*[1-9][0-9]* left at stop`).MatchString(stderr) {
		t.Errorf("the failing endpoint, the give-up and the samples left unsent are not named:\n%s", stderr)
	}
	// A 2 s recording and its start and stop, on a loaded machine: far
	// less than the 2 minutes it waited before.
	if wall > timeout/2 {
		t.Errorf("record ran %v with an endpoint that never answered: it waited for it at stop\n%s", wall.Round(time.Second), stderr)
	}
}

// TestRecordOTLPEndpointSilent: with --otlp-endpoint taking connections
// and never answering, the request under way at stop gets up to
// --otlp-timeout, and record's "recorded" figure is the time it sampled,
// not that plus this wait: a 2 s run read "recorded 8.0s" before 32b54bd.
func TestRecordOTLPEndpointSilent(t *testing.T) {
	bpftest.Require(t)
	dir := t.TempDir()
	bin := buildHeatscope(t, dir)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		// Connections are taken and held, never read from or answered.
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	const timeout = 6 * time.Second
	began := time.Now()
	_, stderr, err := runHeatscope(bin, "record", "--data", filepath.Join(dir, "data"), "--duration", "2s", "--listen", "", "--progress", "0",
		"--otlp-endpoint", l.Addr().String(), "--otlp-insecure", "--otlp-interval", "500ms", "--otlp-timeout", timeout.String())
	wall := time.Since(began)
	if err != nil {
		t.Fatalf("record: %v\n%s", err, stderr)
	}
	if !regexp.MustCompile(`exported 0 samples; not exported: .*[1-9][0-9]* left at stop`).MatchString(stderr) {
		t.Errorf("the samples left unsent are not named:\n%s", stderr)
	}
	m := regexp.MustCompile(`recorded ([0-9.]+)s:`).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("no summary:\n%s", stderr)
	}
	recorded, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	// The run waited for the request under way at stop (up to the
	// timeout) after it sampled; that wait is no recording.
	if wall < timeout {
		t.Skipf("record ran %v, less than the request's wait at stop: nothing to tell apart", wall)
	}
	if recorded > (wall - timeout*2/3).Seconds() {
		t.Fatalf("recorded %.1fs in a run of %.1fs that waited up to %v for the endpoint at stop: the wait counted as recording\n%s", recorded, wall.Seconds(), timeout, stderr)
	}
}

// TestRecordOTLPFlags: wrong OTLP flags are usage errors that say what is
// wrong, before anything is recorded, and never show a header's value.
func TestRecordOTLPFlags(t *testing.T) {
	dir := t.TempDir()
	badHeaders := filepath.Join(dir, "bad-headers")
	if err := os.WriteFile(badHeaders, []byte("Authorization Bearer s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"--otlp-endpoint", "127.0.0.1:4317", "--otlp-protocol", "udp"}, "", `--otlp-protocol "udp": want grpc or http`},
		{[]string{"--otlp-endpoint", "127.0.0.1:4317", "--otlp-queue-size", "lots"}, "", "--otlp-queue-size"},
		{[]string{"--otlp-endpoint", "127.0.0.1:4317", "--otlp-compression", "zstd"}, "", `--otlp-compression "zstd": want gzip or none`},
		{[]string{"--otlp-endpoint", "127.0.0.1:4317", "--otlp-interval", "0s"}, "", "positive duration"},
		{[]string{"--otlp-endpoint", "127.0.0.1:4317", "--otlp-headers-file", filepath.Join(dir, "none")}, "", "--otlp-headers-file"},
		{[]string{"--otlp-endpoint", "127.0.0.1:4317", "--otlp-headers-file", badHeaders}, "", "line 1: want Name: value"},
		{[]string{"--otlp-endpoint", "127.0.0.1:4317"}, "Authorization=Bearer%zzs3cret", "$OTEL_EXPORTER_OTLP_HEADERS: headers: pair 1"},
		{[]string{"--otlp-endpoint", "http://127.0.0.1:4318", "--otlp-protocol", "http"}, "", "--otlp-insecure"},
	} {
		t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", c.env)
		var stdout, stderr bytes.Buffer
		args := append([]string{"record", "--data", filepath.Join(dir, "data"), "--listen", "", "--duration", "1s"}, c.args...)
		code := run(args, &stdout, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), c.want) || strings.Contains(stderr.String(), "s3cret") {
			t.Errorf("%v: exit %d, %q; want a usage error saying %q", c.args, code, stderr.String(), c.want)
		}
	}
}
