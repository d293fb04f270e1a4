// Package sample defines the one type that flows through heatscope: a CPU
// sample with its wall-clock time, where it ran, and its symbolized stack.
//
// Every stage speaks this type: the profiler produces it, the symbolizer
// fills in its frames, the store keeps it, and the exporters write it out.
package sample

import (
	"fmt"
	"time"
)

// Kind says which part of the address space a frame belongs to.
type Kind uint8

// Frame kinds.
const (
	// KindUnknown marks a frame whose address could not be attributed.
	KindUnknown Kind = iota
	// KindKernel marks a kernel (or kernel module) frame.
	KindKernel
	// KindUser marks a frame in a file-backed user-space mapping.
	KindUser
	// KindJIT marks a frame in JIT-compiled code, named by a perf map.
	KindJIT
	// KindPython marks a CPython interpreter frame: a Python function
	// read from the interpreter's own frame chain, not from an address.
	// Its Function is the code object's qualified name (co_qualname,
	// e.g. "Model.forward"), its Module the source file (co_filename),
	// its Line the line being run and StartLine the function's first
	// line (co_firstlineno); it has no BuildID and its Address is 0: a
	// Python function is named by its name, file and lines, so the same
	// function in two processes is one frame.
	KindPython
)

// Valid reports whether k is a frame kind this heatscope knows: a
// reader of stored frames refuses the others (a newer heatscope wrote
// them).
func (k Kind) Valid() bool { return k <= KindPython }

// String returns the lower-case name of the kind, as used in APIs.
func (k Kind) String() string {
	switch k {
	case KindKernel:
		return "kernel"
	case KindUser:
		return "user"
	case KindJIT:
		return "jit"
	case KindPython:
		return "python"
	default:
		return "unknown"
	}
}

// KernelModule is the module name of frames in the kernel image, as perf
// names it.
const KernelModule = "[kernel.kallsyms]"

// Frame is one symbolized stack frame.
type Frame struct {
	// Function is the (demangled) function name, or "[module+0xoffset]"
	// when the address could not be resolved.
	Function string
	// Module is the binary's path, "[kernel.kallsyms]", a kernel module
	// as "[name]", or a pseudo mapping such as "[anon]" or "[unknown]".
	Module string
	// BuildID is the module's GNU build id in hex, when it has one.
	BuildID string
	// Address is the frame's address normalised to the module: the ELF
	// virtual address for user frames (what addr2line takes), the kernel
	// address for kernel frames, the raw address for JIT and unknown ones.
	Address uint64
	// Kind says whether the frame is kernel, user, JIT, Python or
	// unknown code.
	Kind Kind
	// Line is the source line being run in the frame and StartLine the
	// first line of its function, both from 1, 0 when not known. They
	// are set for Python frames (KindPython) only. They are part of the
	// frame (the store keeps a frame per line, pprof writes one Line per
	// line, all in one Function) but not of the function: outputs that
	// group by function (flame graphs, top tables, folded output, the
	// frame= filter, the pre-event diff) aggregate a Python function
	// across its lines as they aggregate a native function across its
	// addresses.
	Line, StartLine uint32
	// Method says how the frame was found when its user stack was walked
	// with unwind tables: MethodTable or MethodFP for the user frames
	// above the sampled pc, MethodNotKnown for every other frame and
	// for stacks walked with frame pointers alone. It is not part of the
	// function: a frame reached both ways is one function.
	Method Method
}

// Name is the name views give the frame's function (flame graphs, top
// tables, folded stacks, the frame filter, the pre-event diff):
// FunctionName of its function, module and kind.
func (f *Frame) Name() string { return FunctionName(f.Function, f.Module, f.Kind) }

// FunctionName is the name views give a frame's function: function
// itself, except for a Python frame, named "qualname (file)" (py-spy's
// style, without the line): a qualified name alone ("<module>",
// "forward", "__init__") is seldom unique in a program, and two functions
// must not add up as one. A Python frame without a file (none, or a
// pseudo module such as "[python]" for a code object that could not be
// read, named "[python+0xADDRESS]") keeps its name alone.
func FunctionName(function, module string, kind Kind) string {
	if kind != KindPython || module == "" || module[0] == '[' && module[len(module)-1] == ']' {
		return function
	}
	return function + " (" + module + ")"
}

// Method says how a user frame was found in a walk with unwind tables.
type Method uint8

// Unwind methods.
const (
	// MethodNotKnown: not found in a table walk (frame pointers alone,
	// the sampled pc, kernel frames), or stored before the store kept it.
	MethodNotKnown Method = iota
	// MethodTable: found with its binary's unwind table (.eh_frame).
	MethodTable
	// MethodFP: found with frame pointers in a walk with unwind tables
	// (JIT code, a binary without CFI, a process whose tables are not in
	// yet).
	MethodFP
)

