package profiler

import (
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/heatscope/heatscope/unwind"
)

// Fallback says why user stacks are walked with frame pointers although
// --unwind auto asked for unwind tables: which check found that the table
// walk cannot work on this kernel, and its finding.
type Fallback struct {
	// Check is one of the Check* constants: a metric label.
	Check string
	// Reason is what the check found, with the kernel's error.
	Reason string
}

// The checks that can turn the table walk off.
const (
	// CheckHelpers: the kernel lacks a BPF helper the walk calls
	// (bpf_loop, bpf_task_pt_regs, bpf_get_current_task_btf), probed with
	// cilium/ebpf's features package.
	CheckHelpers = "helpers"
	// CheckTableMaps: the kernel refuses an unwind table, made as the
	// unwinder makes them, in the unwind_tables map of maps.
	CheckTableMaps = "table-maps"
	// CheckProgram: the kernel refuses the table-walking program itself
	// (the verifier, or a CO-RE relocation this kernel cannot satisfy).
	CheckProgram = "program"
	// CheckWalkResults: while recording, the walk found not one frame
	// with the tables of the processes sampled (unwinder.checkWalk).
	CheckWalkResults = "walk-results"
)

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

// checkTableMaps makes a one-row unwind table as the unwinder makes them
// and puts it into a one-entry copy of unwind_tables (outer): the step
// Debian 12's 6.1 refused for every table while the walk, finding no
// table, went on by frame pointers, and nothing said so.
func checkTableMaps(outer, table *ebpf.MapSpec) error {
	o := outer.Copy()
	o.MaxEntries = 1
	tables, err := ebpf.NewMap(o)
	if err != nil {
		return fmt.Errorf("create the unwind_tables map of maps: %w", err)
	}
	defer tables.Close()
	rows := []unwind.Row{{PC: 0x1000, CFA: unwind.CFARSP, CFAOffset: 8}}
	inner, err := newTableMap(table, rows, unwind.BuildIndex(rows))
	if err != nil {
		return err
	}
	defer inner.Close()
	if err := tables.Put(uint32(0), inner); err != nil {
		return fmt.Errorf("the kernel refuses an unwind table in the unwind_tables map of maps: %w", err)
	}
	return nil
}
