package web

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/heatscope/heatscope/profileio"
	"github.com/heatscope/heatscope/query"
	"github.com/heatscope/heatscope/store"
)

// endpoint is one API path: the parameters it takes and how it answers.
type endpoint struct {
	params []string
	run    func(ctx context.Context, p *params, rep *reply) (store.Warnings, error)
}

// Limits of the API's answers.
const (
	// defaultTimelinePoints is the most points a timeline has when no
	// step is given; maxTimelinePoints the most with any step.
	defaultTimelinePoints = 1000
	maxTimelinePoints     = 100_000
	// summaryStep is the store's timeline summary granularity: steps and
	// ranges that are multiples of it are answered without reading samples.
	summaryStep = int64(10 * time.Second)
	// maxHeatmapCells bounds rows × columns: 100 000 columns of the
	// default 50 rows.
	maxHeatmapCells = query.MaxColumns * 50
	defaultRows     = 50
	// defaultPerCPUSteps is the most columns a per-CPU view has when no
	// step is given, minPerCPUStep its shortest default step.
	defaultPerCPUSteps = 600
	minPerCPUStep      = int64(10 * time.Millisecond)
	defaultTopLimit    = 200
	maxTopLimit        = 10_000
)

func (s *Server) endpoints() map[string]endpoint {
	with := func(names ...string) []string { return append(names, query.FilterParams...) }
	m := map[string]endpoint{
		"/api/sources":    {[]string{"node", "label"}, s.sources},
		"/api/nodes":      {nil, s.nodes},
		"/api/timeline":   {with("from", "to", "step"), s.timeline},
		"/api/heatmap":    {with("from", "to", "rows"), s.heatmap},
		"/api/flamegraph": {with("from", "to", "encoding", "group", "addresses"), s.flameGraph},
		"/api/diff":       {with("from", "to", "from2", "to2", "encoding", "normalize", "addresses"), s.diff},
		"/api/percpu":     {with("from", "to", "step"), s.perCPU},
		"/api/top":        {with("from", "to", "from2", "to2", "limit", "order", "group", "addresses"), s.top},
		eventsPath:        {[]string{"from", "to", "source", "kind", "node", "label", "limit"}, s.listEvents},
		"/api/pprof":      {with("from", "to"), s.pprof},
		fleetPath:         {with("from", "to", "step", "columns", "encoding"), s.fleetOverview},
	}
	for path, ep := range s.fleetEndpoints() {
		m[path] = ep
	}
	return m
}

// The answers of /api/heatmap, /api/percpu and /api/top with their
// message: why they hold no sample ("" when they hold some). The query's
// fields stay where they were.
type (
	heatmapJSON struct {
		*query.Heatmap
		Message string `json:"message"`
	}
	perCPUJSON struct {
		*query.PerCPU
		Message string `json:"message"`
	}
	topJSON struct {
		*query.Top
		Message string `json:"message"`
	}
	growthJSON struct {
		*query.Growths
		Message string `json:"message"`
	}
)

// selection is a request's filter and time range.
type selection struct {
	f store.Filter
	r store.Range
}

// parseSelection parses the filter and the from and to parameters. When
// optional, missing ends default to the span of the selected sources.
func (s *Server) parseSelection(p *params, optional bool) (*selection, error) {
	sources, nodes := s.db.Sources(), s.db.Nodes()
	f, err := p.filter(sources, nodes)
	if err != nil {
		return nil, err
	}
	r, err := p.timeRange("from", "to", span(s.db, &f), noData(s.db, &f), optional)
	if err != nil {
		return nil, err
	}
	return &selection{f: f, r: r}, nil
}

func seconds(ns int64) float64 { return float64(ns) / 1e9 }

