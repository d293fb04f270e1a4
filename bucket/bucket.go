package bucket

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/prometheus/common/model"
	"github.com/thanos-io/objstore"
	"github.com/thanos-io/objstore/exthttp"
	"github.com/thanos-io/objstore/providers/filesystem"
	"github.com/thanos-io/objstore/providers/s3"
)

// Options tune Open.
type Options struct {
	// Logger receives the client library's messages, credentials removed
	// (default slog.Default()).
	Logger *slog.Logger
	// Component names the caller in the client's User-Agent ("record").
	Component string
	// ResponseTimeout bounds the wait for a response's headers (default
	// 30 s): an unreachable store fails an operation, never hangs it.
	ResponseTimeout time.Duration
	// MaxRetries is how often the client itself retries a failed request
	// (s3, gcs: default 2). Callers retry with their own backoff on top.
	MaxRetries int
}

// Bucket is an object store opened from a Config. It implements
// objstore.Bucket, with every object name relative to the config's
// prefix, and every error an *Error that names the bucket, the operation
// and the object, with credentials removed.
type Bucket struct {
	inner objstore.Bucket
	name  string
	scrubber
	// noCredentials, for an s3 bucket given no credential files, says
	// where credentials were looked for; unsigned is whether the latest
	// request went out without any (see unsignedTransport).
	noCredentials string
	unsigned      atomic.Bool
	// fsRoot is the filesystem provider's directory, prefix included
	// ("" for other providers): its conditional writes work on files.
	fsRoot string
}

var _ objstore.Bucket = (*Bucket)(nil)

// Open returns a client for cfg. It reads credential files but makes no
// request: Check does.
func Open(ctx context.Context, cfg Config, opts Options) (*Bucket, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("objstore config: %w", err)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Component == "" {
		opts.Component = "heatscope"
	}
	if opts.ResponseTimeout <= 0 {
		opts.ResponseTimeout = 30 * time.Second
	}
	if opts.MaxRetries <= 0 {
		opts.MaxRetries = 2
	}
	open := openers[cfg.Provider]
	if open == nil {
		return nil, fmt.Errorf("objstore config: provider %s: %s", cfg.Provider, notBuiltIn[cfg.Provider])
	}
	b := &Bucket{name: cfg.Name()}
	for _, v := range envSecrets() {
		b.add(v)
	}
	httpCfg := exthttp.DefaultHTTPConfig
	httpCfg.ResponseHeaderTimeout = model.Duration(opts.ResponseTimeout)
	httpCfg.TLSConfig = exthttp.TLSConfig{CAFile: cfg.TLS.CAFile, ServerName: cfg.TLS.ServerName, InsecureSkipVerify: cfg.TLS.InsecureSkipVerify}
	inner, err := open(ctx, cfg, opening{b: b, opts: opts, http: httpCfg, logger: slogKit{log: opts.Logger, scrub: b.scrub}})
	if cred := (credentialError{}); errors.As(err, &cred) {
		return nil, err // names the bucket and the file already
	}
	if err != nil {
		return nil, b.wrap("open", "", err)
	}
	if p := strings.Trim(cfg.Prefix, "/"); p != "" {
		inner = objstore.NewPrefixedBucket(inner, p)
	}
	b.inner = inner
	if cfg.Provider == "filesystem" {
		b.fsRoot = filepath.Join(cfg.Directory, filepath.FromSlash(strings.Trim(cfg.Prefix, "/")))
	}
	return b, nil
}

// opener opens one provider's bucket.
type opener func(ctx context.Context, cfg Config, o opening) (objstore.Bucket, error)

// opening is what every provider's opener is given.
type opening struct {
	b      *Bucket
	opts   Options
	http   exthttp.HTTPConfig
	logger slogKit
}

// credentialError is a credential file that could not be read.
type credentialError struct{ err error }

func (e credentialError) Error() string { return e.err.Error() }
func (e credentialError) Unwrap() error { return e.err }

// readCredential returns the trimmed contents of the credential file at
// path ("" without one).
func (o opening) readCredential(path, what string) (string, error) {
	if path == "" {
		return "", nil
	}
	v, err := os.ReadFile(path)
	if err != nil {
		return "", credentialError{fmt.Errorf("bucket %s: read %s: %w", o.b.name, what, err)}
	}
	s := strings.TrimSpace(string(v))
	if s == "" {
		return "", credentialError{fmt.Errorf("bucket %s: %s %s is empty", o.b.name, what, path)}
	}
	return s, nil
}

