package symbolize

import (
	"bufio"
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/heatscope/heatscope/sample"
)

// KernelCache names the files that key a kallsyms cache. The zero value
// is not useful: use DefaultKernelCache.
//
// Why a cache: reading /proc/kallsyms costs some 30-50 ms of CPU, 80% of it
// the kernel formatting 120,000 lines, which was most of the agent's
// start-up. The kernel image's symbols cannot change until the next boot,
// and a module's only when modules are loaded or unloaded, so a table
// saved under a key of the boot id, the module list and the first line of
// kallsyms (which also shows whether this process may see addresses at
// all) stays right for as long as its key matches.
//
// BPF programs, ftrace trampolines and kprobe slots come and go without
// changing that key. A table loaded from the cache therefore resolves only
// addresses inside the kernel image and the loaded modules; any other
// address is looked up in the BPF programs the kernel lists
// (Kernel.ListPrograms), then loads the whole of kallsyms, once (and again
// at most every dynamicReloadInterval while such addresses stay
// unresolved).
type KernelCache struct {
	// Dir holds the cache files ("" for no cache).
	Dir string
	// Kallsyms, BootID and Modules are /proc/kallsyms,
	// /proc/sys/kernel/random/boot_id and /proc/modules.
	Kallsyms, BootID, Modules string
}

// DefaultKernelCache returns the running kernel's files with a cache in
// dir.
func DefaultKernelCache(dir string) KernelCache {
	return KernelCache{Dir: dir, Kallsyms: "/proc/kallsyms", BootID: "/proc/sys/kernel/random/boot_id", Modules: "/proc/modules"}
}

// dynamicReloadInterval is how often a table loaded from the cache may
// re-read kallsyms for addresses outside the kernel image and modules.
const dynamicReloadInterval = 10 * time.Second

// relistInterval is how often at most a table loaded from the cache
// lists the BPF programs loaded (Kernel.ListPrograms) for an address in
// none of those it listed: a program loaded since, sampled. A list costs
// about 0.1 ms a program; each address is listed for once (unlisted).
const relistInterval = 100 * time.Millisecond

// maxUnlisted bounds the addresses remembered as held by no program.
const maxUnlisted = 4096

// kernelCacheMagic starts every cache file.
const kernelCacheMagic = "heatscope kallsyms cache 1\n"

// Load returns the kernel symbols, from the cache when its key matches,
// otherwise from kallsyms, and then saves them to the cache. It reports
// whether the cache was used. A cache that cannot be read or written is
// no error: the symbols then come from kallsyms.
func (c KernelCache) Load() (k *Kernel, hit bool, err error) {
	if c.Dir == "" {
		k, err = LoadKernel(c.Kallsyms)
		return k, false, err
	}
	key, ranges, keyErr := c.key()
	if keyErr == nil {
		if k, err := readKernelCache(c.file(), key); err == nil {
			k.static = k.staticRanges(ranges)
			k.dynamic = &dynamicKernel{path: c.Kallsyms}
			return k, true, nil
		}
	}
	k, err = LoadKernel(c.Kallsyms)
	if err != nil {
		return nil, false, err
	}
	if keyErr == nil {
		_ = writeKernelCache(c.file(), key, k) // best effort: the next start reads kallsyms again
	}
	return k, false, nil
}

func (c KernelCache) file() string { return filepath.Join(c.Dir, "kallsyms.cache") }

// key hashes what decides whether a cached table is still right, and
// returns the address ranges the cached table is valid for: the kernel
// image's text (filled in from the table itself, see Kernel.inStatic) and
// each module's.
func (c KernelCache) key() ([32]byte, []addrRange, error) {
	h := sha256.New()
	boot, err := os.ReadFile(c.BootID)
	if err != nil {
		return [32]byte{}, nil, fmt.Errorf("read boot id: %w", err)
	}
	h.Write(boot)
	first, err := firstLine(c.Kallsyms)
	if err != nil {
		return [32]byte{}, nil, err
	}
	h.Write(first)
	var ranges []addrRange
	modules, err := os.ReadFile(c.Modules)
	switch {
	case errors.Is(err, os.ErrNotExist): // a kernel without modules
	case err != nil:
		return [32]byte{}, nil, fmt.Errorf("read module list: %w", err)
	default:
		// "name size refcount deps state address": the refcount and
		// dependencies change while a module stays where it is.
		for line := range bytes.Lines(modules) {
			f := bytes.Fields(line)
			if len(f) < 6 {
				continue
			}
			size, okSize := parseDecimal(f[1])
			addr, okAddr := parseHexBytes(bytes.TrimPrefix(f[5], []byte("0x")))
			if !okSize || !okAddr {
				return [32]byte{}, nil, fmt.Errorf("module list line %q: want \"name size refcount deps state address\"", line)
			}
			fmt.Fprintf(h, "%s %d %x\n", f[0], size, addr)
			ranges = append(ranges, addrRange{addr, addr + size})
		}
	}
	var key [32]byte
	h.Sum(key[:0])
	return key, ranges, nil
}

