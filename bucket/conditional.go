package bucket

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/minio/minio-go/v7"
	"github.com/thanos-io/objstore"
)

// Conditional writes let several processes share one small object (the
// compactor's lock, a node's lease) without a race: a write names the
// version of the object it replaces, and fails when another writer got
// there first. S3 and MinIO do it with If-None-Match: * (create only when
// absent) and If-Match: <ETag> (replace only that version); the
// filesystem provider with an atomic link and a file lock. Other providers
// answer ErrConditionalUnsupported.

// ErrConditionFailed is the error of a conditional write whose condition
// did not hold: the object existed (CreateIfAbsent), or was replaced or
// deleted since the version given was read (ReplaceIfVersion).
var ErrConditionFailed = errors.New("condition not met: another writer changed the object")

// ErrConditionalUnsupported is the error of a conditional write to a
// provider that offers none.
var ErrConditionalUnsupported = errors.New("this provider has no conditional writes")

// ConditionalWrites reports whether the provider has conditional writes
// (s3, filesystem).
func (b *Bucket) ConditionalWrites() bool {
	return b.fsRoot != "" || b.Provider() == objstore.S3
}

// maxVersionedBytes bounds what ReadVersioned reads: a lock or a lease.
const maxVersionedBytes = 1 << 20

// ReadVersioned reads a small object (at most 1 MiB) whole, with its
// version: the token ReplaceIfVersion takes (an S3 ETag; a hash of the
// content on the filesystem). A missing object is an error
// IsObjNotFoundErr reports.
func (b *Bucket) ReadVersioned(ctx context.Context, name string) (data []byte, version string, err error) {
	if b.fsRoot != "" {
		data, err := os.ReadFile(b.fsPath(name))
		if err != nil {
			return nil, "", b.wrapFS("get", name, err)
		}
		return data, fsVersion(data), nil
	}
	if b.Provider() != objstore.S3 {
		return nil, "", b.wrap("get", name, ErrConditionalUnsupported)
	}
	cr := &condRequest{method: http.MethodGet, object: name}
	rc, err := b.inner.Get(context.WithValue(ctx, condKey{}, cr), name)
	if err != nil {
		return nil, "", b.wrap("get", name, err)
	}
	defer rc.Close()
	data, err = io.ReadAll(io.LimitReader(rc, maxVersionedBytes+1))
	if err != nil {
		return nil, "", b.wrap("get", name, err)
	}
	if len(data) > maxVersionedBytes {
		return nil, "", b.wrap("get", name, fmt.Errorf("larger than %d bytes", maxVersionedBytes))
	}
	v := cr.responseETag()
	if v == "" {
		return nil, "", b.wrap("get", name, errors.New("the store sent no ETag"))
	}
	return data, v, nil
}

// CreateIfAbsent writes data as name unless an object of that name
// exists (then ErrConditionFailed), and returns the new object's version.
// Of two writers creating the same name at the same instant, exactly one
// succeeds.
func (b *Bucket) CreateIfAbsent(ctx context.Context, name string, data []byte) (version string, err error) {
	return b.putIf(ctx, name, data, "")
}

// ReplaceIfVersion writes data as name if the object's version is still
// version (from ReadVersioned or a write), and returns the new version;
// ErrConditionFailed when it was replaced or deleted meanwhile.
func (b *Bucket) ReplaceIfVersion(ctx context.Context, name string, data []byte, version string) (string, error) {
	if version == "" {
		return "", b.wrap("conditional upload", name, errors.New("no version to replace"))
	}
	return b.putIf(ctx, name, data, version)
}

// putIf writes data as name if the object is absent (version "") or at
// version.
func (b *Bucket) putIf(ctx context.Context, name string, data []byte, version string) (string, error) {
	if b.fsRoot != "" {
		return b.fsPutIf(name, data, version)
	}
	if b.Provider() != objstore.S3 {
		return "", b.wrap("conditional upload", name, ErrConditionalUnsupported)
	}
	cr := &condRequest{method: http.MethodPut, object: name, header: http.Header{}}
	if version == "" {
		cr.header.Set("If-None-Match", "*")
	} else {
		cr.header.Set("If-Match", version)
	}
	err := b.inner.Upload(context.WithValue(ctx, condKey{}, cr), name, bytes.NewReader(data))
	if err != nil {
		switch s3Code(err) {
		case "PreconditionFailed", "ConditionalRequestConflict":
			err = ErrConditionFailed
		case "NoSuchKey":
			if version != "" {
				err = ErrConditionFailed // deleted since it was read
			}
		}
		return "", b.wrap("conditional upload", name, err)
	}
	v := cr.responseETag()
	if v == "" {
		return "", b.wrap("conditional upload", name, errors.New("the store sent no ETag"))
	}
	return v, nil
}

