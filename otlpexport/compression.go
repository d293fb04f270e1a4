package otlpexport

import (
	"fmt"

	"github.com/klauspost/compress/gzip"

	"github.com/heatscope/heatscope/internal/grpcgzip"
)

// Compressions of Config.Compression.
const (
	// CompressionGzip compresses every request with gzip, the
	// Collector's OTLP exporters' default (gRPC's "gzip" message
	// encoding, OTLP/HTTP's Content-Encoding: gzip), at the level and
	// with the implementation of package grpcgzip over both protocols.
	CompressionGzip = "gzip"
	// CompressionNone sends requests as they are.
	CompressionNone = "none"
)

// newGzipWriter returns a gzip writer at grpcgzip's level, to be Reset
// onto each request's buffer.
func newGzipWriter() *gzip.Writer {
	w, _ := gzip.NewWriterLevel(nil, grpcgzip.Level) // it fails only for a level out of range
	return w
}

// checkCompression checks a Config.Compression, "" meaning gzip.
func checkCompression(c string) (string, error) {
	switch c {
	case "", CompressionGzip:
		return CompressionGzip, nil
	case CompressionNone:
		return CompressionNone, nil
	}
	return "", fmt.Errorf("otlp compression %q: want gzip or none", c)
}