// firstLine returns the first line of a file, reading one small block:
// the kernel formats kallsyms as it is read, so this costs little.
func firstLine(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	line, err := bufio.NewReaderSize(f, 512).ReadSlice('\n')
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return bytes.Clone(line), nil
}

func parseDecimal(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	return v, true
}

// addrRange is the half-open address range [start, end).
type addrRange struct{ start, end uint64 }

// dynamicKernel is the whole of kallsyms, read the first time a table
// loaded from the cache meets an address outside the kernel image and the
// modules (a BPF program, an ftrace trampoline).
type dynamicKernel struct {
	path   string
	mu     sync.Mutex
	kernel *Kernel
	loaded time.Time
	// reads counts the reads of kallsyms.
	reads int
	// list lists the BPF programs loaded (Kernel.ListPrograms; nil:
	// none); listed is its last list, sorted, taken at listedAt.
	list     func() ([]ProgramSymbol, error)
	listed   []programSymbol
	listedAt time.Time
	// unlisted holds the addresses a list taken after they were seen
	// did not hold, which are not listed again for (at most
	// maxUnlisted).
	unlisted map[uint64]struct{}
}

// resolve resolves addr as a BPF program's (list), or else from the whole
// of kallsyms, reading it if it was not read yet, or if it leaves addr
// unresolved and was read more than dynamicReloadInterval ago.
func (d *dynamicKernel) resolve(addr, lookup uint64) (sample.Frame, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.list != nil {
		if f, ok := programAt(d.listed, addr, lookup); ok {
			return f, true
		}
		// A program loaded since the last list, or an address no
		// program holds (an ftrace trampoline, a kprobe slot): listed
		// again once per such address, kallsyms for the rest.
		if _, seen := d.unlisted[lookup]; !seen && (d.listedAt.IsZero() || time.Since(d.listedAt) >= relistInterval) {
			d.listedAt = time.Now()
			d.listPrograms()
			if f, ok := programAt(d.listed, addr, lookup); ok {
				return f, true
			}
			if d.unlisted == nil || len(d.unlisted) >= maxUnlisted {
				d.unlisted = map[uint64]struct{}{}
			}
			d.unlisted[lookup] = struct{}{}
		}
	}
	if d.kernel != nil {
		f, ok := d.kernel.resolve(addr, lookup)
		if ok || time.Since(d.loaded) < dynamicReloadInterval {
			return f, ok
		}
	}
	if time.Since(d.loaded) >= dynamicReloadInterval {
		d.loaded = time.Now()
		d.reads++
		if k, err := LoadKernel(d.path); err == nil {
			d.kernel = k
		}
	}
	return d.kernel.resolve(addr, lookup) // a nil *Kernel resolves nothing
}

// listPrograms replaces the programs listed with those loaded now (kept
// when they cannot be listed).
func (d *dynamicKernel) listPrograms() {
	progs, err := d.list()
	if err != nil {
		return
	}
	listed := make([]programSymbol, 0, len(progs))
	for _, p := range progs {
		if p.Size > 0 && p.Name != "" {
			listed = append(listed, programSymbol{addr: p.Addr, size: p.Size, name: p.Name})
		}
	}
	slices.SortFunc(listed, func(a, b programSymbol) int { return cmp.Compare(a.addr, b.addr) })
	d.listed = listed
}

// Cache file layout, little-endian: the magic, the 32-byte key, the
// counts (symbols, name bytes, module runs), each symbol (address, size,
// name end), the names, each module run (first symbol, name length,
// name), and a CRC-32 (Castagnoli) of everything before it.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// writeKernelCache writes k's table to path, readable by its owner only
// (it holds kernel addresses), through a temporary file and a rename.
func writeKernelCache(path string, key [32]byte, k *Kernel) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create kallsyms cache directory: %w", err)
	}
	var b bytes.Buffer
	b.Grow(len(kernelCacheMagic) + 64 + 16*len(k.tab.syms) + len(k.tab.names))
	b.WriteString(kernelCacheMagic)
	b.Write(key[:])
	le := binary.LittleEndian
	buf := b.AvailableBuffer()
	buf = le.AppendUint32(buf, uint32(len(k.tab.syms)))
	buf = le.AppendUint32(buf, uint32(len(k.tab.names)))
	buf = le.AppendUint32(buf, uint32(len(k.modules)))
	for _, s := range k.tab.syms {
		buf = le.AppendUint64(buf, s.addr)
		buf = le.AppendUint32(buf, s.size)
		buf = le.AppendUint32(buf, s.nameEnd)
	}
	buf = append(buf, k.tab.names...)
	for _, m := range k.modules {
		buf = le.AppendUint32(buf, uint32(m.first))
		buf = le.AppendUint32(buf, uint32(len(m.module)))
		buf = append(buf, m.module...)
	}
	b.Write(buf)
	b.Write(le.AppendUint32(nil, crc32.Checksum(b.Bytes(), castagnoli)))

	tmp, err := os.CreateTemp(filepath.Dir(path), ".kallsyms-*")
	if err != nil {
		return fmt.Errorf("write kallsyms cache: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err = tmp.Write(b.Bytes()); err == nil {
		err = tmp.Close()
	} else {
		tmp.Close()
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("write kallsyms cache %s: %w", path, err)
	}
	return nil
}

