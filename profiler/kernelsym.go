package profiler

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"

	"github.com/heatscope/heatscope/symbolize"
)

// ListPrograms returns the main function of every BPF program loaded on
// the machine that the kernel gives a JIT image, tag and name for, as
// kallsyms names it (symbolize.Kernel.ListPrograms): a few system calls a
// program, where reading kallsyms costs 30-50 ms of CPU. Listing needs
// CAP_SYS_ADMIN.
func ListPrograms() ([]symbolize.ProgramSymbol, error) {
	var out []symbolize.ProgramSymbol
	for id := ebpf.ProgramID(0); ; {
		next, err := ebpf.ProgramGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("list BPF programs: %w", err)
		}
		id = next
		prog, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue // unloaded since
		}
		sym, err := programSymbol(prog)
		prog.Close()
		if err == nil {
			out = append(out, sym)
		}
	}
}

// programSymbol returns prog's main function as kallsyms names it, from
// the kernel's account of the program (BPF_OBJ_GET_INFO_BY_FD): the
// address and length of its JIT image, its tag and its name. Its other
// functions, if any, are left to kallsyms (each has a tag of its own that
// the account does not give).
func programSymbol(prog *ebpf.Program) (symbolize.ProgramSymbol, error) {
	info, err := prog.Info()
	if err != nil {
		return symbolize.ProgramSymbol{}, fmt.Errorf("BPF program info: %w", err)
	}
	addrs, okAddrs := info.JitedKsymAddrs()
	lens, okLens := info.JitedFuncLens()
	if !okAddrs || !okLens || len(addrs) == 0 || len(lens) == 0 || addrs[0] == 0 || lens[0] == 0 || info.Tag == "" {
		// Not JIT-compiled, or addresses hidden (kptr_restrict,
		// no CAP_SYSLOG).
		return symbolize.ProgramSymbol{}, errors.New("the kernel gives no JIT image address, length or tag for the program")
	}
	name := "bpf_prog_" + info.Tag
	if info.Name != "" {
		name += "_" + info.Name
	}
	return symbolize.ProgramSymbol{Addr: uint64(addrs[0]), Size: lens[0], Name: name}, nil
}
