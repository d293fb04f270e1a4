// Package symbolize turns the raw instruction addresses of stack samples
// into frames: function, module, build id, normalised address and kind.
//
// # Kernel
//
// Kernel addresses are resolved with the text symbols of /proc/kallsyms
// (types t, T, w, W), kernel modules and BPF programs included, kept in one
// sorted table and found by binary search (see Kernel). kallsyms has no
// sizes, so an address belongs to the closest symbol below it. The
// "__pfx_" and "__cfi_" symbols that mark the padding in front of every
// function (half the symbols of a kernel built with call padding) are left
// out. The file, some 100,000 lines, is parsed without an allocation per
// line.
//
// # User space
//
// A process's address space is read from /proc/PID/maps the moment its pid
// is first seen (Symbolizer.Observe), not when its frames are first
// symbolized. A process gone by then is given by the mappings the sampler
// snapshotted as it exited (Symbolizer.SetMaps; see snapshot.go), whose
// files are named by device, inode and change time and found among the
// files earlier /proc reads named. Only the executable
// mappings' identity is kept then: path, device, inode and offset. Since
// Linux 6.11 the kernel is asked for the executable mappings alone
// (PROCMAP_QUERY, procmap.go), which costs a third to a quarter of the
// whole file's text, most of whose lines are not executable
// (BenchmarkNewProcess: 55-133 to 32-43 µs per new process, load 8); on
// older kernels the file is read into a pooled buffer and only its
// executable lines are parsed, without an allocation per line. Paths are
// interned, one copy for all the
// processes that map a file (BenchmarkNewProcess: 1,556 to 660 bytes
// cached per process, 15 KB to 2.5 KB allocated and 65 to 46 µs per new
// process). A
// binary's symbol table is loaded the first time a frame falls in its
// mapping, which for the first sample of a process is right after Observe,
// and libraries no frame lands in are never read. The file is opened
// through /proc/PID/root/<path>, so that container files are found, then
// by the plain path if it is the same device and inode (how the files of a
// process that has exited since are found), then through
// /proc/PID/map_files/<start>-<end>, the only way to a deleted file.
//
// An address is translated from the mapping to a file offset, then through
// the ELF PT_LOAD segments to the ELF virtual address, the one addr2line and
// nm use, which is the frame's Address. Names come from the function and
// IFUNC symbols of .symtab or, when there is none, of .dynsym, as perf
// reads them, and, for Go binaries, from .gopclntab, which stripped Go
// binaries keep and which names Go functions as the Go runtime does (no
// ".abi0" suffix); a symbol without a size reaches the next one. C++ and
// Rust names are demangled without parameter lists ("ns::Class::method",
// "ns::twice<int>", "crate::module::function"), the first time a symbol is
// hit.
//
// # Aliases
//
// Of several symbols at one address, the one perf report shows is kept, so
// that both tools name functions alike (choose_best_symbol in perf's
// tools/perf/util/symbol.c): a symbol with a size over one without, then
// non-weak over weak, then global over local, then fewer leading
// underscores, then the longer name, then the one listed first. perf gives
// a symbol without a size the distance to the next symbol, so that the
// last of unsized aliases counts as sized. glibc's write, exported as the
// weak __write and write, is "write"; free, exported as __libc_free, cfree
// and free, is "cfree". In kallsyms, where no symbol has a size, that
// makes the last alias listed win: __x86_indirect_thunk_rax rather than
// __pi___x86_indirect_thunk_rax, __x64_sys_getpid rather than
// __ia32_sys_getpid.
//
// A frame that cannot be named is kept as "[module+0xoffset]":
//   - in a binary that was read: the base name and the ELF virtual address;
//   - in a file that could not be read: the base name and the file offset
//     (also the frame's Address);
//   - in [vdso] and other kernel-provided mappings: the offset in the
//     mapping ("[vdso+0x...]", also the Address), kind user;
//   - in anonymous memory that no perf map names: "[anon+0xADDR]", module
//     "[anon]", kind unknown;
//   - outside every mapping, once the maps have been re-read (at most once
//     a second per process, to catch dlopen and exec): "[unknown+0xADDR]",
//     module "[unknown]", kind unknown;
//   - in the kernel: "[kernel.kallsyms+0xADDR]" with the absolute address.
//
// JIT-compiled code lives in anonymous memory; it is named by the runtime's
// perf map, /tmp/perf-PID.map, read when first needed and re-read when an
// address misses and the file has grown. Its frames have kind JIT and
// module "[jit]".
//
// The build id is the GNU build id (.note.gnu.build-id) in hex. A binary
// without one but with a Go build id note (linked with -B none, or by older
// Go toolchains) reports the Go build id as written ("actionID/contentID").
//
// # Caches
//
// Binaries are cached by build id, or by device, inode, size and
// modification time when they have none, so that thousands of processes
// running one binary cost one load, and a binary seen through two
// containers' paths is loaded once. A stripped and an unstripped copy share
// their build id: whichever is read first serves both. Symbol tables are
// compact: one sorted slice of 16-byte entries (address, size, end of the
// name) and one string holding every name. Loading one reads the symbol
// and string tables, and of a .gopclntab only the function names and
// records, not its line tables. The binary cache is bounded by count and by
// the bytes of its symbol tables (Options.MaxBinaryBytes), the process cache
// by count; ForgetExited drops the processes that have exited, which under
// churn are most of them. A file already read is recognised without
// opening it: a stat(2) of its path gives device, inode, size, modification
// and change times, remembered with the binary's key, so that the first
// sample of each new process of a known binary costs one stat per mapping
// it lands in rather than an open and a read of the ELF headers and build
// id (BenchmarkNewProcess: 111 to 65 µs and 451 to 66 allocations per new
// process). The binary cache and the process cache are
// LRU-bounded (Options). A cached process keeps the binaries it loaded
// alive even when the binary cache has evicted them, since it may have
// exited and cannot be read again. Symbolized stacks are kept in a
// direct-mapped cache of 1024 (stackcache.go), and named user frames one
// by one in one of 4096 (framecache.go), for the new stacks a CPU-bound
// program's moving leaf makes of frames seen before; both are keyed by
// the version of the process's mappings, so new mappings never meet an
// old answer.
//
// # Return addresses
//
// Every frame but the first of each stack (kernel and user) is a return
// address: it points after a call instruction, and when the call is the
// last instruction of a function (a call to a noreturn function), that is
// the first byte of the next function. Those frames are looked up at
// address-1 and reported with their own address.
//
// # Limits
//
// User stacks are walked by frame pointers in the kernel (bpf_get_stack):
// code built without them (Debian's libc, many distribution binaries) gives
// short or wrong user stacks, whatever the symbolizer does. Unwinding with
// .eh_frame is later work, as are separate debug files
// (/usr/lib/debug/.build-id) and MiniDebugInfo (.gnu_debugdata): where
// perf finds a debug file it shows its local symbols (glibc's write is then
// "__GI___libc_write"), which heatscope does not read.
// A binary first needed after its process exited is found only by its
// plain path: not when it lived in a container's mount namespace, had been
// deleted, or sits on a file system whose stat(2) device differs from the
// one in /proc/PID/maps (btrfs subvolumes). Such frames stay
// "[file+0xoffset]".
// A process that execs keeps its pid, and a pid is eventually reused: the
// old mappings are used until the pid is forgotten (Forget, or
// ForgetExited once the process is gone) or its addresses miss them. Perf maps are read from PerfMapDir
// on the host: a containerised JIT's map, written in its own /tmp under its
// own pid, is not found.
package symbolize