// errCacheMismatch is returned for a cache file written under another key.
var errCacheMismatch = errors.New("kallsyms cache is for another boot or module list")

// readKernelCache reads a table written by writeKernelCache under key. It
// trusts only a regular file owned by this process's user and not
// writable by others, since its addresses end up in every profile.
// maxKernelCacheBytes bounds the cache file read: some 20 times the
// largest kallsyms seen.
const maxKernelCacheBytes = 64 << 20

func readKernelCache(path string, key [32]byte) (*Kernel, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat kallsyms cache %s: %w", path, err)
	}
	if err := checkCacheOwner(path, st); err != nil {
		return nil, err
	}
	if st.Size() > maxKernelCacheBytes {
		return nil, fmt.Errorf("kallsyms cache %s: %d bytes, more than any kernel's symbols", path, st.Size())
	}
	// Read at its size in one allocation: io.ReadAll's doubling copied
	// the 2-3 MB file about twice over, a fifth of the agent's start-up.
	data := make([]byte, st.Size())
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, fmt.Errorf("read kallsyms cache %s: %w", path, err)
	}
	return decodeKernelCache(data, key)
}

// decodeKernelCache decodes and checks a cache file's contents.
func decodeKernelCache(data []byte, key [32]byte) (*Kernel, error) {
	bad := func(what string) error { return fmt.Errorf("kallsyms cache: %s", what) }
	le := binary.LittleEndian
	if len(data) < len(kernelCacheMagic)+32+12+4 || string(data[:len(kernelCacheMagic)]) != kernelCacheMagic {
		return nil, bad("not a cache file")
	}
	body, sum := data[:len(data)-4], le.Uint32(data[len(data)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, bad("checksum mismatch")
	}
	p := body[len(kernelCacheMagic):]
	if !bytes.Equal(p[:32], key[:]) {
		return nil, errCacheMismatch
	}
	p = p[32:]
	nsyms, nnames, nmods := uint64(le.Uint32(p)), uint64(le.Uint32(p[4:])), uint64(le.Uint32(p[8:]))
	p = p[12:]
	if nsyms == 0 || uint64(len(p)) < 16*nsyms+nnames {
		return nil, bad("truncated")
	}
	k := &Kernel{tab: symtab{syms: make([]symbol, nsyms)}}
	for i := range k.tab.syms {
		s := symbol{addr: le.Uint64(p), size: le.Uint32(p[8:]), nameEnd: le.Uint32(p[12:])}
		p = p[16:]
		if i > 0 && (s.addr <= k.tab.syms[i-1].addr || s.nameEnd < k.tab.syms[i-1].nameEnd) || uint64(s.nameEnd) > nnames {
			return nil, bad("symbols out of order")
		}
		k.tab.syms[i] = s
	}
	k.tab.names, p = string(p[:nnames]), p[nnames:]
	for range nmods {
		if len(p) < 8 {
			return nil, bad("truncated")
		}
		first, n := le.Uint32(p), uint64(le.Uint32(p[4:]))
		if uint64(len(p)-8) < n || uint64(first) >= nsyms || len(k.modules) > 0 && int(first) <= k.modules[len(k.modules)-1].first {
			return nil, bad("bad module run")
		}
		k.modules = append(k.modules, moduleRun{first: int(first), module: string(p[8 : 8+n])})
		p = p[8+n:]
	}
	if len(k.modules) == 0 || k.modules[0].first != 0 || len(p) != 0 {
		return nil, bad("bad module runs")
	}
	return k, nil
}

// inStatic reports whether a table loaded from the cache holds addr: it
// lies in the kernel image's text or in a loaded module.
func (k *Kernel) inStatic(addr uint64) bool {
	i := sort.Search(len(k.static), func(i int) bool { return k.static[i].end > addr })
	return i < len(k.static) && k.static[i].start <= addr
}

// staticRanges returns the ranges a cached table is right for, sorted: the
// kernel image's, from its first symbol to its last (_einittext), and the
// modules'.
func (k *Kernel) staticRanges(modules []addrRange) []addrRange {
	ranges := slices.Clone(modules)
	var image addrRange
	for j, r := range k.modules {
		if r.module != sample.KernelModule {
			continue
		}
		end := len(k.tab.syms)
		if j+1 < len(k.modules) {
			end = k.modules[j+1].first
		}
		if image.end == 0 {
			image.start = k.tab.syms[r.first].addr
		}
		image.end = k.tab.syms[end-1].addr + 1
	}
	if image.end != 0 {
		ranges = append(ranges, image)
	}
	slices.SortFunc(ranges, func(a, b addrRange) int { return cmp.Compare(a.start, b.start) })
	return ranges
}

// checkCacheOwner accepts a regular file owned by this process's user and
// writable by no one else.
func checkCacheOwner(path string, st os.FileInfo) error {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !st.Mode().IsRegular() || !ok || int(sys.Uid) != os.Geteuid() || st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("kallsyms cache %s: not a regular file of user %d writable only by it", path, os.Geteuid())
	}
	return nil
}
