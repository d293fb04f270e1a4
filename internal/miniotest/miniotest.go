// Package miniotest runs a real MinIO server for tests: on a free loopback
// port, in a temporary directory, with random credentials and a throwaway
// bucket, and writes an objstore config file for it. Tests stop and
// restart it to see what heatscope does when its bucket goes away.
// Launch is the same server for programs that are not tests (the
// benchmarks), with errors in place of the test's failures.
//
// The server binary is $HEATSCOPE_MINIO, else
// ~/.cache/heatscope-minio/bin/minio (.ci/run installs it there). Without
// it the test is skipped with the reason; with HEATSCOPE_REQUIRE_MINIO=1
// (as CI sets) that skip is a failure.
package miniotest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/thanos-io/objstore"

	"github.com/heatscope/heatscope/bucket"
	"github.com/heatscope/heatscope/bucketlayout"
	"github.com/heatscope/heatscope/events"
	"github.com/heatscope/heatscope/internal/needs"
	"github.com/heatscope/heatscope/store"
)

// PinnedVersion is the MinIO release .ci/run installs.
const PinnedVersion = "github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c"

// Server is a running MinIO.
type Server struct {
	// Endpoint is host:port on 127.0.0.1.
	Endpoint string
	// AccessKey and SecretKey are the root credentials.
	AccessKey, SecretKey string
	// Bucket is the throwaway bucket the server was started with.
	Bucket string
	// Dir holds the server's data, the credential files and configs.
	Dir string
	// CAFile, for a server started by StartTLS, is the PEM certificate it
	// serves HTTPS with (self-signed for 127.0.0.1), which clients trust;
	// "" for plain HTTP.
	CAFile string

	// t is the test of a Server from Start or StartTLS; nil for Launch's.
	t      testing.TB
	binary string
	// accessKeyFile and secretKeyFile hold the root credentials.
	accessKeyFile, secretKeyFile string
	mu                           sync.Mutex
	cmd                          *exec.Cmd
	exited                       chan struct{}
}

// Binary returns the MinIO binary's path, or why there is none.
func Binary() (string, error) {
	path := os.Getenv("HEATSCOPE_MINIO")
	if path == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("no $HEATSCOPE_MINIO and no home directory: %w", err)
		}
		path = filepath.Join(home, ".cache", "heatscope-minio", "bin", "minio")
	}
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("no MinIO server binary at %s (install it: GOBIN=$HOME/.cache/heatscope-minio/bin go install %s, or set $HEATSCOPE_MINIO): %w", path, PinnedVersion, err)
	}
	if st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("MinIO server binary %s is not executable", path)
	}
	return path, nil
}

// Require returns the MinIO binary, or skips the test saying why (fails
// it under HEATSCOPE_REQUIRE_MINIO=1).
func Require(t testing.TB) string {
	t.Helper()
	path, err := Binary()
	if err != nil {
		needs.Missing(t, "HEATSCOPE_REQUIRE_MINIO", "this test needs a real MinIO server: "+err.Error())
	}
	return path
}

// Start starts MinIO on a free loopback port with a new bucket, and stops
// it and removes its data when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	return start(t, false)
}

// StartTLS is Start with the server on HTTPS, as S3, GCS and Azure are
// reached (plain HTTP is a MinIO on loopback's), under a self-signed
// certificate for 127.0.0.1 that Config trusts.
func StartTLS(t testing.TB) *Server {
	t.Helper()
	return start(t, true)
}

func start(t testing.TB, https bool) *Server {
	t.Helper()
	Require(t)
	dir := t.TempDir()
	var s *Server
	t.Cleanup(func() {
		if s != nil {
			s.Stop()
		}
		if t.Failed() {
			if b, err := os.ReadFile(filepath.Join(dir, logName)); err == nil && len(b) > 0 {
				t.Logf("minio log:\n%s", tail(b, 4096))
			}
		}
	})
	var err error
	if s, err = Launch(dir, Options{TLS: https}); err != nil {
		t.Fatalf("minio: %v", err)
	}
	s.t = t
	return s
}