// UnknownName is the conventional name of a frame that could not be
// resolved: "[module+0xoffset]".
func UnknownName(module string, offset uint64) string {
	return fmt.Sprintf("[%s+0x%x]", module, offset)
}

// PeriodOf is the sampling period, in nanoseconds of CPU time, of a
// sampler taking hz samples a second per CPU: the one conversion from a
// frequency to a period. hz must be positive.
func PeriodOf(hz int64) int64 { return int64(time.Second) / hz }

// FrequencyOf is the sampling frequency, in Hz per CPU, of a period of
// periodNs nanoseconds of CPU time: the one conversion back. periodNs
// must be positive.
func FrequencyOf(periodNs int64) float64 { return float64(time.Second) / float64(periodNs) }

// Sample is one stack sample taken on one CPU.
type Sample struct {
	// Time is the wall-clock time of the sample in Unix nanoseconds.
	Time int64
	// CPU is the CPU the sample was taken on.
	CPU uint32
	// PID is the process id (the kernel's tgid).
	PID uint32
	// TID is the thread id (the kernel's pid).
	TID uint32
	// Comm is the thread's command name (at most 15 bytes from the kernel).
	Comm string
	// CgroupID is the id of the thread's cgroup (v2), 0 when unknown.
	CgroupID uint64
	// Container is what the cgroup's path says about the container the
	// thread ran in; nil when unknown. Samples of one cgroup share it:
	// treat it as read-only.
	Container *Container
	// Stack holds the frames, leaf first: kernel frames before user frames.
	Stack []Frame
	// Node is the machine the sample was taken on, as queries give it
	// (from the block it was read from); "" when not known.
	Node string
	// PeriodNs is what the sample weighs: the sampling period it was
	// taken at, in nanoseconds of CPU time (PeriodOf its frequency). The
	// recorder stamps it; every consumer of a recording (the store,
	// saturation, the pprof and folded outputs, the metrics) reads it
	// from here. 0 when not known (samples read from files or the store,
	// whose period is kept per batch or block).
	PeriodNs int64
	// Unwind says how each user frame was found, when the sampler walked
	// user stacks with unwind tables (record --unwind dwarf or auto);
	// the zero value when not known. The recorder marks each user
	// frame's Method from it (Unwind.Mark); the store and the pprof
	// labels read the frames, so a sample read back from the store has
	// the zero value here and the methods in its frames.
	Unwind Unwind
}

// Unwind says how each user frame of a sample was found: with its
// binary's unwind table (.eh_frame) or with frame pointers, which a
// binary built without them gets wrong.
type Unwind struct {
	// UserFrames is the number of user frames, the last ones of Stack;
	// 0 when not known.
	UserFrames int
	// Table has bit i-1 set when user frame i (0 is the sampled pc,
	// which needs no unwinding) was found with an unwind table, clear
	// when with frame pointers.
	Table [2]uint64
}

// WithTable reports whether user frame i (1 ≤ i < UserFrames) was found
// with an unwind table.
func (u *Unwind) WithTable(i int) bool {
	if i < 1 || i > 128 || i >= u.UserFrames {
		return false
	}
	return u.Table[(i-1)/64]&(1<<((i-1)%64)) != 0
}

// Mark returns stack (whose last UserFrames frames are the user frames)
// with each user frame above the sampled pc marked MethodTable or
// MethodFP, as u says: a copy, since a symbolized stack is shared between
// samples. It returns stack itself when u says nothing (fewer than two
// user frames).
func (u *Unwind) Mark(stack []Frame) []Frame {
	n := min(u.UserFrames, len(stack))
	if n < 2 {
		return stack
	}
	out := make([]Frame, len(stack))
	copy(out, stack)
	user := out[len(out)-n:]
	for i := 1; i < n; i++ {
		user[i].Method = MethodFP
		if u.WithTable(i) {
			user[i].Method = MethodTable
		}
	}
	return out
}

// Container is what is known of the cgroup a sample ran in: its path and,
// when it is a container's, the container's identity. Fields not known are
// empty.
type Container struct {
	// Cgroup is the cgroup's path below the cgroup v2 mount ("/kubepods.slice/...").
	Cgroup string
	// ID is the container id (64 hex digits).
	ID string
	// Runtime is "containerd", "cri-o", "docker" or "podman".
	Runtime string
	// PodUID is the Kubernetes pod's UID.
	PodUID string
	// QoS is the pod's QoS class: "guaranteed", "burstable" or "besteffort".
	QoS string
	// Namespace, Pod and Name are the pod's namespace and name and the
	// container's name in the pod spec.
	Namespace, Pod, Name string
}
