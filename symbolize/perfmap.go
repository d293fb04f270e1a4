package symbolize

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/heatscope/heatscope/internal/rawsys"
)

// perfMap is the symbol table a JIT runtime writes to /tmp/perf-PID.map.
// Runtimes append to it as they compile, so it is re-read when an address
// misses and the file has grown since the last read.
type perfMap struct {
	path string
	// size is the file's size at the last read, -1 before the first.
	size int64
	tab  symtab
}

func newPerfMap(path string) *perfMap { return &perfMap{path: path, size: -1} }

// lookup returns the name of the JIT symbol containing addr.
func (p *perfMap) lookup(addr uint64) (string, bool) {
	if i, ok := p.tab.lookup(addr); ok {
		return p.tab.name(i), true
	}
	if !p.reload() {
		return "", false
	}
	if i, ok := p.tab.lookup(addr); ok {
		return p.tab.name(i), true
	}
	return "", false
}

// reload re-reads the file if its size changed and reports whether it did.
func (p *perfMap) reload() bool {
	var st syscall.Stat_t
	if err := rawsys.Stat(p.path, &st); err != nil || st.Size == p.size {
		return false
	}
	f, err := os.Open(p.path)
	if err != nil {
		return false
	}
	defer f.Close()
	tab, err := parsePerfMap(f)
	if err != nil {
		return false
	}
	p.tab, p.size = tab, st.Size
	return true
}

// parsePerfMap parses perf map lines "START SIZE NAME": START and SIZE in
// hex with or without "0x", NAME the rest of the line (it may contain
// spaces). Malformed lines, such as a line the runtime is still writing,
// are skipped. When entries share a start address, the last one wins:
// runtimes reuse code memory and append the new occupant.
func parsePerfMap(r io.Reader) (symtab, error) {
	var cands []candidate
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for line := 0; sc.Scan(); line++ {
		start, rest, ok1 := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		size, name, ok2 := strings.Cut(strings.TrimLeft(rest, " "), " ")
		name = strings.TrimLeft(name, " ")
		if !ok1 || !ok2 || name == "" {
			continue
		}
		a, err1 := parseHex(start)
		n, err2 := parseHex(size)
		if err1 != nil || err2 != nil {
			continue
		}
		cands = append(cands, candidate{addr: a, size: n, name: name, rank: line})
	}
	if err := sc.Err(); err != nil {
		return symtab{}, fmt.Errorf("read perf map: %w", err)
	}
	return buildSymtab(cands, nil, false), nil
}

// parseHex parses a hex number with an optional "0x" prefix.
func parseHex(s string) (uint64, error) {
	if len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
		s = s[2:]
	}
	return strconv.ParseUint(s, 16, 64)
}
