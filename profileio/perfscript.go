package profileio

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/heatscope/heatscope/sample"
)

// ReadPerfScript parses the text `perf script` prints and calls fn once per
// sample, in file order, streaming: it holds one sample at a time. fn may
// keep the sample; each has its own Stack. A non-nil error from fn stops
// the read and is returned wrapped.
//
// It accepts the files FlameScope accepts (Netflix/flamescope,
// app/perf/regexp.py and app/perf/flame_graph.py):
//
//   - Lines starting with '#' (perf script --header) are skipped, and so are
//     blank lines. Line endings may be LF or CRLF; the file may be gzipped.
//   - A sample starts at an event line: any line, not starting with a tab,
//     on which FlameScope's event pattern ` +([0-9.]+): .+?:` is found. The
//     first such timestamp on the line is the sample's time. The text
//     before it is "comm [pid/]tid [cpu]", each part but comm optional:
//     `Web Content 1234/1240 [003] 12345.678901: ...`,
//     `kworker/0:1-eve 15 [000] ...`, `java 4242 99161.926202: ...`.
//     After the time come an optional period (perf script -F +period) and
//     the event name (cpu-clock:, cycles:ppp:, cpu-clock:pppH:, ...).
//   - Lines starting with a tab, and lines of the form
//     `<hex address> <symbol> (<module>)` after leading spaces, are stack
//     frames of the current sample, leaf first, as perf prints them.
//     Perf-map-agent's "outer->inner" chains in JIT frames are split into
//     one frame per function, as FlameScope splits them.
//   - Within a sample, other lines that start with white space (such as
//     source lines from -F +srcline) are skipped, as FlameScope skips them.
//
// Where FlameScope is looser, ReadPerfScript reports `line N: ...` errors:
// a stack frame before the first event line, a line that is neither a
// comment, an event line, nor indented, and a timestamp that is not a
// number. It also parses more exactly: the command is everything before the
// pid (FlameScope's command stops at the first digit), symbol offsets are
// stripped only as a trailing "+0x<hex>" (FlameScope cuts at the first
// '+', which breaks C++ operator+), and the module is the last balanced
// parenthesised group ("(/memfd:x (deleted))" gives "/memfd:x (deleted)").
//
// perf script prints perf's own clock, by default the kernel's monotonic
// time since boot, not wall time. An imported perf script keeps its own
// timestamps: Time is the printed timestamp converted exactly to
// nanoseconds (seconds*1e9 plus the decimal fraction; digits past the
// ninth are dropped), so imported samples live in the perf clock's time
// base, not in Unix time.
//
// When perf printed a single number before the time it is the thread id
// (perf script's default); PID is then set to the same number, which is
// right for single-threaded processes and main threads.
//
// Frames: Address is the hex column, Function the symbol without its
// offset, Module the text in parentheses (with a trailing "+0x<offset>",
// as perf script -F +dsoff prints it, removed). A frame is KindKernel for
// [kernel.kallsyms], a vmlinux, or any kernel address (a bracketed kernel
// module such as [nf_tables]); KindJIT for /tmp/perf-PID.map; KindUnknown
// when the symbol is "[unknown]" (Function becomes "[module+0xaddress]"
// with the module's base name and the dsoff offset when given, else the
// address, or "[unknown]" when the module is unknown too); KindUser
// otherwise. Frames perf --inline prints as "(inlined)" take the module of
// the frame they were inlined into. A symbol "py::<qualname>:<file>" in
// module <file> (PerfScriptWriter's Python frames) is KindPython, its
// Function the qualified name, Module the file; its lines are not in the
// text.
func ReadPerfScript(r io.Reader, fn func(*sample.Sample) error) error {
	in, err := openInput(r)
	if err != nil {
		return fmt.Errorf("perf script: %w", err)
	}
	p := perfParser{
		lines:   lineReader{r: in},
		names:   interner{},
		modules: map[string]moduleInfo{},
		sites:   map[string]*frameSite{},
		recent:  new([1 << recentBits]*frameSite),
	}
	if err := p.run(fn); err != nil {
		return fmt.Errorf("perf script: %w", err)
	}
	return nil
}

// inlinedModule is the module text perf prints for inlined frames.
const inlinedModule = "inlined"

