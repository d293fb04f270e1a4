package web

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/heatscope/heatscope/overview"
	"github.com/heatscope/heatscope/query"
	"github.com/heatscope/heatscope/store"
)

// The fleet overview's columns.
const (
	fleetPath           = "/api/fleet/overview"
	defaultFleetColumns = 300
	maxFleetColumns     = 2000
	minFleetStep        = int64(time.Second)
)

// sampleFilterParams are the filter parameters that look at samples, not
// only at which nodes: with one of them, nodes none of whose samples pass
// are left out of the overview.
var sampleFilterParams = []string{"comm", "pid", "tid", "cpu", "cgroup", "container", "pod", "namespace", "qos", "frame", "stack"}

// fleetOverview answers GET /api/fleet/overview: per node and time step,
// the busy share of the node's busiest CPU and its total CPU time, with
// the node's events; see docs/api.md.
func (s *Server) fleetOverview(ctx context.Context, p *params, rep *reply) (store.Warnings, error) {
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
	sampleFilter := false
	for _, name := range sampleFilterParams {
		if v := p.get(name); v != "" && !(name == "stack" && v == "all") {
			sampleFilter = true
		}
	}
	whole, ok := span(sources, nodes, &f)
	r, err := p.timeRange("from", "to", whole, ok, true)
	var pe *query.ParamError
	if err != nil && !ok && p.get("from") == "" && errors.As(err, &pe) {
		// Nothing to default the range to: no node, or none the node
		// filter keeps. Say so, as an empty overview.
		ov := &overview.Overview{BusiestUnit: overview.UnitBusiest, TotalUnit: overview.UnitTotal, Nodes: []overview.Node{}}
		ov.Message = "No node has samples yet: nodes appear once they record (a fleet: once they upload a block)."
		if len(nodes) > 0 {
			ov.Message = fmt.Sprintf("None of the %d nodes matches the node filter.", len(nodes))
		}
		return nil, rep.json(ov)
	}
	if err != nil {
		return nil, err
	}
	step, given, err := p.step()
	if err != nil {
		return nil, err
	}
	if !given {
		// Whole 10 s multiples, so that the per-CPU summaries answer.
		raw := (width(r) + int64(cols) - 1) / int64(cols)
		step = max((raw+summaryStep-1)/summaryStep*summaryStep, summaryStep)
	} else if step < minFleetStep {
		return nil, paramErr("step", "%v is shorter than the fleet overview's shortest step, %v", time.Duration(step), time.Duration(minFleetStep))
	}
	r = alignRange(r, step)
	if n := steps(r, step); n > maxFleetColumns {
		return nil, paramErr("step", "%v over this range is %d columns, at most %d", time.Duration(step), n, maxFleetColumns)
	}
	ov, warnings, err := overview.Build(ctx, s.db, overview.Request{Range: r, Step: step, Filter: &f, SampleFilter: sampleFilter})
	if err != nil {
		return warnings, err
	}
	return warnings, rep.json(ov)
}
