package otlpexport

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/klauspost/compress/gzip"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	backoffconfig "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/heatscope/heatscope/internal/grpcgzip"
)

// ProfilesPath is where an OTLP/HTTP endpoint takes profiles: the
// OpenTelemetry Collector's OTLP receiver's path for them (v0.165.0),
// which it does not let be changed.
const ProfilesPath = "/v1development/profiles"

// client sends one request to the endpoint.
type client interface {
	// export sends the protobuf of one request, which it does not
	// change (it is sent again when retried). Its error is an
	// *exportError saying whether the request may be retried, or a
	// *partialError; a request taken whole may come back with the
	// endpoint's warning.
	export(ctx context.Context, body []byte) (warning string, err error)
	close() error
}

// taken reads the response to a request the endpoint took: a partial
// success that rejected profiles is a *partialError; one that rejected
// none and says something is a warning (OTLP's way of warning a sender).
// A response that does not read says nothing.
func taken(out []byte) (warning string, err error) {
	resp := pprofileotlp.NewExportResponse()
	if resp.UnmarshalProto(out) != nil {
		return "", nil
	}
	ps := resp.PartialSuccess()
	if ps.RejectedProfiles() > 0 {
		return "", &partialError{rejected: ps.RejectedProfiles(), message: ps.ErrorMessage()}
	}
	return ps.ErrorMessage(), nil
}

// exportError is a failed export: whether sending it again may succeed
// (the endpoint is down, overloaded or throttling), after how long the
// endpoint asked to be left alone (0: it did not say), and whether the
// request reached the endpoint at all (no connection: unreached).
type exportError struct {
	err       error
	retryable bool
	after     time.Duration
	unreached bool
}

func (e *exportError) Error() string { return e.err.Error() }
func (e *exportError) Unwrap() error { return e.err }

// partialError is an export the endpoint took in part: the profiles it
// rejected, and why. It is not retried.
type partialError struct {
	rejected int64
	message  string
}

func (e *partialError) Error() string {
	return fmt.Sprintf("the endpoint rejected %d of the request's profiles: %s", e.rejected, e.message)
}

