package symbolize

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// mapping is one line of /proc/PID/maps.
type mapping struct {
	start, end uint64
	// offset is the file offset mapped at start.
	offset uint64
	// dev and inode identify the mapped file; dev is encoded as
	// stat(2)'s st_dev.
	dev, inode uint64
	// path is the pathname column without a " (deleted)" suffix: a file
	// path, a pseudo name such as "[vdso]", or empty for anonymous memory.
	path    string
	exec    bool
	deleted bool
	// ctimeNs is the file's change time, known for mappings from a
	// snapshot (SetMaps) and 0 for those read from /proc.
	ctimeNs int64
}

const deletedSuffix = " (deleted)"

// parseMaps parses the text of /proc/PID/maps, appending to maps. Every
// line is "START-END PERMS OFFSET MAJOR:MINOR INODE [PATH]", the path
// (which may contain spaces) starting after the padding that follows the
// inode. With execOnly, lines of mappings that are not executable are
// skipped after their permissions are read. Paths are made strings by
// paths, which may share one copy of each.
func parseMaps(maps []mapping, data []byte, execOnly bool, paths *interner) ([]mapping, error) {
	for line := 1; len(data) > 0; line++ {
		text := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			text, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		if len(text) == 0 {
			continue
		}
		if execOnly && !execLine(text) {
			continue
		}
		m, err := parseMapsLine(text, paths)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if execOnly && !m.exec {
			continue
		}
		maps = append(maps, m)
	}
	return maps, nil
}

// execLine reports whether a maps line may be of an executable mapping:
// all but those whose permissions, the second field, are readable and not
// executable, which are most lines. The others are left to parseMapsLine.
func execLine(line []byte) bool {
	_, perms, _ := bytes.Cut(bytes.TrimLeft(line, " "), []byte{' '})
	perms = bytes.TrimLeft(perms, " ")
	return len(perms) < 3 || perms[2] != '-'
}

func parseMapsLine(s []byte, paths *interner) (mapping, error) {
	var fields [5][]byte
	rest := s
	for i := range fields {
		rest = bytes.TrimLeft(rest, " ")
		end := bytes.IndexByte(rest, ' ')
		if end < 0 {
			end = len(rest)
		}
		fields[i], rest = rest[:end], rest[end:]
	}
	var (
		m   mapping
		err error
	)
	lo, hi, ok := bytes.Cut(fields[0], []byte{'-'})
	if !ok {
		return m, fmt.Errorf("address range %q: no '-'", fields[0])
	}
	if m.start, err = hexField(lo, 64); err != nil {
		return m, fmt.Errorf("start address: %w", err)
	}
	if m.end, err = hexField(hi, 64); err != nil {
		return m, fmt.Errorf("end address: %w", err)
	}
	if m.end < m.start {
		return m, fmt.Errorf("address range %q ends before it starts", fields[0])
	}
	if len(fields[1]) != 4 {
		return m, fmt.Errorf("permissions %q: want 4 characters", fields[1])
	}
	m.exec = fields[1][2] == 'x'
	if m.offset, err = hexField(fields[2], 64); err != nil {
		return m, fmt.Errorf("offset: %w", err)
	}
	major, minor, ok := bytes.Cut(fields[3], []byte{':'})
	if !ok {
		return m, fmt.Errorf("device %q: no ':'", fields[3])
	}
	maj, err := hexField(major, 32)
	if err != nil {
		return m, fmt.Errorf("device major: %w", err)
	}
	mnr, err := hexField(minor, 32)
	if err != nil {
		return m, fmt.Errorf("device minor: %w", err)
	}
	m.dev = unix.Mkdev(uint32(maj), uint32(mnr))
	if m.inode, err = parseDec(fields[4]); err != nil {
		return m, fmt.Errorf("inode: %w", err)
	}
	path := bytes.TrimLeft(rest, " ")
	if p, ok := bytes.CutSuffix(path, []byte(deletedSuffix)); ok {
		path, m.deleted = p, true
	}
	m.path = paths.string(path)
	return m, nil
}

// hexField parses a hexadecimal field of at most bits bits.
func hexField(b []byte, bits int) (uint64, error) {
	v, ok := parseHexBytes(b)
	if !ok || bits < 64 && v>>bits != 0 {
		return 0, fmt.Errorf("%q: not a hexadecimal number of %d bits", b, bits)
	}
	return v, nil
}

// parseDec parses a decimal uint64 without making a string of it.
func parseDec(b []byte) (uint64, error) {
	if len(b) == 0 || len(b) > 20 {
		return 0, fmt.Errorf("%q: want 1 to 20 decimal digits", b)
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%q: not decimal", b)
		}
		d := uint64(c - '0')
		if n > (math.MaxUint64-d)/10 {
			return 0, fmt.Errorf("%q: out of range", b)
		}
		n = n*10 + d
	}
	return n, nil
}

// interner makes strings of byte slices, one copy of each distinct
// string: processes of one binary map the same few paths. It keeps at most
// maxInterned strings, then starts again (strings handed out stay valid).
// It is safe for concurrent use; the zero value is ready, and a nil
// interner copies every string.
type interner struct {
	mu   sync.Mutex
	strs map[string]string
}

const maxInterned = 4096

func (in *interner) string(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if in == nil {
		return string(b)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if s, ok := in.strs[string(b)]; ok {
		return s
	}
	if in.strs == nil || len(in.strs) >= maxInterned {
		in.strs = make(map[string]string)
	}
	s := string(b)
	in.strs[s] = s
	return s
}

// mappingClass says what is mapped.
type mappingClass uint8

const (
	// classFile is a file, named by its path.
	classFile mappingClass = iota
	// classAnon is anonymous memory, where JIT compilers put their code:
	// no path, a named anonymous mapping ("[anon:...]"), the heap or
	// stack, or a memfd.
	classAnon
	// classPseudo is a kernel-provided mapping such as "[vdso]" or
	// "[vsyscall]", or another name that is not a path.
	classPseudo
)

func (m *mapping) class() mappingClass {
	switch {
	case m.path == "" || strings.HasPrefix(m.path, "[anon") || m.path == "[heap]" ||
		strings.HasPrefix(m.path, "[stack") || strings.HasPrefix(m.path, "/memfd:"):
		return classAnon
	case strings.HasPrefix(m.path, "/"):
		return classFile
	default:
		return classPseudo
	}
}
