package profiler

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
)

// Unwind selects how user stacks are walked.
type Unwind int

// Unwinding methods.
const (
	// UnwindFP walks frame pointers (bpf_get_stack): code built without
	// them gives short stacks.
	UnwindFP Unwind = iota
	// UnwindDWARF walks each binary's unwind table (unwind/), built from
	// its .eh_frame, and frame pointers where a binary has none (JIT code)
	// and for a process's first samples, until its tables are loaded.
	// It needs Linux 5.17 (bpf_loop, bpf_task_pt_regs) and kernel BTF.
	UnwindDWARF
	// UnwindAuto is UnwindDWARF where the kernel can run it, UnwindFP
	// elsewhere (with a log line saying why).
	UnwindAuto
)

// ParseUnwind parses "fp", "dwarf" or "auto".
func ParseUnwind(s string) (Unwind, error) {
	switch s {
	case "fp":
		return UnwindFP, nil
	case "dwarf":
		return UnwindDWARF, nil
	case "auto":
		return UnwindAuto, nil
	}
	return 0, fmt.Errorf("unwind %q: want fp, dwarf or auto", s)
}

func (u Unwind) String() string {
	switch u {
	case UnwindDWARF:
		return "dwarf"
	case UnwindAuto:
		return "auto"
	}
	return "fp"
}

// dwarfSupported reports whether the kernel has what the table walk
// needs: bpf_loop and bpf_task_pt_regs for perf_event programs.
func dwarfSupported() error {
	for _, fn := range []asm.BuiltinFunc{asm.FnLoop, asm.FnTaskPtRegs, asm.FnGetCurrentTaskBtf} {
		if err := features.HaveProgramHelper(ebpf.PerfEvent, fn); err != nil {
			return fmt.Errorf("the kernel lacks BPF helper %v for DWARF unwinding (needs Linux 5.17): %w", fn, err)
		}
	}
	return nil
}
