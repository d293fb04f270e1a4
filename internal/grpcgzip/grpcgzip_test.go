package grpcgzip

import (
	"bytes"
	stdgzip "compress/gzip"
	"io"
	"runtime"
	"testing"

	"google.golang.org/grpc/encoding"
)

// TestRegistered: gRPC's "gzip" is this package's compressor, not
// grpc-go's own, whatever order the packages were initialized in.
func TestRegistered(t *testing.T) {
	if _, ok := encoding.GetCompressor(Name).(*compressor); !ok {
		t.Fatalf("gRPC's %q compressor is a %T", Name, encoding.GetCompressor(Name))
	}
}

// TestRoundTrip: what it compresses is gzip the standard library reads,
// and it reads the standard library's gzip, message after message (its
// writers and readers reused).
func TestRoundTrip(t *testing.T) {
	c := encoding.GetCompressor(Name)
	for i := range 3 {
		msg := bytes.Repeat([]byte{'a', byte(i), 'b', 'c'}, 10_000+i)
		var z bytes.Buffer
		w, err := c.Compress(&z)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(msg)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if z.Len() >= len(msg)/10 {
			t.Errorf("message %d: %d bytes compressed to %d", i, len(msg), z.Len())
		}
		sr, err := stdgzip.NewReader(bytes.NewReader(z.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := io.ReadAll(sr); err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("message %d read back by the standard library: %v, equal %v", i, err, bytes.Equal(got, msg))
		}

		var std bytes.Buffer
		sw := stdgzip.NewWriter(&std)
		sw.Write(msg)
		sw.Close()
		r, err := c.Decompress(bytes.NewReader(std.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(r)
		if err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("message %d of the standard library read: %v, equal %v", i, err, bytes.Equal(got, msg))
		}
		r.(io.Closer).Close()
	}
	if _, err := c.Decompress(bytes.NewReader([]byte("not gzip"))); err == nil {
		t.Errorf("a message that is not gzip read without an error")
	}
}

// TestKeepsNothing: compressing messages leaves nothing on the Go heap
// once the collector has run (the exporter's agent lives near its memory
// limit, where every kept byte makes it collect more often). A kept
// writer at gzip's fastest level held over 600 KB.
func TestKeepsNothing(t *testing.T) {
	msg := make([]byte, 200_000)
	for i := range msg {
		msg[i] = byte(i * i >> 7)
	}
	c := &compressor{} // a compressor of the test's own, that nothing used before
	before := heapAfterGC()
	for range 3 {
		w, err := c.Compress(io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(msg)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	kept := heapAfterGC() - before
	runtime.KeepAlive(c)
	if kept > 32<<10 {
		t.Errorf("the heap grew by %d KB over 3 messages once collected: the compressor keeps state", kept>>10)
	}
}

// heapAfterGC is the Go heap in use once collected, with what pools held
// (their victims included) dropped.
func heapAfterGC() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
