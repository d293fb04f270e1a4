package pyinterp

import "fmt"

// NoOffset marks a field a version does not have (Layout.FrameIsEntry
// from 3.12 on, Layout.CFrameCurrentFrame from 3.13 on).
const NoOffset = ^uint32(0)

// NoOwner marks an owner value a version does not have
// (Layout.OwnerCStack before 3.12).
const NoOwner = ^uint8(0)

// Layout is where CPython keeps, in one version, the fields a reader from
// outside the process follows: from _PyRuntime to the thread states, from
// a thread state to its current interpreter frame, along the frames, and
// in the code objects and strings the frames point to. Offsets are in
// bytes from the start of the struct named by the field's prefix; every
// pointer and Py_ssize_t is 8 bytes (64-bit builds only).
type Layout struct {
	// RuntimeInterpretersHead: _PyRuntimeState.interpreters.head, the
	// newest interpreter (the main one where there are no others).
	RuntimeInterpretersHead uint32 `json:"runtime_interpreters_head"`
	// InterpNext and InterpThreadsHead: PyInterpreterState.next and
	// .threads.head (the newest thread state).
	InterpNext        uint32 `json:"interp_next"`
	InterpThreadsHead uint32 `json:"interp_threads_head"`
	// ThreadNext and ThreadNativeID: PyThreadState.next and
	// .native_thread_id (the kernel's thread id, an unsigned long).
	ThreadNext     uint32 `json:"thread_next"`
	ThreadNativeID uint32 `json:"thread_native_id"`
	// ThreadFrame is where a thread state holds its current frame: in
	// 3.11 and 3.12 PyThreadState.cframe, a _PyCFrame pointer whose
	// current_frame is at CFrameCurrentFrame; in 3.13
	// PyThreadState.current_frame itself (CFrameCurrentFrame NoOffset).
	ThreadFrame        uint32 `json:"thread_frame"`
	CFrameCurrentFrame uint32 `json:"cframe_current_frame"`
	// _PyInterpreterFrame: the code object (f_code; 3.13 f_executable),
	// the previous (calling) frame, the instruction being run (prev_instr;
	// 3.13 instr_ptr), the owner (a char) and, in 3.11 only, is_entry (a
	// bool: the first frame of a _PyEval_EvalFrameDefault call).
	FrameCode     uint32 `json:"frame_code"`
	FramePrevious uint32 `json:"frame_previous"`
	FrameInstr    uint32 `json:"frame_instr"`
	FrameOwner    uint32 `json:"frame_owner"`
	FrameIsEntry  uint32 `json:"frame_is_entry"`
	// Owner values (enum _frameowner): a generator's frame, and from 3.12
	// the shim frame _PyEval_EvalFrameDefault pushes below the frames it
	// runs (FRAME_OWNED_BY_CSTACK; NoOwner before 3.12).
	OwnerGenerator uint8 `json:"owner_generator"`
	OwnerCStack    uint8 `json:"owner_cstack"`
	// PyCodeObject: co_qualname, co_name, co_filename (str pointers),
	// co_firstlineno (an int), co_linetable (a bytes pointer),
	// _co_firsttraceable (an int: the code unit before which a frame is
	// incomplete) and co_code_adaptive (where the bytecode starts, inline).
	CodeQualname       uint32 `json:"code_qualname"`
	CodeName           uint32 `json:"code_name"`
	CodeFilename       uint32 `json:"code_filename"`
	CodeFirstLineno    uint32 `json:"code_firstlineno"`
	CodeLinetable      uint32 `json:"code_linetable"`
	CodeFirstTraceable uint32 `json:"code_firsttraceable"`
	CodeAdaptive       uint32 `json:"code_adaptive"`
	// Strings (PyASCIIObject): the length (Py_ssize_t), the state bit
	// field (a uint32: kind in bits 2-4, compact bit 5, ascii bit 6), and
	// where a compact string's characters start: after PyASCIIObject for
	// an ASCII one, after PyCompactUnicodeObject otherwise.
	UnicodeLength      uint32 `json:"unicode_length"`
	UnicodeState       uint32 `json:"unicode_state"`
	UnicodeASCIIData   uint32 `json:"unicode_ascii_data"`
	UnicodeCompactData uint32 `json:"unicode_compact_data"`
	// PyBytesObject (co_linetable): ob_size and where the bytes start.
	BytesSize uint32 `json:"bytes_size"`
	BytesData uint32 `json:"bytes_data"`
}

