package pyinterp

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// ErrNotInterpreter is the error for a binary that holds no CPython
// interpreter: it defines no _PyRuntime.
var ErrNotInterpreter = errors.New("not a CPython interpreter: no _PyRuntime symbol")

// ErrLauncher is wrapped by the error for a binary that holds no CPython
// but links a libpython that may (a shared-library build's python3.X,
// e.g. pyenv's): it wraps ErrNotInterpreter too. A process of it maps its
// interpreter only once its dynamic loader has loaded libpython, some
// time after its exec.
var ErrLauncher = errors.New("it links libpython, which holds the interpreter")

// ErrUnsupported is wrapped by the error for a CPython whose layout the
// table does not hold (before 3.11, after 3.13, a free-threaded or
// 32-bit build): its processes keep their native frames only.
var ErrUnsupported = errors.New("unsupported CPython")

// Interpreter is what a binary that holds CPython (a python3.X executable
// linked with libpython statically, or libpython3.X.so) says about it.
type Interpreter struct {
	// Version is the release (from Py_Version; from the file's name,
	// micro 0, where a build lacks it).
	Version Version
	// Runtime is _PyRuntime's address in the file (an ELF virtual
	// address): RuntimeAddr turns it into a process's.
	Runtime uint64
	// Layout is where the version keeps the fields a reader follows.
	Layout Layout
	// DebugOffsets is set when the layout was read from the
	// _Py_DebugOffsets that 3.13 publishes at the start of _PyRuntime;
	// Mismatches then names each field where the table says otherwise
	// (the published offsets are used).
	DebugOffsets bool
	Mismatches   []string

	loads []elf.ProgHeader
}

// Open reads the interpreter in the ELF file at path.
func Open(path string) (*Interpreter, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("python interpreter %s: %w", path, err)
	}
	defer f.Close()
	in, err := FromELF(f, filepath.Base(path))
	if err != nil {
		return in, fmt.Errorf("python interpreter %s: %w", path, err)
	}
	return in, nil
}

// FromELF reads the interpreter in an open ELF file; name (the file's
// base name, or "") gives the version where the file lacks Py_Version.
// With an error wrapping ErrUnsupported the Interpreter returned, where
// not nil, says what was found (its Version).
func FromELF(f *elf.File, name string) (*Interpreter, error) {
	syms := symbolValues(f, "_PyRuntime", "Py_Version")
	runtime, ok := syms["_PyRuntime"]
	if !ok {
		if lib, ok := linkedLibpython(f); ok {
			return nil, fmt.Errorf("%w; %w (%s)", ErrNotInterpreter, ErrLauncher, lib)
		}
		return nil, ErrNotInterpreter
	}
	in := &Interpreter{Runtime: runtime}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			in.loads = append(in.loads, p.ProgHeader)
		}
	}
	if f.Class != elf.ELFCLASS64 || f.Data != elf.ELFDATA2LSB {
		return nil, fmt.Errorf("%w: a %v %v build (only 64-bit little-endian ones are read)", ErrUnsupported, f.Class, f.Data)
	}
	if at, ok := syms["Py_Version"]; ok {
		b, err := readAt(f, at, 4)
		if err != nil {
			return nil, fmt.Errorf("read Py_Version: %w", err)
		}
		in.Version = VersionFromHex(binary.LittleEndian.Uint32(b))
	} else if v, ok := versionFromName(name, f); ok {
		in.Version = v
	} else {
		return nil, fmt.Errorf("%w: no Py_Version symbol and no version in the name %q", ErrUnsupported, name)
	}
	l, ok := LayoutFor(in.Version)
	if !ok {
		return in, fmt.Errorf("%w %s: the offsets table holds 3.11 to 3.13", ErrUnsupported, in.Version)
	}
	in.Layout = l
	if in.Version.Minor >= 13 {
		if err := in.readDebugOffsets(f); err != nil {
			return in, err
		}
	}
	return in, nil
}

// RuntimeAddr returns _PyRuntime's address in a process that maps the
// file's offset off at start (a mapping of it from /proc/PID/maps), and
// false when no loadable segment of the file holds that offset.
func (in *Interpreter) RuntimeAddr(start, off uint64) (uint64, bool) {
	for _, p := range in.loads {
		if off >= p.Off && off < p.Off+p.Filesz {
			// The process's address of file address a is a + bias.
			bias := start - (p.Vaddr + (off - p.Off))
			return in.Runtime + bias, true
		}
	}
	return 0, false
}

