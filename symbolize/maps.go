package symbolize

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// mapping is one line of /proc/PID/maps.
type mapping struct {
	start, end uint64
	// offset is the file offset mapped at start.
	offset uint64
	exec   bool
	// dev and inode identify the mapped file; dev is encoded as
	// stat(2)'s st_dev.
	dev, inode uint64
	// path is the pathname column without a " (deleted)" suffix: a file
	// path, a pseudo name such as "[vdso]", or empty for anonymous memory.
	path    string
	deleted bool
}

const deletedSuffix = " (deleted)"

// parseMaps parses the text of /proc/PID/maps. Every line is
// "START-END PERMS OFFSET MAJOR:MINOR INODE [PATH]", the path (which may
// contain spaces) starting after the padding that follows the inode.
func parseMaps(r io.Reader) ([]mapping, error) {
	var maps []mapping
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	line := 0
	for sc.Scan() {
		line++
		if len(sc.Bytes()) == 0 {
			continue
		}
		m, err := parseMapsLine(sc.Text())
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		maps = append(maps, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", line+1, err)
	}
	return maps, nil
}

func parseMapsLine(s string) (mapping, error) {
	var fields [5]string
	rest := s
	for i := range fields {
		rest = strings.TrimLeft(rest, " ")
		end := strings.IndexByte(rest, ' ')
		if end < 0 {
			end = len(rest)
		}
		fields[i], rest = rest[:end], rest[end:]
	}
	var (
		m   mapping
		err error
	)
	lo, hi, ok := strings.Cut(fields[0], "-")
	if !ok {
		return m, fmt.Errorf("address range %q: no '-'", fields[0])
	}
	if m.start, err = strconv.ParseUint(lo, 16, 64); err != nil {
		return m, fmt.Errorf("start address: %w", err)
	}
	if m.end, err = strconv.ParseUint(hi, 16, 64); err != nil {
		return m, fmt.Errorf("end address: %w", err)
	}
	if m.end < m.start {
		return m, fmt.Errorf("address range %q ends before it starts", fields[0])
	}
	if len(fields[1]) != 4 {
		return m, fmt.Errorf("permissions %q: want 4 characters", fields[1])
	}
	m.exec = fields[1][2] == 'x'
	if m.offset, err = strconv.ParseUint(fields[2], 16, 64); err != nil {
		return m, fmt.Errorf("offset: %w", err)
	}
	major, minor, ok := strings.Cut(fields[3], ":")
	if !ok {
		return m, fmt.Errorf("device %q: no ':'", fields[3])
	}
	maj, err := strconv.ParseUint(major, 16, 32)
	if err != nil {
		return m, fmt.Errorf("device major: %w", err)
	}
	mnr, err := strconv.ParseUint(minor, 16, 32)
	if err != nil {
		return m, fmt.Errorf("device minor: %w", err)
	}
	m.dev = unix.Mkdev(uint32(maj), uint32(mnr))
	if m.inode, err = strconv.ParseUint(fields[4], 10, 64); err != nil {
		return m, fmt.Errorf("inode: %w", err)
	}
	m.path = strings.TrimLeft(rest, " ")
	if p, ok := strings.CutSuffix(m.path, deletedSuffix); ok {
		m.path, m.deleted = p, true
	}
	return m, nil
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