// Options are how Launch starts a server.
type Options struct {
	// TLS serves HTTPS under a self-signed certificate for 127.0.0.1
	// (CAFile), as StartTLS does.
	TLS bool
}

// logName is the server's output, in Dir.
const logName = "minio.log"

// Launch starts MinIO with its data, log (minio.log), root credential
// files and configs under dir (which must exist), on a free loopback port
// with random root credentials, and makes a new bucket. It returns once
// the server serves; the caller stops it with Stop. It is Start for
// programs that are not tests, such as the benchmarks; the methods that
// take the test's failures (Restart, ConfigWith, WriteConfig,
// WriteConfigOf, Open, Objects) are for servers from Start or StartTLS.
//
// The server is in its own process group and is killed when the thread
// that started it exits, so a killed caller does not leave it behind.
func Launch(dir string, opts Options) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	s := &Server{binary: bin, Dir: dir,
		AccessKey: "hs" + randomHex(8), SecretKey: randomHex(20), Bucket: "heatscope-" + randomHex(4)}
	if opts.TLS {
		if s.CAFile, err = writeCert(filepath.Join(dir, "certs")); err != nil {
			return nil, fmt.Errorf("certificate: %w", err)
		}
	}
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("find a free port: %w", err)
	}
	s.Endpoint = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		return nil, err
	}
	if s.accessKeyFile, s.secretKeyFile, err = s.writeCredentials(s.AccessKey, s.SecretKey); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, logName), nil, 0o644); err != nil {
		return nil, err
	}
	if err := s.restart(); err != nil {
		return nil, err
	}
	mc, err := s.client()
	if err != nil {
		s.Stop()
		return nil, fmt.Errorf("client: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := mc.MakeBucket(ctx, s.Bucket, minio.MakeBucketOptions{}); err != nil {
		s.Stop()
		return nil, fmt.Errorf("create bucket %s: %w", s.Bucket, err)
	}
	return s, nil
}

func (s *Server) client() (*minio.Client, error) {
	return s.clientAs(s.AccessKey, s.SecretKey)
}

func (s *Server) clientAs(accessKey, secretKey string) (*minio.Client, error) {
	opts := &minio.Options{Creds: credentials.NewStaticV4(accessKey, secretKey, ""), MaxRetries: 1}
	if s.CAFile != "" {
		pem, err := os.ReadFile(s.CAFile)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		opts.Secure = true
		opts.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	}
	return minio.New(s.Endpoint, opts)
}

// writeCert writes a self-signed certificate for 127.0.0.1 and its key
// into dir as MinIO's --certs-dir wants them, and returns the
// certificate's path.
func writeCert(dir string) (string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "heatscope test minio"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", err
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	crt := filepath.Join(dir, "public.crt")
	if err := os.WriteFile(crt, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "private.key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), 0o600); err != nil {
		return "", err
	}
	return crt, nil
}

// Restart starts the server again (after Stop) on the same port and data;
// it returns once the server answers its readiness probe.
func (s *Server) Restart() {
	s.test().Helper()
	if err := s.restart(); err != nil {
		s.t.Fatalf("minio: %v", err)
	}
}