// readSecret is readCredential for a secret: errors and logs are scrubbed
// of its value.
func (o opening) readSecret(path, what string) (string, error) {
	s, err := o.readCredential(path, what)
	o.b.add(s)
	return s, err
}

// openers are the providers built into this binary: s3 and filesystem
// always, gcs and azure with the build tags of the same names (gcs.go,
// azure.go).
var openers = map[string]opener{"s3": openS3, "filesystem": openFilesystem}

// notBuiltIn says, for each provider a binary may lack, how to get it.
var notBuiltIn = map[string]string{
	"gcs": "not built into this heatscope (build it with `make build TAGS=gcs`); " +
		"Google Cloud Storage also answers S3 requests: provider s3, endpoint storage.googleapis.com, with HMAC keys",
	"azure": "not built into this heatscope (build it with `make build TAGS=azure`)",
}

func openS3(_ context.Context, cfg Config, o opening) (objstore.Bucket, error) {
	c := s3.DefaultConfig
	c.Bucket, c.Endpoint, c.Region, c.Insecure = cfg.Bucket, cfg.Endpoint, cfg.Region, cfg.TLS.Insecure
	c.HTTPConfig = o.http
	c.MaxRetries = o.opts.MaxRetries
	cr := cfg.Credentials
	var err error
	if c.AccessKey, err = o.readCredential(cr.AccessKeyFile, "access key file"); err != nil {
		return nil, err
	}
	if c.SecretKey, err = o.readSecret(cr.SecretKeyFile, "secret key file"); err != nil {
		return nil, err
	}
	if c.SessionToken, err = o.readSecret(cr.SessionTokenFile, "session token file"); err != nil {
		return nil, err
	}
	if c.AccessKey == "" {
		o.b.noCredentials = s3NoCredentials()
		if v, err := (&credentials.FileAWSCredentials{}).Retrieve(); err == nil {
			o.b.add(v.SecretAccessKey)
			o.b.add(v.SessionToken)
		}
	}
	wrap := func(next http.RoundTripper) http.RoundTripper {
		return unsignedTransport{next: conditionalTransport{next}, unsigned: &o.b.unsigned}
	}
	return s3.NewBucketWithConfig(o.logger, c, o.opts.Component, wrap)
}

func openFilesystem(_ context.Context, cfg Config, _ opening) (objstore.Bucket, error) {
	return filesystem.NewBucket(cfg.Directory)
}

// envSecrets are the secrets the providers may take from the environment:
// errors are scrubbed of them too (access key ids are names, not secrets:
// see scrubber).
func envSecrets() []string {
	var s []string
	for _, k := range []string{"AWS_SECRET_ACCESS_KEY", "AWS_SECRET_KEY", "AWS_SESSION_TOKEN", "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_CLIENT_SECRET"} {
		if v := strings.TrimSpace(os.Getenv(k)); v != "" {
			s = append(s, v)
		}
	}
	return s
}

// Check makes one cheap request, listing dir (relative to the prefix), and
// fails with what went wrong: a missing bucket, refused credentials, an
// unreachable endpoint. A recorder checks its own node's directory at
// start, so a node's policy need not allow listing the whole bucket.
func (b *Bucket) Check(ctx context.Context, dir string) error {
	errStop := errors.New("stop")
	err := b.inner.Iter(ctx, dir, func(string) error { return errStop })
	if err != nil && !errors.Is(err, errStop) {
		return b.wrap("list", dir, err)
	}
	return nil
}

// Name names the bucket in messages: provider, bucket and prefix.
func (b *Bucket) Name() string { return b.name }

// Provider is the objstore provider.
func (b *Bucket) Provider() objstore.ObjProvider { return b.inner.Provider() }

// Close releases the client.
func (b *Bucket) Close() error { return b.wrap("close", "", b.inner.Close()) }

// Upload writes an object whole (it is visible only once written).
func (b *Bucket) Upload(ctx context.Context, name string, r io.Reader, opts ...objstore.ObjectUploadOption) error {
	return b.wrap("upload", name, b.inner.Upload(ctx, name, r, opts...))
}

// Delete removes an object.
func (b *Bucket) Delete(ctx context.Context, name string) error {
	return b.wrap("delete", name, b.inner.Delete(ctx, name))
}

// Iter calls f with the names under dir (directories end in "/").
func (b *Bucket) Iter(ctx context.Context, dir string, f func(string) error, opts ...objstore.IterOption) error {
	return b.wrapIter(dir, b.inner.Iter(ctx, dir, f, opts...))
}