// s3Code is the S3 error code in err's chain ("" without one).
func s3Code(err error) string {
	var r minio.ErrorResponse
	if errors.As(err, &r) {
		return r.Code
	}
	return ""
}

// condKey is the context key of a conditional request.
type condKey struct{}

// condRequest is one object request that conditionalTransport adds
// headers to, and whose response's ETag it keeps.
type condRequest struct {
	method, object string
	header         http.Header
	mu             sync.Mutex
	etag           string
}

func (c *condRequest) responseETag() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.etag
}

// conditionalTransport adds a conditional request's headers to the
// request for its object (not the client's own requests: a bucket's
// location, a multipart upload's parts), and notes the ETag answered:
// the objstore client has no conditional writes and returns no ETag.
type conditionalTransport struct{ next http.RoundTripper }

func (t conditionalTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c, _ := req.Context().Value(condKey{}).(*condRequest)
	if c == nil || req.Method != c.method || req.URL.RawQuery != "" || !strings.HasSuffix(req.URL.Path, "/"+c.object) {
		return t.next.RoundTrip(req)
	}
	if len(c.header) > 0 {
		req = req.Clone(req.Context())
		for k, v := range c.header {
			req.Header[k] = v
		}
	}
	resp, err := t.next.RoundTrip(req)
	if err == nil && resp.StatusCode/100 == 2 {
		c.mu.Lock()
		c.etag = resp.Header.Get("ETag")
		c.mu.Unlock()
	}
	return resp, err
}

// fsPath is an object's file under the filesystem provider's root.
func (b *Bucket) fsPath(name string) string {
	return filepath.Join(b.fsRoot, filepath.FromSlash(name))
}

// fsVersion is a filesystem object's version: a hash of its content.
func fsVersion(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:16])
}

// wrapFS wraps a filesystem error, classified as the provider's are.
func (b *Bucket) wrapFS(op, name string, err error) error {
	if err == nil {
		return nil
	}
	e := b.wrap(op, name, err).(*Error)
	e.NotFound = errors.Is(err, os.ErrNotExist)
	return e
}

// fsPutIf is putIf for the filesystem provider: a create links a
// complete temporary file to the name (which fails if it exists); a
// replace holds a lock on the current file while it compares its content
// with the version and renames the new file over it.
func (b *Bucket) fsPutIf(name string, data []byte, version string) (string, error) {
	path := b.fsPath(name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", b.wrapFS("conditional upload", name, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return "", b.wrapFS("conditional upload", name, err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", b.wrapFS("conditional upload", name, err)
	}
	if version == "" {
		if err := os.Link(tmp.Name(), path); err != nil {
			if errors.Is(err, os.ErrExist) {
				err = ErrConditionFailed
			}
			return "", b.wrapFS("conditional upload", name, err)
		}
		return fsVersion(data), nil
	}
	for {
		f, err := os.Open(path)
		if errors.Is(err, os.ErrNotExist) {
			return "", b.wrap("conditional upload", name, ErrConditionFailed)
		}
		if err != nil {
			return "", b.wrapFS("conditional upload", name, err)
		}
		replaced, err := fsReplaceLocked(f, path, tmp.Name(), version)
		f.Close()
		if err != nil {
			return "", b.wrapFS("conditional upload", name, err)
		}
		if replaced {
			return fsVersion(data), nil
		}
		// The file was replaced while this waited for its lock: compare
		// with the new one.
	}
}

// fsReplaceLocked locks f (opened at path), and if it is still the file
// at path and holds version, renames tmp over it. replaced is false when
// path was replaced while it waited for the lock.
func fsReplaceLocked(f *os.File, path, tmp, version string) (replaced bool, err error) {
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return false, err
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	held, err := f.Stat()
	if err != nil {
		return false, err
	}
	now, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, ErrConditionFailed
	}
	if err != nil {
		return false, err
	}
	if !os.SameFile(held, now) {
		return false, nil
	}
	cur, err := io.ReadAll(io.LimitReader(f, maxVersionedBytes+1))
	if err != nil {
		return false, err
	}
	if fsVersion(cur) != version {
		return false, ErrConditionFailed
	}
	return true, os.Rename(tmp, path)
}
