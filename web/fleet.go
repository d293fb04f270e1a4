package web

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/heatscope/heatscope/overview"
	"github.com/heatscope/heatscope/query"
	"github.com/heatscope/heatscope/store"
)

// The fleet overview's columns.
const (
	fleetPath           = "/api/fleet/overview"
	defaultFleetColumns = 300
	maxFleetColumns     = overview.MaxColumns
	minFleetStep        = int64(time.Second)
	// maxFleetRange is the longest range an overview covers: ten years,
	// far past any retention, and short enough that aligning it to its
	// step cannot overflow a time in nanoseconds.
	maxFleetRange = 3650 * 24 * int64(time.Hour)
)

// fleetOverview answers GET /api/fleet/overview: per node and time step,
// the busy share of the node's busiest CPU and its total CPU time, with
// the node's events; see docs/api.md.
func (s *Server) fleetOverview(ctx context.Context, p *params, rep *reply) (store.Warnings, error) {
	compact, err := compactEncoding(p)
	if err != nil {
		return nil, err
	}
	answer := func(ov *overview.Overview) error {
		if compact {
			return rep.binary(compactOverview(ov, rep.limit))
		}
		return rep.json(ov)
	}
	if p.get("step") != "" && p.get("columns") != "" {
		return nil, paramErr("columns", "give step or columns, not both")
	}
	cols, err := p.int("columns", defaultFleetColumns, 1, maxFleetColumns)
	if err != nil {
		return nil, err
	}
	sources, nodes := s.db.Sources(), s.db.Nodes()
	f, err := p.filter(sources, nodes)
	if err != nil {
		return nil, err
	}
	sampleFilter := query.DescribeFilter(p.get) != ""
	noWhole := noData(s.db, &f)
	r, err := p.timeRange("from", "to", span(s.db, &f), noWhole, true)
	var pe *query.ParamError
	if err != nil && noWhole != nil && p.get("from") == "" && errors.As(err, &pe) {
		// Nothing to default the range to: no node, or none the node
		// filter keeps. Say so, as an empty overview.
		ov := &overview.Overview{BusiestUnit: overview.UnitBusiest, TotalUnit: overview.UnitTotal, Nodes: []overview.Node{}}
		ov.Message = overview.NoNodeMessage(len(nodes))
		return nil, answer(ov)
	}
	if err != nil {
		return nil, err
	}
	if width(r) > maxFleetRange {
		return nil, paramErr("from", "the range is %d days, the fleet overview covers at most %d", width(r)/int64(24*time.Hour), maxFleetRange/int64(24*time.Hour))
	}
	step, given, err := p.step()
	if err != nil {
		return nil, err
	}
	if !given {
		step = overview.Step(r, cols)
	} else if step < minFleetStep {
		return nil, paramErr("step", "%v is shorter than the fleet overview's shortest step, %v", time.Duration(step), time.Duration(minFleetStep))
	}
	r = alignRange(r, step)
	if n := steps(r, step); n > maxFleetColumns {
		return nil, paramErr("step", "%v over this range is %d columns, at most %d", time.Duration(step), n, maxFleetColumns)
	}
	ov, warnings, err := overview.Build(ctx, s.db, s.opts.Overview, overview.Request{Range: r, Step: step, Filter: &f, SampleFilter: sampleFilter})
	if err != nil {
		return warnings, err
	}
	return warnings, answer(ov)
}

// The compact encoding of the fleet overview (encoding=compact), which the
// UI reads: 500 nodes of 362 columns are 4 MB of JSON, some 720 000
// numbers whose parse alone costs the browser more than all its drawing.
// The compact form keeps the JSON answer for everything but the nodes'
// four per-column arrays, which follow it as flat columns the browser
// maps onto typed arrays without parsing them. The layout, all little-endian:
//
//	bytes 0-3    magic: "HSO1"
//	bytes 4-7    uint32 N, the number of nodes
//	bytes 8-11   uint32 C, the number of columns
//	bytes 12-15  uint32 J, the length of the JSON header
//	bytes 16-    the JSON header: the JSON answer without each node's
//	             busiest, busiestCpu, cpu and samples; then zero bytes up
//	             to a multiple of 8
//	then four columns of N × C values, node i's C values at [i·C, (i+1)·C)
//	in the header's node order:
//	  float32 busiest     (the JSON's figure to float32's precision)
//	  float32 cpu         (seconds, likewise)
//	  int32   busiestCpu  (-1: no sample in the step)
//	  uint32  samples     (at most 2^32 - 1)
const compactOverviewMagic = "HSO1"

// compactOverview encodes ov in the compact layout, or fails with
// errTooLarge when that would pass limit.
func compactOverview(ov *overview.Overview, limit int) ([]byte, error) {
	// The header: the answer with the arrays left out (nil and
	// omitempty).
	h := *ov
	h.Nodes = make([]overview.Node, len(ov.Nodes))
	for i, n := range ov.Nodes {
		if len(n.Busiest) != ov.Columns || len(n.CPU) != ov.Columns || len(n.BusiestCPU) != ov.Columns || len(n.Samples) != ov.Columns {
			return nil, fmt.Errorf("compact overview: node %s has %d columns, not %d", n.Name, len(n.Busiest), ov.Columns)
		}
		n.Busiest, n.BusiestCPU, n.CPU, n.Samples = nil, nil, nil, nil
		h.Nodes[i] = n
	}
	head, err := json.Marshal(&h)
	if err != nil {
		return nil, fmt.Errorf("encode response: %w", err)
	}
	cells := len(ov.Nodes) * ov.Columns
	off := (compactHeaderLen + len(head) + 7) &^ 7
	if off+16*cells > limit {
		return nil, errTooLarge
	}
	out := make([]byte, off+16*cells)
	copy(out, compactOverviewMagic)
	le := binary.LittleEndian
	le.PutUint32(out[4:], uint32(len(ov.Nodes)))
	le.PutUint32(out[8:], uint32(ov.Columns))
	le.PutUint32(out[12:], uint32(len(head)))
	copy(out[compactHeaderLen:], head)
	busiest, cpu, busiestCPU, samples := out[off:], out[off+4*cells:], out[off+8*cells:], out[off+12*cells:]
	for i, n := range ov.Nodes {
		for k := range ov.Columns {
			j := 4 * (i*ov.Columns + k)
			le.PutUint32(busiest[j:], math.Float32bits(float32(n.Busiest[k])))
			le.PutUint32(cpu[j:], math.Float32bits(float32(n.CPU[k])))
			le.PutUint32(busiestCPU[j:], uint32(n.BusiestCPU[k]))
			le.PutUint32(samples[j:], uint32(min(max(n.Samples[k], 0), math.MaxUint32)))
		}
	}
	return out, nil
}