// perfParser holds the state of one ReadPerfScript.
type perfParser struct {
	lines   lineReader
	names   interner
	modules map[string]moduleInfo
	sites   map[string]*frameSite // by frame text
	// recent holds the site last seen at each address, by a hash of it:
	// cheaper than a lookup in sites.
	recent      *[1 << recentBits]*frameSite
	siteLookups int       // lookups in sites
	uncached    frameSite // the last site parsed without the cache

	// lastModule and lastClass cache the most recent module: consecutive
	// frames are usually in the same one.
	lastModule string
	lastClass  moduleClass

	inSample bool          // an event line has been read
	head     sample.Sample // the current sample, without its stack
	frames   []sample.Frame
	scratch  []byte
}

func (p *perfParser) run(fn func(*sample.Sample) error) error {
	for {
		line, err := p.lines.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		if line[0] != '\t' {
			isEvent, err := p.eventLine(line, fn)
			if err != nil {
				return err
			}
			if isEvent {
				continue
			}
		}
		switch {
		case p.inSample && p.addFrame(line, false):
		case !p.inSample && isFrame(line):
			return fmt.Errorf("line %d: stack frame before any sample's event line: %q", p.lines.n, clip(line))
		case len(trimSpace(line)) == 0:
		case p.inSample && (line[0] == ' ' || line[0] == '\t'):
			// Other indented lines of a sample, such as source lines
			// (perf script -F +srcline), are skipped, as FlameScope
			// skips them.
		default:
			return fmt.Errorf("line %d: not a perf script event line: %q", p.lines.n, clip(line))
		}
	}
	return p.emit(fn)
}

// eventLine parses line as an event line. When it is one, it hands the
// previous sample to fn and starts a new one.
func (p *perfParser) eventLine(line []byte, fn func(*sample.Sample) error) (bool, error) {
	prefixEnd, timeStart, colon, ok := findEventTime(line)
	if !ok {
		return false, nil
	}
	t, ok := parseTimestamp(line[timeStart:colon])
	if !ok {
		return true, fmt.Errorf("line %d: bad timestamp %q", p.lines.n, line[timeStart:colon])
	}
	if err := p.emit(fn); err != nil {
		return true, err
	}
	p.inSample = true
	p.head = sample.Sample{Time: t}
	p.parseTask(line[:prefixEnd])
	// A sample recorded without -g has its one frame on the event line,
	// after the event name.
	if rest := afterEventName(line[colon+2:]); len(rest) > 0 && isFrame(rest) {
		p.addFrame(rest, true)
	}
	return true, nil
}

// findEventTime finds FlameScope's event pattern ` +([0-9.]+): .+?:` on
// line, leftmost as a regexp search would: the time is line[timeStart:colon]
// and the task fields end at prefixEnd, where the spaces before the time
// start.
func findEventTime(line []byte) (prefixEnd, timeStart, colon int, ok bool) {
	for from := 0; ; {
		i := bytes.Index(line[from:], []byte(": "))
		if i < 0 {
			return 0, 0, 0, false
		}
		c := from + i
		from = c + 1
		// The pattern needs another ':' after at least one character
		// following ": "; if there is none after this candidate there is
		// none after any later one either.
		if c+3 > len(line) || bytes.IndexByte(line[c+3:], ':') < 0 {
			return 0, 0, 0, false
		}
		s := c
		for s > 0 && (isDigit(line[s-1]) || line[s-1] == '.') {
			s--
		}
		if s == c || s == 0 || line[s-1] != ' ' {
			continue
		}
		e := s - 1
		for e > 0 && line[e-1] == ' ' {
			e--
		}
		return e, s, c, true
	}
}

// parseTimestamp converts perf's "seconds.fraction" to nanoseconds exactly.
func parseTimestamp(b []byte) (int64, bool) {
	const maxSeconds = (math.MaxInt64 - 999_999_999) / 1_000_000_000
	var secs, frac int64
	digits, fracDigits, dot := 0, 0, false
	for _, c := range b {
		switch {
		case c == '.':
			if dot {
				return 0, false
			}
			dot = true
		case !dot:
			secs = secs*10 + int64(c-'0')
			if secs > maxSeconds {
				return 0, false
			}
			digits++
		default:
			digits++
			if fracDigits < 9 {
				frac = frac*10 + int64(c-'0')
				fracDigits++
			}
		}
	}
	if digits == 0 {
		return 0, false
	}
	for ; fracDigits < 9; fracDigits++ {
		frac *= 10
	}
	return secs*1e9 + frac, true
}

