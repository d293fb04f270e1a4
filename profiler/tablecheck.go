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