// sourceJSON is one entry of /api/sources.
type sourceJSON struct {
	Name string `json:"name"`
	// First and Last are the times of the first and last samples, Unix
	// seconds.
	First    float64 `json:"first"`
	Last     float64 `json:"last"`
	Samples  int     `json:"samples"`
	Imported bool    `json:"imported"`
	PeriodNs int64   `json:"periodNs"`
	// Relative is true for an import whose times are the capture's own
	// clock (seconds since its machine booted), not wall time: show times
	// as seconds from First, never as dates.
	Relative bool `json:"relative"`
}

// sources answers /api/sources: every source, or with node or label
// filters the sources of the nodes they keep, with those nodes' samples
// only (a node's view lists its own).
func (s *Server) sources(_ context.Context, p *params, rep *reply) (store.Warnings, error) {
	f, err := p.filter(s.db.Sources(), s.db.Nodes())
	if err != nil {
		return nil, err
	}
	list := s.db.SourcesOf(&f)
	out := make([]sourceJSON, len(list))
	for i, src := range list {
		out[i] = sourceJSON{Name: src.Name, First: seconds(src.First), Last: seconds(src.Last), Samples: src.Samples,
			Imported: src.Imported, PeriodNs: src.PeriodNs, Relative: src.Relative}
	}
	return nil, rep.json(out)
}

// nodeJSON is one entry of /api/nodes.
type nodeJSON struct {
	Name    string            `json:"name"`
	Labels  map[string]string `json:"labels"`
	Sources []string          `json:"sources"`
	Blocks  int               `json:"blocks"`
	// First and Last are the times of the node's first and last samples,
	// Unix seconds.
	First   float64 `json:"first"`
	Last    float64 `json:"last"`
	Samples int     `json:"samples"`
}

// nodes answers /api/nodes: every node whose samples the store holds, with
// its labels, blocks and span; [] when none.
func (s *Server) nodes(_ context.Context, _ *params, rep *reply) (store.Warnings, error) {
	list := s.db.Nodes()
	out := make([]nodeJSON, len(list))
	for i, n := range list {
		out[i] = nodeJSON{Name: n.Name, Labels: n.Labels, Sources: n.Sources, Blocks: n.Blocks, First: seconds(n.First), Last: seconds(n.Last), Samples: n.Samples}
	}
	return nil, rep.json(out)
}

// timelineJSON is the answer of /api/timeline.
type timelineJSON struct {
	// Start is the time of the first step, Unix seconds; Step is each
	// step's length in seconds.
	Start float64 `json:"start"`
	Step  float64 `json:"step"`
	// Unit names what CPU holds, "cpu-seconds": the CPU time of each
	// step, every sample weighing its own sampling period.
	Unit string    `json:"unit"`
	CPU  []float64 `json:"cpu"`
	// Counts are the samples of each step (they change with the rate).
	Counts []int64 `json:"counts"`
	// Message says why no step has a sample ("" when one has).
	Message string `json:"message"`
}

// newTimelineJSON is the answer for steps of step ns from start.
func newTimelineJSON(start, step int64, tl *store.Steps) timelineJSON {
	cpu := make([]float64, len(tl.CPUNs))
	for i, ns := range tl.CPUNs {
		cpu[i] = seconds(ns)
	}
	return timelineJSON{Start: seconds(start), Step: seconds(step), Unit: query.UnitCPUSeconds, CPU: cpu, Counts: tl.Samples}
}

// selectionWithStep parses an endpoint's range (optional: the whole span
// of the sources by default), filters and step, which defaults to
// defaultFor the range's width. given says whether the step was given.
func (s *Server) selectionWithStep(p *params, defaultFor func(width int64) int64) (sel *selection, step int64, given bool, err error) {
	if sel, err = s.parseSelection(p, true); err != nil {
		return nil, 0, false, err
	}
	if step, given, err = p.step(); err != nil {
		return nil, 0, false, err
	}
	if !given {
		step = defaultFor(width(sel.r))
	}
	return sel, step, given, nil
}

// niceStep returns the first of 1, 2 or 5 times a power of ten, from min
// up, that is at least raw; false when that reaches limit (0: no limit).
func niceStep(raw, min, limit int64) (int64, bool) {
	for step := min; limit == 0 || step < limit; step *= 10 {
		for _, m := range []int64{1, 2, 5} {
			if m*step >= raw {
				return m * step, true
			}
		}
	}
	return 0, false
}

