// Package otelcoltest runs a real OpenTelemetry Collector for tests: the
// program in collector/ (its own Go module, built from the collector's
// modules at one release, v0.165.0), built once per version of its
// sources into ~/.cache/heatscope-otelcol and started as a process of its
// own on loopback ports, with the profiles signal's feature gate on. Its
// OTLP receiver takes what heatscope sends; its pipeline forwards the
// profiles to an OTLP endpoint (heatscope's receiver) and prints them with
// the debug exporter, whose output a test reads back.
//
// Without a Go toolchain, or when the build fails (no module proxy), the
// test is skipped with the reason; with HEATSCOPE_REQUIRE_COLLECTOR=1 (as
// CI sets) that skip is a failure.
package otelcoltest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/needs"
)

// FeatureGate is the Collector's gate for the profiles signal (alpha in
// v0.165.0): without it a profiles pipeline is refused.
const FeatureGate = "service.profilesSupport"

// readyLine is what the Collector logs once every pipeline runs.
const readyLine = "Everything is ready"

// Binary returns the Collector's path, building it first when the cache
// has no build of the current sources. The build (a few minutes the first
// time) is shared by every test package through the cache, under a lock.
func Binary() (string, error) {
	src, err := sourceDir()
	if err != nil {
		return "", err
	}
	key, err := sourceKey(src)
	if err != nil {
		return "", err
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no home directory for the Collector's cache: %w", err)
	}
	dir := filepath.Join(home, ".cache", "heatscope-otelcol", key)
	bin := filepath.Join(dir, "heatscope-otelcol")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("collector cache: %w", err)
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(bin); err == nil {
		return bin, nil // another package built it while this one waited
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, serr := os.Stat(goTool); serr != nil {
			return "", fmt.Errorf("no go command to build the Collector: %w", err)
		}
	}
	tmp := bin + ".tmp"
	cmd := exec.Command(goTool, "build", "-o", tmp, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the Collector in %s: %w\n%s", src, err, tail(out, 4096))
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", fmt.Errorf("collector cache: %w", err)
	}
	fmt.Fprintf(os.Stderr, "otelcoltest: built the Collector into %s in %s\n", bin, time.Since(start).Round(time.Second))
	return bin, nil
}

// Require returns the Collector's path, or skips the test saying why
// (fails it under HEATSCOPE_REQUIRE_COLLECTOR=1).
func Require(t testing.TB) string {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		needs.Missing(t, "HEATSCOPE_REQUIRE_COLLECTOR", "this test needs a real OpenTelemetry Collector: "+err.Error())
	}
	return bin
}

// sourceDir is collector/, beside this file.
func sourceDir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot find otelcoltest's source directory")
	}
	dir := filepath.Join(filepath.Dir(file), "collector")
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return "", fmt.Errorf("the Collector's sources: %w", err)
	}
	return dir, nil
}

// sourceKey hashes the Collector's sources and module files: a change to
// any of them is a new build.
func sourceKey(dir string) (string, error) {
	h := sha256.New()
	for _, name := range []string{"go.mod", "go.sum", "main.go"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return "", fmt.Errorf("the Collector's sources: %w", err)
		}
		fmt.Fprintf(h, "%s %d\n", name, len(b))
		h.Write(b)
	}
	fmt.Fprintln(h, runtime.Version())
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// lockDir takes an exclusive lock on dir/.lock, so that two test
// packages do not build the same Collector at once.
func lockDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("collector cache lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("collector cache lock: %w", err)
	}
	return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

// Config says where the Collector forwards the profiles it receives.
type Config struct {
	// GRPCEndpoint, when not "", is host:port of an OTLP gRPC endpoint
	// (plain text) the otlp exporter sends the profiles to.
	GRPCEndpoint string
	// HTTPEndpoint, when not "", is the base URL of an OTLP/HTTP
	// endpoint (http://host:port) the otlphttp exporter sends them to.
	HTTPEndpoint string
	// Headers go with every export request (an authorization header).
	Headers map[string]string
	// RetryMaxElapsed bounds how long an exporter retries a batch
	// (default 5 minutes, the Collector's).
	RetryMaxElapsed time.Duration
	// Compression is the exporters' compression: "" for the Collector's
	// default (gzip), or one the Collector knows ("none", "zstd", …).
	Compression string
}

