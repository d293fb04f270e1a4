// Package unwind compiles a binary's call frame information (CFI: the
// .eh_frame section, and .debug_frame where present) into compact unwind
// tables the BPF sampler walks user stacks with, so that code built without
// frame pointers still gives whole stacks.
//
// A Table is a sorted list of Rows, one per address range of the binary's
// code (ELF virtual addresses, before the load bias): from a row's PC to
// the next row's, the canonical frame address (CFA) is rsp or rbp plus an
// offset, the return address is at CFA−8 (x86-64), and the caller's rbp is
// unchanged or saved at CFA plus an offset. Rules the BPF walk cannot
// follow (DWARF expressions, CFAs in other registers) are kept as
// unsupported rows, so the walk stops there rather than guessing; two
// expression forms are recognised and given kinds of their own: the
// CFA of PLT stubs, and signal trampolines ('S' augmentation, glibc's
// __restore_rt), whose caller's registers are in the ucontext on the stack.
//
// The CIEs and FDEs are parsed with github.com/go-delve/delve's
// pkg/dwarf/frame (pointer encodings, augmentations, both sections); the
// CFA programs are run here, because delve evaluates one address at a time
// and does not say where its rows change (see docs/design.md).
//
// Tables are per binary, keyed by build id, and saved to a Cache directory
// between runs, like the kernel symbols.
package unwind