// restart starts the server and waits until it serves; if it does not,
// it is stopped and the error says why.
func (s *Server) restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("Restart while running")
	}
	args := []string{"server", "--quiet", "--address", s.Endpoint, "--console-address", "127.0.0.1:0"}
	if s.CAFile != "" {
		args = append(args, "--certs-dir", filepath.Dir(s.CAFile))
	}
	logPath := filepath.Join(s.Dir, logName)
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.binary, append(args, filepath.Join(s.Dir, "data"))...)
	cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+s.AccessKey, "MINIO_ROOT_PASSWORD="+s.SecretKey,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off", "MINIO_CI_CD=1", "HOME="+s.Dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	logf.Close() // the server has its own descriptor
	if err != nil {
		return fmt.Errorf("start %s: %w", s.binary, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	s.cmd, s.exited = cmd, exited
	if err := s.awaitServing(); err != nil {
		s.stopLocked()
		return err
	}
	return nil
}

// awaitServing waits up to 60 s until the started server serves requests
// and its IAM is up.
func (s *Server) awaitServing() error {
	// The readiness probe answers before the object layer is up: a
	// request through the API is what tells it serves.
	mc, err := s.client()
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	stranger, err := s.clientAs("probe"+randomHex(8), randomHex(20))
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = mc.ListBuckets(ctx)
		if err == nil {
			// Its IAM comes up after the root user works: until then an
			// unknown key gets "not initialized", not a refusal.
			_, err = stranger.ListBuckets(ctx)
			if err != nil && !strings.Contains(err.Error(), "not initialized") {
				cancel()
				return nil
			}
		}
		cancel()
		select {
		case <-s.exited:
			b, _ := os.ReadFile(filepath.Join(s.Dir, logName))
			return fmt.Errorf("exited at start: %s", tail(b, 2048))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not serving after 60 s at %s (last: %v)", s.Endpoint, err)
		}
	}
}

// Pause stops the server's processes (SIGSTOP): the kernel still accepts
// connections on its port, but nothing answers, as a hung or black-holed
// store. Resume continues them.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused server.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		syscall.Kill(-s.cmd.Process.Pid, sig)
	}
}

// Stop stops the server (SIGTERM, then SIGKILL after 10 s) and waits for
// it; the data stays for Restart. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
}

func (s *Server) stopLocked() {
	if s.cmd == nil {
		return
	}
	select {
	case <-s.exited: // (its process group is gone: no signal to a reused id)
		s.cmd = nil
		return
	default:
	}
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGCONT) // if paused
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.exited
	}
	s.cmd = nil
}

// Config returns an objstore config for the bucket under prefix, with the
// root credentials in files under Dir.
func (s *Server) Config(prefix string) bucket.Config {
	return s.config(prefix, s.Bucket, s.accessKeyFile, s.secretKeyFile)
}

func (s *Server) config(prefix, bucketName, accessKeyFile, secretKeyFile string) bucket.Config {
	conn := bucket.TLS{Insecure: true}
	if s.CAFile != "" {
		conn = bucket.TLS{CAFile: s.CAFile}
	}
	return bucket.Config{Provider: "s3", Bucket: bucketName, Endpoint: s.Endpoint, Prefix: prefix,
		TLS: conn, Credentials: bucket.Credentials{AccessKeyFile: accessKeyFile, SecretKeyFile: secretKeyFile}}
}

// ConfigWith is Config with other credentials or another bucket, for
// tests of what a wrong one does.
func (s *Server) ConfigWith(prefix, accessKey, secretKey, bucketName string) bucket.Config {
	s.test().Helper()
	ak, sk, err := s.writeCredentials(accessKey, secretKey)
	if err != nil {
		s.t.Fatal(err)
	}
	return s.config(prefix, bucketName, ak, sk)
}

// writeCredentials writes the keys into files in a new directory under
// Dir and returns their paths.
func (s *Server) writeCredentials(accessKey, secretKey string) (accessKeyFile, secretKeyFile string, err error) {
	dir, err := os.MkdirTemp(s.Dir, "creds-")
	if err != nil {
		return "", "", err
	}
	ak, sk := filepath.Join(dir, "access-key"), filepath.Join(dir, "secret-key")
	for path, v := range map[string]string{ak: accessKey, sk: secretKey} {
		if err := os.WriteFile(path, []byte(v+"\n"), 0o600); err != nil {
			return "", "", err
		}
	}
	return ak, sk, nil
}

// WriteConfig writes Config(prefix) as an objstore config file and
// returns its path.
func (s *Server) WriteConfig(prefix string) string {
	s.test().Helper()
	return s.WriteConfigOf(s.Config(prefix))
}