// parseTask fills in comm, pid, tid and cpu from the text before the time:
// "comm [pid/]tid [cpu]", parsed from the right because comm may contain
// spaces and digits.
func (p *perfParser) parseTask(b []byte) {
	b = bytes.TrimRight(b, " ")
	if n := len(b); n > 2 && b[n-1] == ']' {
		if i := bytes.LastIndexByte(b, '['); i >= 0 {
			if cpu, ok := parseUint32(b[i+1 : n-1]); ok {
				p.head.CPU = cpu
				b = bytes.TrimRight(b[:i], " ")
			}
		}
	}
	word := b[bytes.LastIndexByte(b, ' ')+1:]
	pid, tid, ok := parseTaskID(word)
	if ok {
		p.head.PID, p.head.TID = pid, tid
		b = b[:len(b)-len(word)]
	}
	p.head.Comm = p.names.get(bytes.Trim(b, " "))
}

// parseTaskID parses "tid" or "pid/tid".
func parseTaskID(b []byte) (pid, tid uint32, ok bool) {
	if i := bytes.IndexByte(b, '/'); i >= 0 {
		pid, ok1 := parseUint32(b[:i])
		tid, ok2 := parseUint32(b[i+1:])
		return pid, tid, ok1 && ok2
	}
	tid, ok = parseUint32(b)
	return tid, tid, ok
}

// parseUint32 parses a non-empty decimal number that fits 32 bits.
func parseUint32(b []byte) (uint32, bool) {
	n, ok := parseDecimal(b, 10)
	return uint32(n), ok && n <= math.MaxUint32
}

// afterEventName skips the optional period and the event name following
// an event line's time and returns the rest, trimmed.
func afterEventName(b []byte) []byte {
	b = bytes.TrimLeft(b, " ")
	word := b[:wordEnd(b)]
	if len(word) > 0 && len(word) < len(b) && allDigits(word) {
		b = bytes.TrimLeft(b[len(word):], " ")
	}
	return trimSpace(b[wordEnd(b):])
}

// isFrame reports whether line looks like a stack frame: indentation,
// a hex address, a space and a symbol.
func isFrame(line []byte) bool {
	i := 0
	for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
		i++
	}
	j := i
	for j < len(line) && isHex(line[j]) {
		j++
	}
	return j > i && j-i <= 16 && j+1 < len(line) && line[j] == ' '
}

// addFrame parses a frame, "<hex address> <symbol>[+0x<offset>] (<module>)",
// and appends it to the current stack. It reports false when line is not
// one. With needModule, a frame must name its module.
func (p *perfParser) addFrame(line []byte, needModule bool) bool {
	i := 0
	for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
		i++
	}
	var addr uint64
	j := i
	for ; j < len(line); j++ {
		v := hexDigits[line[j]]
		if v == 0xff {
			break
		}
		addr = addr<<4 | uint64(v)
	}
	if j == i || j-i > 16 || j >= len(line) || line[j] != ' ' {
		return false
	}
	rest := trimSpace(line[j+1:])
	if len(rest) == 0 {
		return false
	}
	slot := &p.recent[(addr*0x9e3779b97f4a7c15)>>(64-recentBits)]
	site := *slot
	if site == nil || site.text != string(rest) {
		site = p.site(rest)
		if site != &p.uncached {
			*slot = site
		}
	}
	if needModule && !site.hasModule {
		return false
	}
	f := sample.Frame{Function: site.function, Module: site.module, Address: addr, Kind: frameKind(site.class, addr, site.resolved)}
	if site.python {
		f.Kind = sample.KindPython
	}
	switch {
	case site.unknownAt:
		if site.unknownName == "" || site.unknownAddr != addr {
			p.scratch = appendUnknownName(p.scratch[:0], site.module, addr)
			site.unknownName, site.unknownAddr = p.names.get(p.scratch), addr
		}
		f.Function = site.unknownName
	case site.chain && f.Kind == sample.KindJIT:
		p.addInlineChain(f, []byte(f.Function))
		return true
	}
	p.frames = append(p.frames, f)
	return true
}

// maxFrameSites bounds the cache of parsed frame texts.
const maxFrameSites = 1 << 18

// recentBits sizes perfParser.recent.
const recentBits = 13

