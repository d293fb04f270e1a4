package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"sync"

	"github.com/klauspost/compress/zstd"

	"github.com/heatscope/heatscope/sample"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errCorrupt is wrapped by every decoding error caused by bad bytes.
var errCorrupt = errors.New("corrupt data")

var (
	encoderOnce sync.Once
	encoder     *zstd.Encoder
	decoderOnce sync.Once
	decoder     *zstd.Decoder
)

// compress zstd-compresses b. The encoder is shared: EncodeAll is safe for
// concurrent use.
func compress(b []byte) []byte {
	encoderOnce.Do(func() { encoder = newEncoder() })
	return encoder.EncodeAll(b, nil)
}

// encoderWindow is the zstd window of block sections. The encoder keeps a
// history buffer for the life of the agent, sized by the window: 16 MB at
// the default 8 MiB window, a quarter of the agent's memory limit. A 1 MiB
// window in the encoder's low-memory mode keeps about 1 MB, and compressed
// the sections of 2- and 20-minute synthetic blocks to the same bytes
// (docs/benchmarks.md, issue 14).
const encoderWindow = 1 << 20

func newEncoder() *zstd.Encoder {
	e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1),
		zstd.WithWindowSize(encoderWindow), zstd.WithLowerEncoderMem(true))
	if err != nil {
		panic(fmt.Sprintf("zstd encoder: %v", err)) // the options are constants
	}
	return e
}

// decompress undoes compress, refusing output larger than limit.
func decompress(b []byte, limit int) ([]byte, error) {
	decoderOnce.Do(func() {
		decoder, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(1<<31))
	})
	out, err := decoder.DecodeAll(b, make([]byte, 0, limit))
	if err != nil {
		return nil, fmt.Errorf("%w: zstd: %w", errCorrupt, err)
	}
	if len(out) > limit {
		return nil, fmt.Errorf("%w: %d bytes decompressed, header says %d", errCorrupt, len(out), limit)
	}
	return out, nil
}

// decoder reads varints and bytes from a buffer, remembering the first error.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: truncated or bad %s", errCorrupt, what)
	}
	r.b = nil
}

func (r *reader) uvarint(what string) uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail(what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint(what string) int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail(what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

// u32 reads a uvarint that must be below limit (an id into a table of that
// size, or a count no larger than what the bytes can hold).
func (r *reader) u32(what string, limit uint64) uint32 {
	v := r.uvarint(what)
	if v >= limit {
		r.fail(what)
		return 0
	}
	return uint32(v)
}

// count reads an element count, checking that each element needs at least
// minBytes, so a corrupt count cannot make us allocate gigabytes.
func (r *reader) count(what string, minBytes int) int {
	v := r.uvarint(what)
	if v > uint64(len(r.b)/max(minBytes, 1)) {
		r.fail(what + " count")
		return 0
	}
	return int(v)
}

func (r *reader) bytes(what string) []byte {
	n := r.uvarint(what)
	if n > uint64(len(r.b)) {
		r.fail(what)
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

// A frame's kind byte (FORMAT.md, frames section and WAL frame record):
// its sample.Kind in the low three bits (two before format version 6);
// from format version 5, how a user frame was found in a walk with unwind
// tables in the top two; from version 6, bit 5 when the frame's source
// lines follow its address. The other bits are zero.
const (
	kindBits       = 0x07
	kindLines      = 0x20 // uvarint line and start line follow the address
	kindFoundTable = 0x40 // sample.MethodTable
	kindFoundFP    = 0x80 // sample.MethodFP
	// kindBitsV5 held the kind before version 6, which added the
	// Python kind.
	kindBitsV5 = 0x03
)

// appendFrameTail appends what follows a frame's string ids, in a block's
// frames section and in a WAL frame record alike: its kind byte, its
// address and, when it has any, its lines.
func appendFrameTail(b []byte, f *Frame) []byte {
	k := byte(f.Kind)
	switch f.Method {
	case sample.MethodTable:
		k |= kindFoundTable
	case sample.MethodFP:
		k |= kindFoundFP
	}
	lines := f.Line != 0 || f.StartLine != 0
	if lines {
		k |= kindLines
	}
	b = binary.AppendUvarint(append(b, k), f.Address)
	if lines {
		b = binary.AppendUvarint(b, uint64(f.Line))
		b = binary.AppendUvarint(b, uint64(f.StartLine))
	}
	return b
}

// frameTail reads what appendFrameTail wrote into f, for a block of
// format version version (a WAL is read as this version's). A version
// before 5 never marks how a frame was found and one before 6 has neither
// Python frames nor lines: any of those there is corrupt, as is a bit no
// version defines, a frame marked both ways, a kernel frame marked at
// all, or a kind this heatscope does not know (a newer one wrote it).
func (r *reader) frameTail(f *Frame, version int) {
	b := r.bytes1()
	if r.err != nil {
		return
	}
	kind, method := sample.Kind(b&kindBits), sample.MethodNotKnown
	switch b &^ (kindBits | kindLines) {
	case 0:
	case kindFoundTable:
		method = sample.MethodTable
	case kindFoundFP:
		method = sample.MethodFP
	default:
		r.failf("frame kind byte 0x%02x: bits this heatscope does not know (format version %d)", b, FormatVersion)
		return
	}
	lines := b&kindLines != 0
	switch {
	case !kind.Valid():
		r.failf("frame kind byte 0x%02x: frame kind %d, which this heatscope (format version %d) does not know: "+
			"a newer heatscope wrote it, read it with that one", b, kind, FormatVersion)
	case version < 6 && (b&kindBits&^kindBitsV5 != 0 || lines):
		r.failf("frame kind byte 0x%02x: a Python frame or a frame with source lines in a block older than format version 6", b)
	case method != sample.MethodNotKnown && version < 5:
		r.failf("frame kind byte 0x%02x: a frame marked with how it was found in a block older than format version 5", b)
	case method != sample.MethodNotKnown && kind == sample.KindKernel:
		r.failf("frame kind byte 0x%02x: a kernel frame marked with how it was found", b)
	}
	if r.err != nil {
		return
	}
	f.Kind, f.Method = kind, method
	f.Address = r.uvarint("frame address")
	if lines {
		f.Line = r.u32("frame line", 1<<32)
		f.StartLine = r.u32("frame start line", 1<<32)
	}
}

// failf is fail with a message of its own.
func (r *reader) failf(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: "+format, append([]any{errCorrupt}, args...)...)
	}
	r.b = nil
}
