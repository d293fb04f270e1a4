package pyinterp

// Frame is one Python frame as the sampler read it from a thread's chain
// of interpreter frames, unsymbolized: what the sampler hands (in
// profiler.Record.Python, innermost first) to the symbolizer, which names
// it from the process's memory.
type Frame struct {
	// Code is the address of the frame's code object in the process.
	Code uint64
	// Offset is the byte offset, in the code's co_code_adaptive, of the
	// instruction the frame is running (what PyCode_Addr2Line takes:
	// 2 × _PyInterpreterFrame_LASTI), or NoInstr when the frame pointed
	// before its code.
	Offset uint32
	// Entry marks the first frame a _PyEval_EvalFrameDefault call ran
	// (3.11's is_entry; from 3.12 the frame above that call's shim): the
	// frames from the previous Entry frame (exclusive) to this one
	// (inclusive), innermost first, ran in one evaluation loop frame of
	// the native stack, the innermost run in the innermost such frame.
	Entry bool
	// MayBeIncomplete marks the innermost frame of its
	// _PyEval_EvalFrameDefault call, unless a generator owns it: the one
	// frame of a call that may still be being set up (incomplete: its
	// instruction before its code's _co_firsttraceable, which the
	// sampler does not read; pysymbol's Code.Incomplete tells). CPython's
	// own tracebacks leave an incomplete frame out, and it has no line
	// yet: a symbolizer shows no name for it, but keeps it so that the
	// runs Entry delimits stay whole.
	MayBeIncomplete bool
}

// NoInstr is Frame.Offset for a frame whose instruction is not known.
const NoInstr = ^uint32(0)