// tlsConfig is the TLS configuration of a non-insecure endpoint: the
// system's roots, or those of caFile.
func tlsConfig(caFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile == "" {
		return cfg, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("otlp CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("otlp CA file %s: no PEM certificate in it", caFile)
	}
	cfg.RootCAs = pool
	return cfg, nil
}

// printable is an endpoint as errors show it: a URL's user information,
// which may be a credential, left out.
func printable(endpoint string) string {
	if u, err := url.Parse(endpoint); err == nil && u.User != nil {
		u.User = nil
		return u.String() + " (its user information left out)"
	}
	if i := strings.LastIndex(endpoint, "@"); i >= 0 {
		return "…" + endpoint[i:]
	}
	return endpoint
}

// splitEndpoint reads an endpoint, host:port or a URL, and checks its
// scheme against insecure: http:// is plaintext, https:// is TLS.
func splitEndpoint(endpoint string, insecure bool) (hostport, path string, err error) {
	hostport, path, err = readEndpoint(endpoint, insecure)
	if err != nil {
		return "", "", fmt.Errorf("otlp endpoint %s: %w", printable(endpoint), err)
	}
	return hostport, path, nil
}

func readEndpoint(endpoint string, insecure bool) (hostport, path string, err error) {
	if !strings.Contains(endpoint, "://") {
		if _, _, err := net.SplitHostPort(endpoint); err != nil {
			return "", "", errors.New("want host:port or a URL")
		}
		return endpoint, "", nil
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", "", errors.New("want host:port or a URL of a host, a port and a path")
	}
	switch {
	case u.Scheme == "http" && !insecure:
		return "", "", errors.New("http:// is plaintext: give https:// or, to send in the clear, --otlp-insecure")
	case u.Scheme == "https" && insecure:
		return "", "", errors.New("https:// with --otlp-insecure: choose one")
	case u.Scheme != "http" && u.Scheme != "https":
		return "", "", fmt.Errorf("scheme %q: want http or https", u.Scheme)
	}
	host := u.Host
	if u.Port() == "" {
		return "", "", errors.New("give the port")
	}
	return host, u.Path, nil
}

// exportMethod is the OTLP profiles service's Export method.
const exportMethod = "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export"

// grpcClient exports over OTLP/gRPC: the request's protobuf, as pdata
// marshaled it when the batch was cut, is the message of the profiles
// service's Export, and pdata reads the response. (The collector's own
// client takes pdata and copies each request whole before it marshals
// it: the agent's garbage.)
type grpcClient struct {
	conn    *grpc.ClientConn
	headers metadata.MD
	opts    []grpc.CallOption
}

func newGRPCClient(cfg *Config, firstBackoff time.Duration) (*grpcClient, error) {
	target, path, err := splitEndpoint(cfg.Endpoint, cfg.Insecure)
	if err != nil {
		return nil, err
	}
	if path != "" && path != "/" {
		return nil, fmt.Errorf("otlp endpoint %s: a gRPC endpoint has no path", printable(cfg.Endpoint))
	}
	creds := insecure.NewCredentials()
	if !cfg.Insecure {
		tc, err := tlsConfig(cfg.CAFile)
		if err != nil {
			return nil, err
		}
		creds = credentials.NewTLS(tc)
	}
	// gRPC's own reconnection backs off as the exporter does, not to
	// its default two minutes: a Collector back from a restart is
	// reached within maxBackoff.
	reconnect := backoffconfig.DefaultConfig
	reconnect.BaseDelay, reconnect.MaxDelay = firstBackoff, firstBackoff*(maxBackoff/minBackoff)
	conn, err := grpc.NewClient("dns:///"+target, grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: reconnect, MinConnectTimeout: cfg.Timeout}))
	if err != nil {
		return nil, fmt.Errorf("otlp endpoint %s: %w", printable(cfg.Endpoint), err)
	}
	headers := metadata.New(cfg.Headers)
	headers.Set(pprofileotlp.DevelopmentVersionHeader, pprofileotlp.DevelopmentVersion)
	opts := []grpc.CallOption{grpc.ForceCodecV2(rawCodec{})}
	if cfg.Compression == CompressionGzip {
		opts = append(opts, grpc.UseCompressor(grpcgzip.Name))
	}
	return &grpcClient{conn: conn, headers: headers, opts: opts}, nil
}

func (c *grpcClient) export(ctx context.Context, body []byte) (string, error) {
	ctx = metadata.NewOutgoingContext(ctx, c.headers)
	var out []byte
	var p peer.Peer // set once the call is on a connection to the endpoint
	if err := c.conn.Invoke(ctx, exportMethod, body, &out, append(c.opts[:len(c.opts):len(c.opts)], grpc.Peer(&p))...); err != nil {
		e := grpcError(err)
		e.unreached = p.Addr == nil
		return "", e
	}
	return taken(out)
}

// rawCodec passes protobuf through gRPC as it is: a request pdata
// marshaled, a response pdata reads. Its name is the content subtype
// OTLP servers take, "proto".
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, ok := v.([]byte)
	if !ok {
		return nil, fmt.Errorf("otlp grpc: a %T is not a marshaled message", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	p, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("otlp grpc: cannot read a message into a %T", v)
	}
	*p = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

func (c *grpcClient) close() error { return c.conn.Close() }

// grpcError classifies a gRPC error as OTLP/gRPC says: the codes of a
// transient condition are retried, after the delay the server's RetryInfo
// asks for; ResourceExhausted only with one (the server can recover).
func grpcError(err error) *exportError {
	st := status.Convert(err)
	var after time.Duration
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			after = ri.GetRetryDelay().AsDuration()
		}
	}
	retryable := false
	switch st.Code() {
	case codes.Canceled, codes.DeadlineExceeded, codes.Aborted, codes.OutOfRange, codes.Unavailable, codes.DataLoss:
		retryable = true
	case codes.ResourceExhausted:
		retryable = after > 0
	}
	return &exportError{err: fmt.Errorf("otlp grpc: %s: %s", st.Code(), st.Message()), retryable: retryable, after: after}
}

