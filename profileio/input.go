package profileio

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/heatscope/heatscope/sample"
)

// inputBufferSize is the read buffer of every reader: large enough that
// ReadSlice rarely has to stitch a line together, small enough not to matter.
const inputBufferSize = 256 << 10

// maxLineLength bounds one text line, so a file without line breaks fails
// instead of exhausting memory.
const maxLineLength = 16 << 20

// gzipMagic starts every gzip stream (RFC 1952).
var gzipMagic = []byte{0x1f, 0x8b}

// openInput returns a buffered reader of r's content, decompressing it when
// it starts with the gzip magic number, so every reader takes plain and
// gzip-compressed files alike.
func openInput(r io.Reader) (*bufio.Reader, error) {
	br := bufio.NewReaderSize(r, inputBufferSize)
	head, err := br.Peek(len(gzipMagic))
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read input: %w", err)
	}
	if !bytes.Equal(head, gzipMagic) {
		return br, nil
	}
	zr, err := gzip.NewReader(br)
	if err != nil {
		return nil, fmt.Errorf("open gzip stream: %w", err)
	}
	return bufio.NewReaderSize(zr, inputBufferSize), nil
}

// lineReader splits a stream into lines and counts them for error messages.
type lineReader struct {
	r    *bufio.Reader
	long []byte // holds a line longer than r's buffer
	n    int    // number of the line last returned, from 1
}

// next returns the next line without its line ending (LF or CRLF), valid
// until the following call, or io.EOF after the last line.
func (l *lineReader) next() ([]byte, error) {
	line, err := l.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		l.long = append(l.long[:0], line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			if len(l.long) > maxLineLength {
				return nil, fmt.Errorf("line %d: longer than %d bytes", l.n+1, maxLineLength)
			}
			line, err = l.r.ReadSlice('\n')
			l.long = append(l.long, line...)
		}
		line = l.long
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("line %d: read: %w", l.n+1, err)
	}
	if len(line) == 0 {
		return nil, io.EOF
	}
	l.n++
	if n := len(line); n > 0 && line[n-1] == '\n' {
		line = line[:n-1]
	}
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// maxInterned bounds an interner, so a file of endless distinct names
// costs one string per name rather than a map that never stops growing.
const maxInterned = 1 << 18

// interner returns one shared string per distinct name: command, function
// and module names repeat in almost every sample.
type interner map[string]string

// get returns b as a string, shared with earlier calls for the same bytes.
// The lookup m[string(b)] does not allocate.
func (in interner) get(b []byte) string {
	if s, ok := in[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(in) < maxInterned {
		in[s] = s
	}
	return s
}

// kernelStart is the lowest kernel address on x86-64 and arm64 (the upper
// half of a 48-bit address space and above).
const kernelStart = 0xffff800000000000

// jitModule is the module heatscope's symbolizer gives frames it named from
// a JIT runtime's perf map.
const jitModule = "[jit]"

// moduleClass is what a module's name alone says about its frames.
type moduleClass uint8

const (
	// classFile is a file-backed user mapping, or no module at all.
	classFile moduleClass = iota
	// classKernel is the kernel image: "[kernel.kallsyms]" or a vmlinux.
	classKernel
	// classJIT is code named by a perf map: /tmp/perf-PID.map or "[jit]".
	classJIT
	// classBracketed is a pseudo module such as "[vdso]" or a kernel
	// module "[nf_tables]": kernel code only at a kernel address.
	classBracketed
)

// classify tells apart the kinds of module names perf and heatscope write.
func classify(module string) moduleClass {
	switch {
	case module == sample.KernelModule:
		return classKernel
	case module == jitModule || isPerfMap(module):
		return classJIT
	case strings.HasPrefix(baseName(module), "vmlinux"):
		// FlameScope's library2type also takes any vmlinux as kernel
		// code: perf names it so when given the kernel's debug image.
		return classKernel
	case strings.HasPrefix(module, "["):
		return classBracketed
	default:
		return classFile
	}
}

// isPerfMap reports whether module is a JIT perf map, /tmp/perf-PID.map.
func isPerfMap(module string) bool {
	pid, ok := strings.CutPrefix(module, "/tmp/perf-")
	if !ok {
		return false
	}
	pid, ok = strings.CutSuffix(pid, ".map")
	return ok && pid != "" && strings.Trim(pid, "0123456789") == ""
}

// frameKind decides a frame's kind: kernel for the kernel image and for any
// kernel address, JIT for perf-map code, unknown when the frame has no
// symbol, user otherwise.
func frameKind(class moduleClass, addr uint64, resolved bool) sample.Kind {
	switch {
	case class == classKernel || addr >= kernelStart:
		return sample.KindKernel
	case class == classJIT:
		return sample.KindJIT
	case !resolved:
		return sample.KindUnknown
	default:
		return sample.KindUser
	}
}

// isUnresolvedName reports whether a function name stands for a missing
// symbol: perf's "[unknown]", or heatscope's "[module+0xoffset]".
func isUnresolvedName(name string) bool {
	return name == "" || (name[0] == '[' && name[len(name)-1] == ']')
}

// baseName returns the last element of a slash-separated path.
func baseName(module string) string {
	if i := strings.LastIndexByte(module, '/'); i >= 0 && i+1 < len(module) {
		return module[i+1:]
	}
	return module
}

// appendUnknownName appends the name of an unresolved frame to dst:
// "[module+0xoffset]" with the module's base name (the brackets of a pseudo
// module such as "[kernel.kallsyms]" dropped), as sample.UnknownName and
// heatscope's symbolizer write it; or "[unknown]" when the module is
// unknown too.
func appendUnknownName(dst []byte, module string, offset uint64) []byte {
	if module == "" || module == "[unknown]" {
		return append(dst, "[unknown]"...)
	}
	if len(module) > 2 && module[0] == '[' && module[len(module)-1] == ']' {
		module = module[1 : len(module)-1]
	} else {
		module = baseName(module)
	}
	dst = append(dst, '[')
	dst = append(dst, module...)
	dst = append(dst, "+0x"...)
	dst = strconv.AppendUint(dst, offset, 16)
	return append(dst, ']')
}

// parseDecimal parses 1 to maxDigits (at most 19, so no overflow) decimal
// digits without allocating.
func parseDecimal(b []byte, maxDigits int) (uint64, bool) {
	if len(b) == 0 || len(b) > maxDigits {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if !isDigit(c) {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	return n, true
}