// Collector is a running Collector: its own receiver on GRPCAddr and
// HTTPAddr, the debug exporter's output in Output.
type Collector struct {
	// GRPCAddr and HTTPAddr are host:port of its OTLP receiver on
	// 127.0.0.1 (gRPC, and HTTP with the profiles at HTTPPath).
	GRPCAddr, HTTPAddr string

	t      testing.TB
	bin    string
	config string
	out    *syncBuffer
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// HTTPPath is where the Collector's OTLP receiver takes profiles over
// HTTP (v0.165.0's default).
const HTTPPath = "/v1development/profiles"

// Start builds (or takes from the cache) and starts a Collector on free
// loopback ports with cfg, waits until it is ready, and stops it when the
// test ends.
func Start(t testing.TB, cfg Config) *Collector {
	t.Helper()
	bin := Require(t)
	c := &Collector{t: t, bin: bin, out: &syncBuffer{}}
	grpcPort, err := freePort()
	if err != nil {
		t.Fatalf("collector: %v", err)
	}
	httpPort, err := freePort()
	if err != nil {
		t.Fatalf("collector: %v", err)
	}
	c.GRPCAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(grpcPort))
	c.HTTPAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(httpPort))
	c.config = filepath.Join(t.TempDir(), "otelcol.yaml")
	if err := os.WriteFile(c.config, []byte(c.yaml(cfg)), 0o600); err != nil {
		t.Fatalf("collector config: %v", err)
	}
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			t.Logf("collector output:\n%s", tail([]byte(c.Output()), 8192))
		}
	})
	if err := c.start(); err != nil {
		t.Fatalf("collector: %v", err)
	}
	return c
}

// yaml is the Collector's config: the OTLP receiver on c's ports, and a
// profiles pipeline to the debug exporter (detailed, on stdout) and to
// cfg's endpoints, each with a queue and retries.
func (c *Collector) yaml(cfg Config) string {
	var b strings.Builder
	retry := cfg.RetryMaxElapsed
	if retry == 0 {
		retry = 5 * time.Minute
	}
	fmt.Fprintf(&b, "receivers:\n  otlp:\n    protocols:\n      grpc:\n        endpoint: %s\n      http:\n        endpoint: %s\n", c.GRPCAddr, c.HTTPAddr)
	b.WriteString("exporters:\n  debug:\n    verbosity: detailed\n    use_internal_logger: false\n")
	exporters := []string{"debug"}
	headers := func() {
		if len(cfg.Headers) == 0 {
			return
		}
		b.WriteString("    headers:\n")
		for k, v := range cfg.Headers {
			fmt.Fprintf(&b, "      %s: %q\n", k, v)
		}
	}
	compression := func() {
		if cfg.Compression != "" {
			fmt.Fprintf(&b, "    compression: %s\n", cfg.Compression)
		}
	}
	retryOn := func() {
		fmt.Fprintf(&b, "    retry_on_failure:\n      enabled: true\n      initial_interval: 200ms\n      max_interval: 1s\n      max_elapsed_time: %s\n", retry)
		b.WriteString("    sending_queue:\n      enabled: true\n")
	}
	if cfg.GRPCEndpoint != "" {
		fmt.Fprintf(&b, "  otlp_grpc:\n    endpoint: %s\n    tls:\n      insecure: true\n", cfg.GRPCEndpoint)
		headers()
		compression()
		retryOn()
		exporters = append(exporters, "otlp_grpc")
	}
	if cfg.HTTPEndpoint != "" {
		fmt.Fprintf(&b, "  otlp_http:\n    endpoint: %s\n", cfg.HTTPEndpoint)
		headers()
		compression()
		retryOn()
		exporters = append(exporters, "otlp_http")
	}
	fmt.Fprintf(&b, "service:\n  telemetry:\n    metrics:\n      level: none\n  pipelines:\n    profiles:\n      receivers: [otlp]\n      exporters: [%s]\n",
		strings.Join(exporters, ", "))
	return b.String()
}

// start runs the Collector and waits until it says it is ready and its
// ports answer.
func (c *Collector) start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	mark := c.out.Len()
	cmd := exec.Command(c.bin, "--config", c.config, "--feature-gates="+FeatureGate)
	cmd.Stdout, cmd.Stderr = c.out, c.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", c.bin, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	c.cmd, c.exited = cmd, exited
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("the Collector exited at start: %s", tail([]byte(c.out.From(mark)), 4096))
		case <-time.After(50 * time.Millisecond):
		}
		if strings.Contains(c.out.From(mark), readyLine) && answers(c.GRPCAddr) && answers(c.HTTPAddr) {
			return nil
		}
	}
	cmd.Process.Kill()
	<-exited
	return fmt.Errorf("the Collector was not ready within 60 s: %s", tail([]byte(c.out.From(mark)), 4096))
}

// Stop stops the Collector (SIGTERM: its queues are drained as far as its
// exporters can within their shutdown) and waits for it; stopping a
// stopped Collector does nothing.
func (c *Collector) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil {
		return
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		c.cmd.Process.Kill()
		<-c.exited
	}
	c.cmd = nil
}

// Restart starts the stopped Collector again, on the same ports.
func (c *Collector) Restart() {
	c.t.Helper()
	if err := c.start(); err != nil {
		c.t.Fatalf("collector restart: %v", err)
	}
}

// Output is everything the Collector printed, across its restarts: its
// logs and the debug exporter's dump of every profile it received.
func (c *Collector) Output() string { return c.out.String() }

// answers reports whether addr takes TCP connections.
func answers(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// syncBuffer is the Collector's output, written by its process's pipes
// and read by the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Len is how many bytes were written so far.
func (b *syncBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}

// From is what was written after the first mark bytes.
func (b *syncBuffer) From(mark int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf.Bytes()[mark:])
}