func (s *Server) timeline(ctx context.Context, p *params, rep *reply) (store.Warnings, error) {
	sel, step, given, err := s.selectionWithStep(p, defaultStep)
	if err != nil {
		return nil, err
	}
	r := alignRange(sel.r, step)
	for !given && steps(r, step) > defaultTimelinePoints {
		// Aligning added up to a step at each end.
		step += summaryStep
		r = alignRange(sel.r, step)
	}
	if n := steps(r, step); n > maxTimelinePoints {
		return nil, paramErr("step", "%v over this range is %d points, at most %d", time.Duration(step), n, maxTimelinePoints)
	}
	tl, warnings, err := s.db.Timeline(ctx, r, step, &sel.f)
	if err != nil {
		return warnings, fmt.Errorf("timeline: %w", err)
	}
	out := newTimelineJSON(r.From, step, tl)
	empty := !slices.ContainsFunc(tl.Samples, func(n int64) bool { return n > 0 })
	if out.Message, warnings, err = s.explain(ctx, p, &sel.f, warnings, window{r: r, empty: empty}); err != nil {
		return warnings, err
	}
	return warnings, rep.json(out)
}

// width is r's length in ns (r.To > r.From, both in [0, maxTime]).
func width(r store.Range) int64 { return r.To - r.From }

// steps is how many steps of step cover r, the last maybe partial.
func steps(r store.Range, step int64) int64 { return (width(r) + step - 1) / step }

// defaultStep picks a step giving at most defaultTimelinePoints over
// width: 1, 2 or 5 times a power of ten from 1 ms to 5 s, else a
// multiple of 10 s, so that the store's summaries answer.
func defaultStep(width int64) int64 {
	raw := (width + defaultTimelinePoints - 1) / defaultTimelinePoints
	if step, ok := niceStep(raw, int64(time.Millisecond), summaryStep); ok {
		return step
	}
	return (raw + summaryStep - 1) / summaryStep * summaryStep
}

// alignRange widens r to whole steps (from down, to up) when step is a
// multiple of 10 s, so that the store's summaries answer; other steps
// leave r as it is. The bounds on times and steps keep it from
// overflowing.
func alignRange(r store.Range, step int64) store.Range {
	if step%summaryStep != 0 {
		return r
	}
	return store.Range{From: r.From / step * step, To: (r.To + step - 1) / step * step}
}

func (s *Server) heatmap(ctx context.Context, p *params, rep *reply) (store.Warnings, error) {
	sel, err := s.parseSelection(p, true)
	if err != nil {
		return nil, err
	}
	rows, err := p.int("rows", defaultRows, 1, query.MaxRows)
	if err != nil {
		return nil, err
	}
	// As query.HeatmapOf counts them: one column per second touched.
	cols := int(math.Ceil(seconds(sel.r.To)) - math.Floor(seconds(sel.r.From)))
	if cols > query.MaxColumns {
		if p.get("from") == "" {
			return nil, paramErr("from", "the selected samples span %d seconds, and a heatmap has at most %d columns (one a second): give from and to, or a source", cols, query.MaxColumns)
		}
		return nil, paramErr("to", "the range covers %d seconds, and a heatmap has at most %d columns (one a second)", cols, query.MaxColumns)
	}
	if cols*rows > maxHeatmapCells {
		return nil, paramErr("rows", "%d rows of %d columns are %d cells, at most %d: use fewer rows or a shorter range", rows, cols, cols*rows, maxHeatmapCells)
	}
	h, warnings, err := query.HeatmapOf(ctx, s.db, sel.r, &sel.f, rows)
	if err != nil {
		return warnings, fmt.Errorf("heatmap: %w", err)
	}
	out := heatmapJSON{Heatmap: h}
	if out.Message, warnings, err = s.explain(ctx, p, &sel.f, warnings, window{r: sel.r, empty: h.MaxValue == 0}); err != nil {
		return warnings, err
	}
	return warnings, rep.json(out)
}