// WriteConfigOf writes cfg as an objstore config file and returns its path.
func (s *Server) WriteConfigOf(cfg bucket.Config) string {
	s.test().Helper()
	path, err := s.ConfigFile(cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	return path
}

// ConfigFile writes cfg (a Config of this server's) as an objstore config
// file in a new file under Dir and returns its path.
func (s *Server) ConfigFile(cfg bucket.Config) (string, error) {
	f, err := os.CreateTemp(s.Dir, "objstore-*.yaml")
	if err != nil {
		return "", err
	}
	_, err = fmt.Fprintf(f, "provider: %s\nbucket: %s\nendpoint: %s\nprefix: %q\ntls:\n  insecure: %t\n  ca_file: %q\ncredentials:\n  access_key_file: %s\n  secret_key_file: %s\n",
		cfg.Provider, cfg.Bucket, cfg.Endpoint, cfg.Prefix, cfg.TLS.Insecure, cfg.TLS.CAFile, cfg.Credentials.AccessKeyFile, cfg.Credentials.SecretKeyFile)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("write objstore config %s: %w", f.Name(), err)
	}
	return f.Name(), nil
}

// test is the test of a Server from Start or StartTLS, for the methods
// that fail it; a Server from Launch has none.
func (s *Server) test() testing.TB {
	if s.t == nil {
		panic("miniotest: a test helper called on a Server from Launch; use Start or StartTLS in tests")
	}
	return s.t
}

// Open opens the bucket under prefix, closed when the test ends.
func (s *Server) Open(prefix string) *bucket.Bucket {
	s.test().Helper()
	b, err := bucket.Open(context.Background(), s.Config(prefix), bucket.Options{Component: "test"})
	if err != nil {
		s.t.Fatalf("minio: open bucket: %v", err)
	}
	s.t.Cleanup(func() { b.Close() })
	return b
}

// Objects lists every object name under prefix (recursively), through the
// root credentials.
func (s *Server) Objects(prefix string) []string {
	s.test().Helper()
	mc, err := s.client()
	if err != nil {
		s.t.Fatal(err)
	}
	var names []string
	for o := range mc.ListObjects(context.Background(), s.Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			s.t.Fatalf("minio: list %s: %v", prefix, o.Err)
		}
		names = append(names, o.Key)
	}
	return names
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(errors.New("crypto/rand failed"))
	}
	return hex.EncodeToString(b)
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// UploadBlocks puts every block of the data directory dir into bkt under
// node, as the recorder's shipper does: data first, meta.json last. It
// returns the block ids.
func UploadBlocks(t testing.TB, bkt objstore.Bucket, node, dir string) []string {
	t.Helper()
	blocks, err := store.LocalBlocks(dir)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, b := range blocks {
		obj := bucketlayout.Block{Node: node, ID: b.ID}
		uploadFile(t, bkt, obj.Object(bucketlayout.DataFile), b.DataPath())
		uploadFile(t, bkt, obj.Object(bucketlayout.MetaFile), b.MetaPath())
		ids = append(ids, b.ID)
	}
	return ids
}

// UploadSegments puts the event segments of the data directory dir into
// bkt under node, named as shippers named them before instance ids named
// them (<node>/events/<segment>, which readers still read).
func UploadSegments(t testing.TB, bkt objstore.Bucket, node, dir string) {
	t.Helper()
	segs, err := store.EventSegmentFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range segs {
		uploadFile(t, bkt, bucketlayout.EventSegment{Node: node, Seq: s.Seq}.Key(), s.Path)
	}
}

func uploadFile(t testing.TB, bkt objstore.Bucket, name, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := bkt.Upload(context.Background(), name, bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
}

// UploadEvents appends evs to a new data directory of node and puts its
// event segments into bkt under node, named as shippers named them before
// instance ids named them (<node>/events/<segment>, which readers still
// read).
func UploadEvents(t testing.TB, bkt objstore.Bucket, node string, evs []events.Event) {
	t.Helper()
	dir := t.TempDir()
	db, err := store.Open(dir, store.Options{Source: node, Node: node, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if err := db.AppendEvent(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if segs, err := store.EventSegmentFiles(dir); err != nil || len(segs) == 0 {
		t.Fatalf("no event segment written: %v", err)
	}
	UploadSegments(t, bkt, node, dir)
}
