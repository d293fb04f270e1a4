package profileio

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"github.com/google/pprof/profile"

	"github.com/heatscope/heatscope/sample"
)

// Format is a profile file format profileio reads.
type Format int

// The formats Detect tells apart.
const (
	// FormatUnknown is no format profileio reads.
	FormatUnknown Format = iota
	// FormatPerfScript is the text `perf script` prints (ReadPerfScript).
	FormatPerfScript
	// FormatFolded is folded stacks, "root;...;leaf count" (ReadFolded).
	FormatFolded
	// FormatPprof is a pprof profile, profile.proto (ReadPprof).
	FormatPprof
)

// String returns the format's name as the CLI spells it.
func (f Format) String() string {
	switch f {
	case FormatPerfScript:
		return "perf-script"
	case FormatFolded:
		return "folded"
	case FormatPprof:
		return "pprof"
	default:
		return "unknown"
	}
}

// DetectHeadSize is how many bytes from the start of a file Detect wants to
// see; fewer are fine when the file is shorter.
const DetectHeadSize = 64 << 10

// Detect tells a file's format from its first bytes (up to DetectHeadSize;
// the head may end anywhere, even within a line or a gzip stream). Gzip
// input is decompressed as far as head goes and its content detected.
//
//   - perf script: the first line that is neither blank nor a '#' comment
//     is an event line, as FlameScope decides (app/common/fileutil.py).
//   - folded stacks: every complete non-blank line ends in white space and
//     a positive count, and at least one has a ';'.
//   - pprof: the bytes are a sequence of profile.proto's top-level fields
//     with their wire types (at least two complete ones, or the whole
//     head), or, failing that, github.com/google/pprof/profile parses
//     the head as a whole file.
func Detect(head []byte) (Format, error) {
	if bytes.HasPrefix(head, gzipMagic) {
		inner, err := gunzipHead(head)
		if err != nil {
			return FormatUnknown, fmt.Errorf("detect format: %w", err)
		}
		head = inner
	}
	if len(head) == 0 {
		return FormatUnknown, errors.New("detect format: empty input")
	}
	switch {
	case looksLikePerfScript(head):
		return FormatPerfScript, nil
	case looksLikeFolded(head):
		return FormatFolded, nil
	case looksLikeProfileProto(head):
		return FormatPprof, nil
	}
	if _, err := profile.ParseData(head); err == nil {
		return FormatPprof, nil
	}
	return FormatUnknown, fmt.Errorf("detect format: %s", unknownLine(head))
}

// unknownLine says where a head of no known format goes wrong: the first
// line that is not blank or a comment, which must be a perf script event
// or a folded stack when the file is text.
func unknownLine(head []byte) string {
	const why = "neither perf script, folded stacks nor pprof"
	// The head may end within a character: leave its last bytes out.
	if bytes.IndexByte(head, 0) >= 0 || !utf8.Valid(head[:max(0, len(head)-utf8.UTFMax)]) {
		return "binary data that is not pprof: " + why
	}
	for n, line := range bytes.Split(head, []byte("\n")) {
		line = bytes.TrimRight(line, "\r")
		if t := bytes.TrimSpace(line); len(t) == 0 || t[0] == '#' {
			continue
		}
		if len(line) > 60 {
			line = append(line[:57:57], "..."...)
		}
		return fmt.Sprintf("line %d: %q is %s: want a perf script event line (comm pid/tid [cpu] seconds: event:) "+
			"or a folded stack (frame;frame;frame count)", n+1, line, why)
	}
	return why
}

// gunzipHead decompresses as much of a gzip stream's head as it holds.
func gunzipHead(head []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(head))
	if err != nil {
		return nil, fmt.Errorf("open gzip stream: %w", err)
	}
	var out bytes.Buffer
	_, err = io.Copy(&out, io.LimitReader(zr, DetectHeadSize))
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, fmt.Errorf("decompress gzip stream: %w", err)
	}
	return out.Bytes(), nil
}

// looksLikePerfScript reports whether the first line that is not blank or a
// comment is a perf script event line.
func looksLikePerfScript(head []byte) bool {
	for len(head) > 0 {
		line := head
		if i := bytes.IndexByte(head, '\n'); i >= 0 {
			line, head = head[:i], head[i+1:]
		} else {
			head = nil
		}
		line = bytes.TrimRight(line, "\r")
		if len(line) == 0 || line[0] == '#' || len(bytes.TrimLeft(line, " \t")) == 0 {
			continue
		}
		if line[0] == '\t' {
			return false
		}
		_, s, c, ok := findEventTime(line)
		if !ok {
			return false
		}
		_, ok = parseTimestamp(line[s:c])
		return ok
	}
	return false
}