func (s *Server) perCPU(ctx context.Context, p *params, rep *reply) (store.Warnings, error) {
	sel, step, _, err := s.selectionWithStep(p, defaultPerCPUStep)
	if err != nil {
		return nil, err
	}
	// The default step gives at most defaultPerCPUSteps.
	if n := steps(sel.r, step); n > query.MaxPerCPUSteps {
		return nil, paramErr("step", "%v over this range is %d steps, at most %d", time.Duration(step), n, query.MaxPerCPUSteps)
	}
	pc, warnings, err := query.PerCPUOf(ctx, s.db, sel.r, &sel.f, step)
	if errors.Is(err, query.ErrTooManyCPUs) {
		return warnings, paramErr("cpu", "the samples come from more than %d CPUs: choose some with cpu", query.MaxPerCPUs)
	}
	if err != nil {
		return warnings, fmt.Errorf("per-CPU: %w", err)
	}
	out := perCPUJSON{PerCPU: pc}
	if out.Message, warnings, err = s.explain(ctx, p, &sel.f, warnings, window{r: sel.r, empty: len(pc.CPUs) == 0}); err != nil {
		return warnings, err
	}
	return warnings, rep.json(out)
}

// defaultPerCPUStep picks a step giving at most defaultPerCPUSteps over
// width: 1, 2 or 5 times a power of ten, at least minPerCPUStep.
func defaultPerCPUStep(width int64) int64 {
	step, _ := niceStep((width+defaultPerCPUSteps-1)/defaultPerCPUSteps, minPerCPUStep, 0)
	return step
}

func (s *Server) flameGraph(ctx context.Context, p *params, rep *reply) (store.Warnings, error) {
	sel, err := s.parseSelection(p, false)
	if err != nil {
		return nil, err
	}
	compact, err := compactEncoding(p)
	if err != nil {
		return nil, err
	}
	group, err := query.ParseGroup(p.get("group"))
	if err != nil {
		return nil, err
	}
	frames, err := query.ParseFrames(p.get("addresses"))
	if err != nil {
		return nil, err
	}
	root, warnings, err := query.GroupedFlameGraphOf(ctx, s.db, sel.r, &sel.f, group, frames)
	if err != nil {
		return warnings, fmt.Errorf("flame graph: %w", err)
	}
	msg, warnings, err := s.explain(ctx, p, &sel.f, warnings, window{r: sel.r, empty: root.Value == 0})
	if err != nil {
		return warnings, err
	}
	if compact {
		return warnings, rep.binary(compactNode(root, msg, rep.limit))
	}
	// The root's object is the answer: the message is its last field.
	out, err := node(nil, root, rep.limit)
	if err == nil {
		out = append(appendString(append(out[:len(out)-1], `,"message":`...), msg), '}')
	}
	return warnings, rep.encoded(out, err)
}

func (s *Server) diff(ctx context.Context, p *params, rep *reply) (store.Warnings, error) {
	sel, err := s.parseSelection(p, false)
	if err != nil {
		return nil, err
	}
	baseline, err := p.timeRange("from2", "to2", store.Range{}, nil, false)
	if err != nil {
		return nil, err
	}
	compact, err := compactEncoding(p)
	if err != nil {
		return nil, err
	}
	norm, err := query.ParseNormalization(p.get("normalize"))
	if err != nil {
		return nil, err
	}
	frames, err := query.ParseFrames(p.get("addresses"))
	if err != nil {
		return nil, err
	}
	d, warnings, err := query.DiffOf(ctx, s.db, sel.r, baseline, &sel.f, norm, frames)
	if err != nil {
		return warnings, fmt.Errorf("diff: %w", err)
	}
	msg, warnings, err := s.explain(ctx, p, &sel.f, warnings,
		window{"the selection A (from, to)", sel.r, d.SamplesA == 0}, window{"the baseline B (from2, to2)", baseline, d.SamplesB == 0})
	if err != nil {
		return warnings, err
	}
	if compact {
		return warnings, rep.binary(compactDiff(d, msg, rep.limit))
	}
	return warnings, rep.encoded(diff(nil, d, msg, rep.limit))
}