// The state bits of a PyASCIIObject, in every version the table holds.
const (
	UnicodeKindShift = 2
	UnicodeKindMask  = 7
	UnicodeCompact   = 1 << 5
	UnicodeASCII     = 1 << 6
)

// The layouts, taken from each version's own headers (offsetof on the
// internal structs, Py_BUILD_CORE) and checked against the running
// interpreters by this package's tests (layout_test.go): Debian's 3.11.2
// and pyenv's 3.11.7 agree, as do 3.12.1 and 3.13.0 with their headers.
var layouts = map[[2]uint8]Layout{
	{3, 11}: {
		RuntimeInterpretersHead: 40,
		InterpNext:              0, InterpThreadsHead: 16,
		ThreadNext: 8, ThreadNativeID: 160,
		ThreadFrame: 56, CFrameCurrentFrame: 8,
		FrameCode: 32, FramePrevious: 48, FrameInstr: 56, FrameOwner: 69, FrameIsEntry: 68,
		OwnerGenerator: 1, OwnerCStack: NoOwner,
		CodeQualname: 128, CodeName: 120, CodeFilename: 112, CodeFirstLineno: 72,
		CodeLinetable: 136, CodeFirstTraceable: 168, CodeAdaptive: 184,
		UnicodeLength: 16, UnicodeState: 32, UnicodeASCIIData: 48, UnicodeCompactData: 72,
		BytesSize: 16, BytesData: 32,
	},
	{3, 12}: {
		RuntimeInterpretersHead: 40,
		InterpNext:              0, InterpThreadsHead: 72,
		ThreadNext: 8, ThreadNativeID: 144,
		ThreadFrame: 56, CFrameCurrentFrame: 0,
		FrameCode: 0, FramePrevious: 8, FrameInstr: 56, FrameOwner: 70, FrameIsEntry: NoOffset,
		OwnerGenerator: 1, OwnerCStack: 3,
		CodeQualname: 128, CodeName: 120, CodeFilename: 112, CodeFirstLineno: 68,
		CodeLinetable: 136, CodeFirstTraceable: 176, CodeAdaptive: 192,
		UnicodeLength: 16, UnicodeState: 32, UnicodeASCIIData: 40, UnicodeCompactData: 56,
		BytesSize: 16, BytesData: 32,
	},
	{3, 13}: {
		RuntimeInterpretersHead: 632,
		InterpNext:              7264, InterpThreadsHead: 7344,
		ThreadNext: 8, ThreadNativeID: 160,
		ThreadFrame: 72, CFrameCurrentFrame: NoOffset,
		FrameCode: 0, FramePrevious: 8, FrameInstr: 56, FrameOwner: 70, FrameIsEntry: NoOffset,
		OwnerGenerator: 1, OwnerCStack: 3,
		CodeQualname: 128, CodeName: 120, CodeFilename: 112, CodeFirstLineno: 68,
		CodeLinetable: 136, CodeFirstTraceable: 184, CodeAdaptive: 200,
		UnicodeLength: 16, UnicodeState: 32, UnicodeASCIIData: 40, UnicodeCompactData: 56,
		BytesSize: 16, BytesData: 32,
	},
}

// Versions lists the minor versions the table holds, oldest first.
func Versions() []Version {
	return []Version{{Major: 3, Minor: 11, MinorOnly: true}, {Major: 3, Minor: 12, MinorOnly: true}, {Major: 3, Minor: 13, MinorOnly: true}}
}

// LayoutFor returns the layout of a version's table entry (only major
// and minor count), and false for a version the table does not hold.
func LayoutFor(v Version) (Layout, bool) {
	l, ok := layouts[[2]uint8{v.Major, v.Minor}]
	return l, ok
}

// Version is a CPython release, as PY_VERSION_HEX numbers it.
type Version struct {
	Major, Minor, Micro uint8
	// MinorOnly says that the micro version is not known (a version
	// read from a file's name, a table entry's): Micro is 0 and not
	// shown.
	MinorOnly bool
}

// VersionFromHex decodes PY_VERSION_HEX (0x030B02F0 is 3.11.2 final).
func VersionFromHex(hex uint32) Version {
	return Version{Major: uint8(hex >> 24), Minor: uint8(hex >> 16), Micro: uint8(hex >> 8)}
}

func (v Version) String() string {
	if v.MinorOnly {
		return fmt.Sprintf("%d.%d", v.Major, v.Minor)
	}
	return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Micro)
}
