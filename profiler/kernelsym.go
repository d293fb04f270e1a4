package profiler

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// KernelSymbol is the function of one of the profiler's own BPF programs
// in kernel text: where its JIT image lies and the name kallsyms gives it.
type KernelSymbol struct {
	Addr uint64
	Size uint32
	// Name is "bpf_prog_<tag>_<name>", as in /proc/kallsyms (module
	// "[bpf]").
	Name string
}

// programSymbol returns prog's main function as kallsyms names it, from
// the kernel's account of the program (BPF_OBJ_GET_INFO_BY_FD): the
// address and length of its JIT image, its tag and its name. Its other
// functions, if any, are left to kallsyms (each has a tag of its own that
// the account does not give).
func programSymbol(prog *ebpf.Program) (KernelSymbol, error) {
	info, err := prog.Info()
	if err != nil {
		return KernelSymbol{}, fmt.Errorf("BPF program info: %w", err)
	}
	addrs, okAddrs := info.JitedKsymAddrs()
	lens, okLens := info.JitedFuncLens()
	if !okAddrs || !okLens || len(addrs) == 0 || len(lens) == 0 || addrs[0] == 0 || lens[0] == 0 || info.Tag == "" || info.Name == "" {
		// Not JIT-compiled, or addresses hidden (kptr_restrict,
		// no CAP_SYSLOG).
		return KernelSymbol{}, errors.New("the kernel gives no JIT image address, length, tag or name for the program")
	}
	return KernelSymbol{Addr: uint64(addrs[0]), Size: lens[0], Name: "bpf_prog_" + info.Tag + "_" + info.Name}, nil
}