// IterWithAttributes is Iter with each object's attributes.
func (b *Bucket) IterWithAttributes(ctx context.Context, dir string, f func(objstore.IterObjectAttributes) error, opts ...objstore.IterOption) error {
	return b.wrapIter(dir, b.inner.IterWithAttributes(ctx, dir, f, opts...))
}

// wrapIter wraps an Iter error unless it is f's own, returned as is.
func (b *Bucket) wrapIter(dir string, err error) error {
	var own *Error
	if err == nil || errors.As(err, &own) {
		return err
	}
	return b.wrap("list", dir, err)
}

// SupportedIterOptions lists the Iter options the provider supports.
func (b *Bucket) SupportedIterOptions() []objstore.IterOptionType {
	return b.inner.SupportedIterOptions()
}

// Get reads an object.
func (b *Bucket) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	rc, err := b.inner.Get(ctx, name)
	return rc, b.wrap("get", name, err)
}

// GetRange reads length bytes of an object from off (length -1: to the end).
func (b *Bucket) GetRange(ctx context.Context, name string, off, length int64) (io.ReadCloser, error) {
	rc, err := b.inner.GetRange(ctx, name, off, length)
	return rc, b.wrap("get range", name, err)
}

// Exists reports whether an object exists.
func (b *Bucket) Exists(ctx context.Context, name string) (bool, error) {
	ok, err := b.inner.Exists(ctx, name)
	return ok, b.wrap("exists", name, err)
}

// Attributes returns an object's size and modification time.
func (b *Bucket) Attributes(ctx context.Context, name string) (objstore.ObjectAttributes, error) {
	a, err := b.inner.Attributes(ctx, name)
	return a, b.wrap("attributes", name, err)
}

// IsObjNotFoundErr reports whether err says an object does not exist.
func (b *Bucket) IsObjNotFoundErr(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.NotFound
}

// IsAccessDeniedErr reports whether err says the credentials do not allow
// the operation.
func (b *Bucket) IsAccessDeniedErr(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.AccessDenied
}

// Error is a failed operation on a bucket. Its message and its wrapped
// error carry no credential.
type Error struct {
	Bucket string // Config.Name()
	Op     string // upload, get, list, …
	Object string // relative to the prefix; "" for the bucket itself
	// NotFound, AccessDenied and NoBucket classify the cause.
	NotFound, AccessDenied, NoBucket bool
	err                              error
}

func (e *Error) Error() string {
	if e.Object == "" {
		return fmt.Sprintf("bucket %s: %s: %v", e.Bucket, e.Op, e.err)
	}
	return fmt.Sprintf("bucket %s: %s %s: %v", e.Bucket, e.Op, e.Object, e.err)
}

// Unwrap returns the cause: the client's own error when its text held no
// credential (so errors.Is finds context.DeadlineExceeded), otherwise a
// plain error with the credentials removed.
func (e *Error) Unwrap() error { return e.err }

func (b *Bucket) wrap(op, name string, err error) error {
	if err == nil {
		return nil
	}
	e := &Error{Bucket: b.name, Op: op, Object: name, err: err}
	if b.inner != nil {
		e.NotFound = b.inner.IsObjNotFoundErr(err)
		e.AccessDenied = b.inner.IsAccessDeniedErr(err)
	}
	// objstore's s3 provider calls only AccessDenied a denial; refused
	// credentials are one as well.
	switch minio.ToErrorResponse(err).Code {
	case "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken":
		e.AccessDenied = true
	}
	e.NoBucket = s3Code(err) == "NoSuchBucket"
	if msg := err.Error(); b.scrub(msg) != msg {
		e.err = errors.New(b.scrub(msg))
	}
	if e.AccessDenied && b.noCredentials != "" && b.unsigned.Load() {
		e.err = fmt.Errorf("%w (%s)", e.err, b.noCredentials)
	}
	return e
}

// slogKit adapts go-kit's log.Logger, which objstore logs to, to slog,
// removing credentials from every value.
type slogKit struct {
	log   *slog.Logger
	scrub func(string) string
}

func (l slogKit) Log(keyvals ...any) error {
	level, msg := slog.LevelDebug, "objstore"
	var attrs []any
	for i := 0; i+1 < len(keyvals); i += 2 {
		k := fmt.Sprint(keyvals[i])
		v := l.scrub(fmt.Sprint(keyvals[i+1]))
		switch k {
		case "level":
			switch v {
			case "warn":
				level = slog.LevelWarn
			case "error":
				level = slog.LevelError
			case "info":
				level = slog.LevelInfo
			}
		case "msg":
			msg = v
		default:
			attrs = append(attrs, k, v)
		}
	}
	l.log.Log(context.Background(), level, msg, attrs...)
	return nil
}