func (s *Server) top(ctx context.Context, p *params, rep *reply) (store.Warnings, error) {
	sel, err := s.parseSelection(p, false)
	if err != nil {
		return nil, err
	}
	limit, err := p.int("limit", defaultTopLimit, 1, maxTopLimit)
	if err != nil {
		return nil, err
	}
	frames, err := query.ParseFrames(p.get("addresses"))
	if err != nil {
		return nil, err
	}
	if p.get("from2") != "" || p.get("to2") != "" {
		if p.get("group") != "" {
			return nil, paramErr("group", "applies to the top table, not to growth: leave out from2 and to2")
		}
		baseline, err := p.timeRange("from2", "to2", store.Range{}, nil, false)
		if err != nil {
			return nil, err
		}
		order, err := query.ParseGrowthOrder(p.get("order"))
		if err != nil {
			return nil, err
		}
		g, warnings, err := query.GrowthOf(ctx, s.db, sel.r, baseline, &sel.f, order, frames)
		if err != nil {
			return warnings, fmt.Errorf("top: %w", err)
		}
		g.Functions = g.Functions[:min(limit, len(g.Functions))]
		out := growthJSON{Growths: g}
		out.Message, warnings, err = s.explain(ctx, p, &sel.f, warnings,
			window{"the selection A (from, to)", sel.r, g.Samples == 0}, window{"the baseline B (from2, to2)", baseline, g.Samples2 == 0})
		if err != nil {
			return warnings, err
		}
		return warnings, rep.json(out)
	}
	if p.get("order") != "" {
		return nil, paramErr("order", "applies to growth only: give from2 and to2 too")
	}
	group, err := query.ParseGroup(p.get("group"))
	if err != nil {
		return nil, err
	}
	top, warnings, err := query.TopOf(ctx, s.db, sel.r, &sel.f, group, frames)
	if err != nil {
		return warnings, fmt.Errorf("top: %w", err)
	}
	top.Functions = top.Functions[:min(limit, len(top.Functions))]
	out := topJSON{Top: top}
	if out.Message, warnings, err = s.explain(ctx, p, &sel.f, warnings, window{r: sel.r, empty: top.Samples == 0}); err != nil {
		return warnings, err
	}
	return warnings, rep.json(out)
}

func (s *Server) pprof(ctx context.Context, p *params, rep *reply) (store.Warnings, error) {
	sel, err := s.parseSelection(p, false)
	if err != nil {
		return nil, err
	}
	prof, warnings, err := query.PprofOf(ctx, s.db, sel.r, &sel.f)
	if err != nil {
		return warnings, fmt.Errorf("pprof: %w", err)
	}
	// An empty profile says why in its comments (go tool pprof -comments).
	msg, warnings, err := s.explain(ctx, p, &sel.f, warnings, window{r: sel.r, empty: len(prof.Sample) == 0})
	if err != nil {
		return warnings, err
	}
	if msg != "" {
		prof.Comments = append(prof.Comments, msg)
	}
	if err := profileio.WritePprof(rep, prof); err != nil {
		return warnings, fmt.Errorf("pprof: %w", err)
	}
	rep.contentType = "application/octet-stream"
	rep.filename = fmt.Sprintf("heatscope-%s-%s.pb.gz", secondsText(sel.r.From), secondsText(sel.r.To))
	return warnings, nil
}

// secondsText writes ns (not negative) as Unix seconds with only the
// decimals needed, as the time parameters take them.
func secondsText(ns int64) string {
	s := fmt.Sprintf("%d.%09d", ns/1e9, ns%1e9)
	return strings.TrimSuffix(strings.TrimRight(s, "0"), ".")
}