// linkedLibpython returns the first library the file needs
// (DT_NEEDED) whose name may hold CPython (libpython3.11.so.1.0).
func linkedLibpython(f *elf.File) (string, bool) {
	libs, err := f.ImportedLibraries()
	if err != nil {
		return "", false
	}
	for _, l := range libs {
		if strings.HasPrefix(l, "libpython") {
			return l, true
		}
	}
	return "", false
}

// symbolValues returns the values of the named symbols, defined in the
// dynamic symbol table (the exported ones) or else in .symtab.
func symbolValues(f *elf.File, names ...string) map[string]uint64 {
	out := make(map[string]uint64, len(names))
	find := func(syms []elf.Symbol) {
		for _, s := range syms {
			if s.Section == elf.SHN_UNDEF || s.Value == 0 {
				continue
			}
			for _, n := range names {
				if s.Name == n {
					if _, seen := out[n]; !seen {
						out[n] = s.Value
					}
				}
			}
		}
	}
	if syms, err := f.DynamicSymbols(); err == nil {
		find(syms)
	}
	if len(out) < len(names) {
		if syms, err := f.Symbols(); err == nil {
			find(syms)
		}
	}
	return out
}

// readAt reads n bytes at the file address addr from the section that
// holds them.
func readAt(f *elf.File, addr uint64, n int) ([]byte, error) {
	for _, s := range f.Sections {
		if s.Type == elf.SHT_NOBITS || s.Flags&elf.SHF_ALLOC == 0 {
			continue
		}
		if addr >= s.Addr && addr+uint64(n) <= s.Addr+s.Size {
			b := make([]byte, n)
			if _, err := s.ReadAt(b, int64(addr-s.Addr)); err != nil {
				return nil, fmt.Errorf("read %d bytes at %#x in %s: %w", n, addr, s.Name, err)
			}
			return b, nil
		}
	}
	return nil, fmt.Errorf("no section of the file holds %d bytes at %#x", n, addr)
}

var versionName = regexp.MustCompile(`python(\d)\.(\d+)`)

// versionFromName takes the version from a soname or file name such as
// libpython3.10.so.1.0 or python3.10.
func versionFromName(name string, f *elf.File) (Version, bool) {
	names := []string{name}
	if sonames, err := f.DynString(elf.DT_SONAME); err == nil {
		names = append(sonames, name)
	}
	for _, n := range names {
		m := versionName.FindStringSubmatch(n)
		if m == nil {
			continue
		}
		major, err1 := strconv.Atoi(m[1])
		minor, err2 := strconv.Atoi(m[2])
		if err1 == nil && err2 == nil && major < 256 && minor < 256 {
			return Version{Major: uint8(major), Minor: uint8(minor), MinorOnly: true}, true
		}
	}
	return Version{}, false
}

// The start of 3.13's _Py_DebugOffsets (Include/internal/pycore_runtime.h
// of 3.13): a cookie, the version, whether the build is free-threaded,
// then groups of uint64 offsets, each group's first its struct's size.
// debugWords are the words read, up to the unicode group.
const (
	debugCookie = "xdebugpy"
	debugWords  = 71
)

// The word index in _Py_DebugOffsets (3.13) of each offset read.
const (
	dbgVersion                 = 1
	dbgFreeThreaded            = 2
	dbgRuntimeInterpretersHead = 5
	dbgInterpNext              = 8
	dbgInterpThreadsHead       = 9
	dbgThreadNext              = 21
	dbgThreadCurrentFrame      = 23
	dbgThreadNativeID          = 25
	dbgFramePrevious           = 29
	dbgFrameExecutable         = 30
	dbgFrameInstrPtr           = 31
	dbgFrameOwner              = 33
	dbgCodeFilename            = 35
	dbgCodeName                = 36
	dbgCodeQualname            = 37
	dbgCodeLinetable           = 38
	dbgCodeFirstLineno         = 39
	dbgCodeAdaptive            = 43
	dbgBytesSize               = 65
	dbgBytesData               = 66
	dbgUnicodeState            = 68
	dbgUnicodeLength           = 69
	dbgUnicodeASCIISize        = 70
)