// httpClient exports over OTLP/HTTP: the request's protobuf, POSTed,
// gzip-compressed unless the configuration says none.
type httpClient struct {
	url     string
	headers map[string]string
	client  *http.Client
	// gz, when compressing, is the one gzip writer of the client's
	// requests (export is called by one goroutine at a time), reset for
	// each; at grpcgzip's stateless level it holds no tables between
	// requests.
	gz *gzip.Writer
}

func newHTTPClient(cfg *Config) (*httpClient, error) {
	hostport, path, err := splitEndpoint(cfg.Endpoint, cfg.Insecure)
	if err != nil {
		return nil, err
	}
	if path == "" || path == "/" {
		path = ProfilesPath
	}
	scheme := "https"
	transport := http.DefaultTransport.(*http.Transport).Clone()
	if cfg.Insecure {
		scheme = "http"
	} else if transport.TLSClientConfig, err = tlsConfig(cfg.CAFile); err != nil {
		return nil, err
	}
	transport.Proxy = nil // an endpoint is reached directly, as the gRPC exporter does
	u := url.URL{Scheme: scheme, Host: hostport, Path: path}
	c := &httpClient{url: u.String(), headers: cfg.Headers, client: &http.Client{Transport: transport}}
	if cfg.Compression == CompressionGzip {
		c.gz = newGzipWriter()
	}
	return c, nil
}

func (c *httpClient) export(ctx context.Context, body []byte) (string, error) {
	if c.gz != nil {
		// A new buffer each time: the transport may read a body
		// after Do returns.
		z := bytes.NewBuffer(make([]byte, 0, len(body)/4))
		c.gz.Reset(z)
		if _, err := c.gz.Write(body); err != nil {
			return "", &exportError{err: fmt.Errorf("otlp http: gzip: %w", err)}
		}
		if err := c.gz.Close(); err != nil {
			return "", &exportError{err: fmt.Errorf("otlp http: gzip: %w", err)}
		}
		body = z.Bytes()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return "", &exportError{err: fmt.Errorf("otlp http: %w", err)}
	}
	for k, v := range c.headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	if c.gz != nil {
		req.Header.Set("Content-Encoding", "gzip")
	}
	req.Header.Set(pprofileotlp.DevelopmentVersionHeader, pprofileotlp.DevelopmentVersion)
	resp, err := c.client.Do(req)
	if err != nil {
		// Not reached, refused, reset, timed out: all transient. The
		// URL is in the error, no header is.
		return "", &exportError{err: fmt.Errorf("otlp http: %w", err), retryable: true, unreached: true}
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 == 2 {
		return taken(msg)
	}
	e := &exportError{err: fmt.Errorf("otlp http: %s: %s", resp.Status, responseText(msg))}
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		e.retryable = true
		e.after = retryAfter(resp.Header.Get("Retry-After"), time.Now())
	}
	return "", e
}

func (c *httpClient) close() error {
	c.client.CloseIdleConnections()
	return nil
}

// responseText is the start of an error response's body, as one line of
// printable text (a Collector answers with a google.rpc.Status protobuf,
// whose message is readable within it).
func responseText(b []byte) string {
	var out strings.Builder
	for _, r := range string(b) {
		if out.Len() >= 200 {
			out.WriteString("…")
			break
		}
		if r >= ' ' && r != 0x7f && r != '\uFFFD' {
			out.WriteRune(r)
		}
	}
	return strings.TrimSpace(out.String())
}

// retryAfter reads a Retry-After header: seconds or an HTTP date; 0 when
// absent or unreadable.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// errUnknownProtocol is the error of a protocol other than grpc or http.
var errUnknownProtocol = errors.New("want grpc or http")