// siteCheckSize is the size of the frame cache at which, and at every
// multiple of which, it is checked to pay.
const siteCheckSize = 1 << 16

// site returns the parsed frame text, from the cache when it is there.
// The cache is dropped when it holds more than one entry for every two
// lookups: frame texts that seldom recur are cheaper parsed than kept.
// Without it, the site returned is p.uncached, valid until the next call.
func (p *perfParser) site(rest []byte) *frameSite {
	if p.sites == nil {
		p.uncached = frameSite{}
		p.parseSite(rest, &p.uncached)
		return &p.uncached
	}
	p.siteLookups++
	if site, ok := p.sites[string(rest)]; ok {
		return site
	}
	site := &frameSite{text: string(rest)}
	p.parseSite(rest, site)
	if len(p.sites) < maxFrameSites {
		p.sites[site.text] = site
		if n := len(p.sites); n%siteCheckSize == 0 && 2*n > p.siteLookups {
			p.sites = nil
		}
	}
	return site
}

// frameSite is what the text of a frame line after the address says: the
// same text recurs in most samples, so it is parsed once.
type frameSite struct {
	text      string // the frame line after the address
	function  string
	module    string
	class     moduleClass
	hasModule bool
	resolved  bool
	unknownAt bool // function is "[module+0x<address>]", named per frame
	// unknownName is the name of an unknownAt site at unknownAddr, the
	// address it was last seen at.
	unknownName string
	unknownAddr uint64
	chain       bool // function holds "->", split in JIT frames
	python      bool // a Python frame: "py::qualname:file (file)"
}

// parseSite parses "<symbol>[+0x<offset>] (<module>[+0x<offset>])".
func (p *perfParser) parseSite(rest []byte, site *frameSite) {
	sym, mod, hasModule := splitModule(rest)
	site.hasModule = hasModule
	sym = trimOffset(sym)
	mod, dsoOffset, hasOffset := cutOffset(mod)
	site.module, site.class = p.module(mod)
	site.resolved = len(sym) > 0 && !(sym[0] == '[' && sym[len(sym)-1] == ']')
	if !site.resolved && (len(sym) == 0 || string(sym) == "[unknown]") {
		if !hasOffset {
			site.unknownAt = true
			return
		}
		p.scratch = appendUnknownName(p.scratch[:0], site.module, dsoOffset)
		sym = p.scratch
	}
	if fn, ok := pythonSymbol(sym, mod); ok {
		site.function, site.python = p.names.get(fn), true
		return
	}
	site.chain = bytes.Contains(sym, []byte("->"))
	site.function = p.names.get(sym)
}

// PythonSymbolPrefix starts the symbol of a Python frame in perf script
// text: "py::<qualname>:<file>", as perf script shows CPython's own perf
// map entries (python -X perf).
const PythonSymbolPrefix = "py::"

// pythonSymbol returns the qualified name of a Python frame's symbol,
// "py::<qualname>:<file>" in module <file>; ok is false for any other
// symbol. A qualified name has no ':', a file may.
func pythonSymbol(sym, module []byte) (qualname []byte, ok bool) {
	rest, ok := bytes.CutPrefix(sym, []byte(PythonSymbolPrefix))
	if !ok {
		return nil, false
	}
	qualname, file, ok := bytes.Cut(rest, []byte{':'})
	if !ok || len(qualname) == 0 || len(file) == 0 || !bytes.Equal(file, module) {
		return nil, false
	}
	return qualname, true
}

// addInlineChain adds the frames of perf-map-agent's "a->b->c" notation,
// where c was inlined into b and b into a: leaf first, c, b, a.
func (p *perfParser) addInlineChain(f sample.Frame, chain []byte) {
	for {
		i := bytes.LastIndex(chain, []byte("->"))
		name := chain
		if i >= 0 {
			name = chain[i+2:]
		}
		if len(name) > 0 {
			f.Function = p.names.get(name)
			p.frames = append(p.frames, f)
		}
		if i < 0 {
			return
		}
		chain = chain[:i]
	}
}

// moduleInfo is an interned module name and its class.
type moduleInfo struct {
	name  string
	class moduleClass
}