// readDebugOffsets reads 3.13's _Py_DebugOffsets from the file's initial
// _PyRuntime, uses them, and names where the table differs. A layout
// whose offsets it rejects is not used.
func (in *Interpreter) readDebugOffsets(f *elf.File) error {
	b, err := readAt(f, in.Runtime, 8*debugWords)
	if err != nil {
		return fmt.Errorf("read _Py_DebugOffsets: %w", err)
	}
	return in.applyDebugOffsets(b)
}

// applyDebugOffsets takes the offsets from the start of _Py_DebugOffsets
// (debugWords words).
func (in *Interpreter) applyDebugOffsets(b []byte) error {
	if len(b) < 8*debugWords {
		return fmt.Errorf("_Py_DebugOffsets: %d bytes, want %d", len(b), 8*debugWords)
	}
	if !bytes.Equal(b[:8], []byte(debugCookie)) {
		return fmt.Errorf("%w %s: _PyRuntime does not start with the %q cookie of _Py_DebugOffsets", ErrUnsupported, in.Version, debugCookie)
	}
	word := func(i int) uint64 { return binary.LittleEndian.Uint64(b[8*i:]) }
	if v := VersionFromHex(uint32(word(dbgVersion))); v.Major != in.Version.Major || v.Minor != in.Version.Minor {
		return fmt.Errorf("%w: _Py_DebugOffsets says version %s, Py_Version %s", ErrUnsupported, v, in.Version)
	}
	if word(dbgFreeThreaded) != 0 {
		return fmt.Errorf("%w %s: a free-threaded build", ErrUnsupported, in.Version)
	}
	l := &in.Layout
	fields := []struct {
		name string
		dst  *uint32
		word int
	}{
		{"runtime_state.interpreters_head", &l.RuntimeInterpretersHead, dbgRuntimeInterpretersHead},
		{"interpreter_state.next", &l.InterpNext, dbgInterpNext},
		{"interpreter_state.threads_head", &l.InterpThreadsHead, dbgInterpThreadsHead},
		{"thread_state.next", &l.ThreadNext, dbgThreadNext},
		{"thread_state.current_frame", &l.ThreadFrame, dbgThreadCurrentFrame},
		{"thread_state.native_thread_id", &l.ThreadNativeID, dbgThreadNativeID},
		{"interpreter_frame.previous", &l.FramePrevious, dbgFramePrevious},
		{"interpreter_frame.executable", &l.FrameCode, dbgFrameExecutable},
		{"interpreter_frame.instr_ptr", &l.FrameInstr, dbgFrameInstrPtr},
		{"interpreter_frame.owner", &l.FrameOwner, dbgFrameOwner},
		{"code_object.filename", &l.CodeFilename, dbgCodeFilename},
		{"code_object.name", &l.CodeName, dbgCodeName},
		{"code_object.qualname", &l.CodeQualname, dbgCodeQualname},
		{"code_object.linetable", &l.CodeLinetable, dbgCodeLinetable},
		{"code_object.firstlineno", &l.CodeFirstLineno, dbgCodeFirstLineno},
		{"code_object.co_code_adaptive", &l.CodeAdaptive, dbgCodeAdaptive},
		{"bytes_object.ob_size", &l.BytesSize, dbgBytesSize},
		{"bytes_object.ob_sval", &l.BytesData, dbgBytesData},
		{"unicode_object.state", &l.UnicodeState, dbgUnicodeState},
		{"unicode_object.length", &l.UnicodeLength, dbgUnicodeLength},
		{"unicode_object.asciiobject_size", &l.UnicodeASCIIData, dbgUnicodeASCIISize},
	}
	for _, fd := range fields {
		v := word(fd.word)
		if v > 1<<20 {
			return fmt.Errorf("%w %s: _Py_DebugOffsets gives %s as %d, not an offset", ErrUnsupported, in.Version, fd.name, v)
		}
		if uint32(v) != *fd.dst {
			in.Mismatches = append(in.Mismatches, fmt.Sprintf("%s: table %d, _Py_DebugOffsets %d", fd.name, *fd.dst, v))
			*fd.dst = uint32(v)
		}
	}
	in.DebugOffsets = true
	return nil
}
