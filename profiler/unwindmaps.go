package profiler

import (
	"fmt"
	"os"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/heatscope/heatscope/unwind"
)

// maxTables is MAX_TABLES in bpf/profile.bpf.c.
const maxTables = 4096

// maxUmaps is MAX_UMAPS in bpf/profile.bpf.c.
const maxUmaps = 64

// maxWalkFrames is MAX_WALK_FRAMES in bpf/profile.bpf.c.
const maxWalkFrames = 128

// walkCacheSlots is WALK_CACHE_SLOTS in bpf/profile.bpf.c.
const walkCacheSlots = 256

// tableMapSpec returns the spec every unwind table map is made from: the
// unwind_tables template (outer.InnerMap) without its BTF. The kernel
// compares a table with the template when it is put in the map of maps,
// and Linux 6.1 compared fields BTF sets (a BTF-described value without a
// bpf_timer has timer_off -ENOENT, one without BTF -EINVAL): while the
// template carried the ELF's BTF and the tables did not, Debian 12's
// kernel refused every table with EINVAL. Made from one spec, the template
// and the tables agree on every kernel.
func tableMapSpec(outer *ebpf.MapSpec) *ebpf.MapSpec {
	table := outer.InnerMap.Copy()
	table.Key, table.Value = nil, nil
	outer.InnerMap = table
	return table.Copy()
}

// newTableMap makes an unwind table map of rows and their index from spec
// (tableMapSpec's).
func newTableMap(spec *ebpf.MapSpec, rows []unwind.Row, index unwind.Index) (*ebpf.Map, error) {
	s := spec.Copy()
	s.MaxEntries = uint32(len(rows) + unwind.IndexSlots(rows))
	m, err := ebpf.NewMap(s)
	if err != nil {
		return nil, fmt.Errorf("create a %d-row table map: %w", len(rows), err)
	}
	if err := fillRows(m, rows, index); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// rowStride is the distance between two rows in an array map's memory:
// the kernel rounds a value's size up to 8 bytes.
const rowStride = (unwind.RowSize + 7) &^ 7

// fillRows writes rows and then their index into a new BPF_F_MMAPABLE
// array map of as many entries through a shared mapping of its memory,
// unmapped on return: a copy, where a batch update of the map costs a
// system call's work per row (about 150 ms of system time for 10 MB of
// tables on the 2-CPU test machine).
func fillRows(m *ebpf.Map, rows []unwind.Row, index unwind.Index) error {
	slots := index.AppendBPF(nil)
	size := (len(rows) + len(slots)/unwind.RowSize) * rowStride
	page := os.Getpagesize()
	mem, err := unix.Mmap(m.FD(), 0, (size+page-1)/page*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("map the memory of a %d-row table map: %w", len(rows), err)
	}
	for i, r := range rows {
		off := i * rowStride
		r.AppendBPF(mem[off : off : off+unwind.RowSize])
	}
	for j := 0; j < len(slots); j += unwind.RowSize {
		off := (len(rows) + j/unwind.RowSize) * rowStride
		copy(mem[off:off+unwind.RowSize], slots[j:j+unwind.RowSize])
	}
	if err := unix.Munmap(mem); err != nil {
		return fmt.Errorf("unmap the memory of a %d-row table map: %w", len(rows), err)
	}
	return nil
}
