// Package pyinterp is heatscope's one owner of CPython's memory layout: it
// says whether an executable or shared library holds a CPython
// interpreter, which version, and where that version keeps what a reader
// from outside the process follows to list a thread's Python frames.
//
// A binary holds an interpreter when it defines _PyRuntime: Debian's
// python3.11 (libpython linked in statically, its symbols exported) and
// every libpython3.X.so do. The version is the value of Py_Version
// (PY_VERSION_HEX, 3.11 on), else the number in the soname or file name.
// Only 64-bit little-endian builds are read.
//
// The walk the offsets serve (the BPF sampler does it, see
// bpf/profile.bpf.c): _PyRuntime → interpreters.head → (next) each
// PyInterpreterState → threads.head → (next) each PyThreadState, until
// native_thread_id is the sampled thread's id → its current
// _PyInterpreterFrame (3.11 and 3.12 through cframe->current_frame, 3.13
// current_frame) → previous, each frame's code object (f_code, 3.13
// f_executable) and the instruction it runs (prev_instr, 3.13 instr_ptr).
// A frame owned by the C stack (FRAME_OWNED_BY_CSTACK, 3.12 on) is the
// shim that one _PyEval_EvalFrameDefault call pushes below the frames it
// runs: it is no Python frame, and the frame above it is that call's
// entry frame (3.11 says so in the frame's is_entry). A frame whose
// instruction is before its code's _co_firsttraceable is incomplete
// (being set up) and, as in CPython's own traceback code, not shown: only
// the innermost frame of a call can be, and user space tells from the code
// object. The code object's and strings' offsets are what user space reads
// to name a frame: co_qualname, co_filename, co_firstlineno, co_linetable,
// _co_firsttraceable.
//
// The table (layout.go) holds 3.11, 3.12 and 3.13, taken from each
// version's internal headers and checked by the tests against the
// interpreters installed here: each runs a script that reads its own
// thread state, frames, code objects and strings at the table's offsets
// and compares with what Python says (id(), len(), its thread's native
// id). 3.13 publishes _Py_DebugOffsets at the start of _PyRuntime: where
// it is there, its offsets are used and every field where the table
// differs is named (Interpreter.Mismatches). Other versions (3.10 and
// before, 3.14 on) and free-threaded builds are ErrUnsupported: their
// processes keep native frames only.
//
// A binary is read once, however many processes map it: Cache keeps each
// file's answer (failures too) by device, inode and change time, and
// MayBeInterpreter keeps every file whose name does not start with
// "python" or "libpython" from being opened at all.
package pyinterp
