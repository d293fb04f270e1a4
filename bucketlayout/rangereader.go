package bucketlayout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/thanos-io/objstore"
)

// ErrShortObject is what a RangeReader's read past an object's end wraps:
// the object is shorter than its reader was told (a truncated upload),
// which says something of the object, not of the bucket.
var ErrShortObject = errors.New("the object ended early")

// RangeReader reads one object with one ranged GET a read: an io.ReaderAt
// over the bucket's GetRange, which bucket readers put their caches in
// front of.
type RangeReader struct {
	// Ctx bounds the reads (nil: context.Background()).
	Ctx    context.Context
	Bucket objstore.BucketReader
	Name   string
	// Timeout bounds each GET (0: only Ctx bounds them).
	Timeout time.Duration
	// OnGet, when set, is called after each GET with the bytes it read
	// (0 when it failed).
	OnGet func(bytes int)
}

// ReadAt reads len(p) bytes at off with one ranged GET. When the object
// ends before, the error wraps ErrShortObject (and io.ErrUnexpectedEOF);
// any other error is the bucket's, as it returned it, for the caller to
// classify (objstore's IsObjNotFoundErr).
func (r *RangeReader) ReadAt(p []byte, off int64) (int, error) {
	ctx := r.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	if r.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.Timeout)
		defer cancel()
	}
	rc, err := r.Bucket.GetRange(ctx, r.Name, off, int64(len(p)))
	if err != nil {
		r.got(0)
		return 0, err
	}
	defer rc.Close()
	n, err := io.ReadFull(rc, p)
	r.got(n)
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return n, fmt.Errorf("read %s at %d+%d: %w after %d bytes: %w", r.Name, off, len(p), ErrShortObject, n, io.ErrUnexpectedEOF)
	}
	return n, err
}

func (r *RangeReader) got(n int) {
	if r.OnGet != nil {
		r.OnGet(n)
	}
}