// module interns a module name and returns its class.
func (p *perfParser) module(b []byte) (string, moduleClass) {
	if string(b) == p.lastModule {
		return p.lastModule, p.lastClass
	}
	m, ok := p.modules[string(b)]
	if !ok {
		m.name = string(b)
		m.class = classify(m.name)
		if len(p.modules) < maxInterned {
			p.modules[m.name] = m
		}
	}
	p.lastModule, p.lastClass = m.name, m.class
	return m.name, m.class
}

// splitModule splits "symbol (module)" at the last balanced parenthesised
// group, which must follow a space.
func splitModule(b []byte) (sym, mod []byte, ok bool) {
	n := len(b)
	if n < 2 || b[n-1] != ')' {
		return b, nil, false
	}
	depth := 0
	for k := n - 1; k >= 0; k-- {
		switch b[k] {
		case ')':
			depth++
		case '(':
			depth--
			if depth > 0 {
				continue
			}
			if k == 0 {
				return nil, b[1 : n-1], true
			}
			if b[k-1] != ' ' {
				return b, nil, false
			}
			return bytes.TrimRight(b[:k-1], " "), b[k+1 : n-1], true
		}
	}
	return b, nil, false
}

// trimOffset removes a trailing "+0x<hex>" instruction offset.
func trimOffset(sym []byte) []byte {
	trimmed, _, _ := cutOffset(sym)
	return trimmed
}

// cutOffset splits a trailing "+0x<hex>" off b and returns its value.
func cutOffset(b []byte) ([]byte, uint64, bool) {
	i := bytes.LastIndexByte(b, '+')
	if i <= 0 || len(b)-i < 4 || b[i+1] != '0' || b[i+2] != 'x' || len(b)-i-3 > 16 {
		return b, 0, false
	}
	var v uint64
	for _, c := range b[i+3:] {
		d, ok := hexValue(c)
		if !ok {
			return b, 0, false
		}
		v = v<<4 | uint64(d)
	}
	return b[:i], v, true
}

// emit hands the current sample, if any, to fn with a stack of its own.
func (p *perfParser) emit(fn func(*sample.Sample) error) error {
	if !p.inSample {
		return nil
	}
	s := new(sample.Sample)
	*s = p.head
	if len(p.frames) > 0 {
		s.Stack = make([]sample.Frame, len(p.frames))
		copy(s.Stack, p.frames)
		resolveInlined(s.Stack)
	}
	p.frames = p.frames[:0]
	p.inSample = false
	if err := fn(s); err != nil {
		return fmt.Errorf("line %d: %w", p.lines.n, err)
	}
	return nil
}

// resolveInlined gives frames perf printed as "(inlined)" the module, build
// id and kind of the frame they were inlined into: the next one, rootward,
// that is not itself inlined.
func resolveInlined(stack []sample.Frame) {
	var outer *sample.Frame
	for i := len(stack) - 1; i >= 0; i-- {
		f := &stack[i]
		if f.Module != inlinedModule {
			outer = f
			continue
		}
		if outer == nil {
			f.Module = ""
			continue
		}
		f.Module, f.BuildID, f.Kind = outer.Module, outer.BuildID, outer.Kind
	}
}

// trimSpace removes leading and trailing spaces and tabs.
func trimSpace(b []byte) []byte {
	i, j := 0, len(b)
	for i < j && (b[i] == ' ' || b[i] == '\t') {
		i++
	}
	for j > i && (b[j-1] == ' ' || b[j-1] == '\t') {
		j--
	}
	return b[i:j]
}

// wordEnd returns the index of the first space in b, or len(b).
func wordEnd(b []byte) int {
	if i := bytes.IndexByte(b, ' '); i >= 0 {
		return i
	}
	return len(b)
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isHex(c byte) bool {
	_, ok := hexValue(c)
	return ok
}

// hexDigits maps a byte to its value as a hex digit, or to 0xff.
var hexDigits = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = byte(c - '0')
	}
	for c := 'a'; c <= 'f'; c++ {
		t[c] = byte(c-'a') + 10
		t[c-'a'+'A'] = byte(c-'a') + 10
	}
	return t
}()

func hexValue(c byte) (byte, bool) {
	v := hexDigits[c]
	return v, v != 0xff
}

func allDigits(b []byte) bool {
	for _, c := range b {
		if !isDigit(c) {
			return false
		}
	}
	return len(b) > 0
}

// clip shortens a line quoted in an error message.
func clip(line []byte) []byte {
	const limit = 80
	if len(line) > limit {
		return line[:limit]
	}
	return line
}
