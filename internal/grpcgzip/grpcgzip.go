// Package grpcgzip registers gRPC's "gzip" compressor in place of
// grpc-go's own (google.golang.org/grpc/encoding/gzip: the standard
// library's gzip at its default level), with klauspost/compress's gzip at
// its fastest level. On an OTLP profiles batch it takes about an eighth
// of the CPU for a tenth more bytes (docs/benchmarks.md): the export's
// compression is paid by an agent whose whole cost is counted.
//
// Importing it (for its side effect, or for Name) is what sets it up: it
// imports grpc-go's package first, so that its own registration comes
// after and replaces it (gRPC keeps the last compressor registered under
// a name). The wire format is gzip: any peer reads it, and this package
// reads any peer's.
package grpcgzip

import (
	"io"
	"sync"

	"github.com/klauspost/compress/gzip"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/gzip" // registered before this package's, which replaces it
)

// Name is the compressor's name: gRPC's message encoding "gzip".
const Name = "gzip"

// Level is the gzip level messages are compressed at.
const Level = gzip.BestSpeed

// keptWriters bounds the writers kept between messages. They are kept
// in a list, not a sync.Pool: an agent near its memory limit collects
// garbage every few seconds, and a pool emptied by each collection would
// make each message's writer (a few hundred kilobytes) garbage again.
const keptWriters = 2

func init() { encoding.RegisterCompressor(&compressor{}) }

type compressor struct {
	mu      sync.Mutex
	writers []*gzip.Writer
	readers sync.Pool
}

func (c *compressor) Name() string { return Name }

// Compress returns a writer compressing into w; its Close ends the
// stream and keeps the writer for the next message.
func (c *compressor) Compress(w io.Writer) (io.WriteCloser, error) {
	c.mu.Lock()
	var z *gzip.Writer
	if n := len(c.writers); n > 0 {
		z, c.writers = c.writers[n-1], c.writers[:n-1]
	}
	c.mu.Unlock()
	if z == nil {
		var err error
		if z, err = gzip.NewWriterLevel(w, Level); err != nil {
			return nil, err
		}
	} else {
		z.Reset(w)
	}
	return &writer{Writer: z, c: c}, nil
}

type writer struct {
	*gzip.Writer
	c *compressor
}

func (w *writer) Close() error {
	err := w.Writer.Close()
	w.c.mu.Lock()
	if len(w.c.writers) < keptWriters {
		w.c.writers = append(w.c.writers, w.Writer)
	}
	w.c.mu.Unlock()
	return err
}

// Decompress returns a reader of r's uncompressed message (gRPC bounds
// what it reads of it by its maximum message size).
func (c *compressor) Decompress(r io.Reader) (io.Reader, error) {
	z, _ := c.readers.Get().(*gzip.Reader)
	var err error
	if z == nil {
		z, err = gzip.NewReader(r)
	} else if err = z.Reset(r); err != nil {
		c.readers.Put(z)
	}
	if err != nil {
		return nil, err
	}
	return &reader{Reader: z, c: c}, nil
}

type reader struct {
	*gzip.Reader
	c *compressor
}

func (r *reader) Close() error {
	err := r.Reader.Close()
	r.c.readers.Put(r.Reader)
	return err
}