// looksLikeFolded reports whether head's lines are folded stacks. The last
// line may be cut short by the end of the head, so it is judged only when
// it is the only one.
func looksLikeFolded(head []byte) bool {
	lines := bytes.Split(head, []byte("\n"))
	if len(lines) > 1 && !bytes.HasSuffix(head, []byte("\n")) {
		lines = lines[:len(lines)-1]
	}
	semicolon, stacks := false, 0
	for _, line := range lines {
		line = bytes.TrimRight(line, " \t\r")
		if len(line) == 0 {
			continue
		}
		sp := bytes.LastIndexAny(line, " \t")
		if sp <= 0 {
			return false
		}
		if _, ok := parsePositive(line[sp+1:]); !ok || bytes.IndexByte(line, 0) >= 0 {
			return false
		}
		semicolon = semicolon || bytes.IndexByte(line[:sp], ';') >= 0
		stacks++
	}
	return stacks > 0 && semicolon
}

// profileWireTypes are the wire types of profile.proto's Profile fields, by
// field number: 2 for messages, strings and packed numbers, 0 for varints.
var profileWireTypes = map[uint64][]uint64{
	1:  {2},    // sample_type
	2:  {2},    // sample
	3:  {2},    // mapping
	4:  {2},    // location
	5:  {2},    // function
	6:  {2},    // string_table
	7:  {0},    // drop_frames
	8:  {0},    // keep_frames
	9:  {0},    // time_nanos
	10: {0},    // duration_nanos
	11: {2},    // period_type
	12: {0},    // period
	13: {0, 2}, // comment, packed or not
	14: {0},    // default_sample_type
	15: {0},    // doc_url
}

// looksLikeProfileProto reports whether head is the start of an encoded
// Profile message: at least two complete top-level fields of known numbers
// and wire types, or one that ends the head exactly.
func looksLikeProfileProto(head []byte) bool {
	fields := 0
	b := head
	for len(b) > 0 {
		key, n := binary.Uvarint(b)
		if n <= 0 {
			return n == 0 && fields >= 2
		}
		b = b[n:]
		wire := key & 7
		if !containsWire(profileWireTypes[key>>3], wire) {
			return false
		}
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return n == 0 && fields >= 2
		}
		b = b[n:]
		if wire == 2 {
			if v > uint64(len(b)) {
				return fields >= 2
			}
			b = b[v:]
		}
		fields++
	}
	return fields > 0
}

func containsWire(wires []uint64, w uint64) bool {
	for _, x := range wires {
		if x == w {
			return true
		}
	}
	return false
}

// AnyOptions are ReadAny's settings for formats that need them.
type AnyOptions struct {
	// Folded says how to read folded stacks.
	Folded FoldedOptions
	// FoldedStart is the start of the time range folded stacks, which
	// carry no times, are spread over (see FoldedOptions.Read).
	FoldedStart time.Time
	// FoldedSpan is the length of that time range.
	FoldedSpan time.Duration
}

// ReadAny detects r's format (plain or gzipped) from its first
// DetectHeadSize bytes, then reads it with ReadPerfScript, FoldedOptions.Read
// or ReadPprof, calling fn once per sample. It returns the format found.
func ReadAny(r io.Reader, opts AnyOptions, fn func(*sample.Sample) error) (Format, error) {
	in, err := openInput(r)
	if err != nil {
		return FormatUnknown, err
	}
	// A read error past the first bytes (a truncated gzip stream, say) is
	// left for the format's reader to report, with its context.
	head, err := in.Peek(DetectHeadSize)
	if err != nil && !errors.Is(err, io.EOF) && len(head) == 0 {
		return FormatUnknown, fmt.Errorf("detect format: read: %w", err)
	}
	format, err := Detect(head)
	if err != nil {
		return format, err
	}
	switch format {
	case FormatPerfScript:
		err = ReadPerfScript(in, fn)
	case FormatFolded:
		err = opts.Folded.Read(in, opts.FoldedStart, opts.FoldedSpan, fn)
	default:
		err = ReadPprof(in, fn)
	}
	return format, err
}
