package web

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"html/template"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/heatscope/heatscope/events"
	"github.com/heatscope/heatscope/prediff"
	"github.com/heatscope/heatscope/query"
	"github.com/heatscope/heatscope/store"
)

// The fleet's events and the pre-event diff across the fleet (package
// prediff): GET /api/fleet/events, /api/fleet/prediff and
// /api/fleet/prediff/diff.
const (
	fleetEventsPath = "/api/fleet/events"
	prediffPath     = "/api/fleet/prediff"
	prediffDiffPath = "/api/fleet/prediff/diff"
	// defaultPrediffLimit is how many rows of the functions table an
	// answer holds by default.
	defaultPrediffLimit = 200
)

// fleetPages are the fleet views' pages, each a page of its own beside the
// single-node UI at /, linked to each other in their header in this order.
var fleetPages = []struct {
	path, name string // where it is served; its link's text
	file       string // its templates under ui/, framed by fleet-page.html
	api        string // the endpoint behind it
}{
	{"/fleet/events", "fleet events", "fleet-events.html", fleetEventsPath},
	{"/fleet/prediff", "pre-event diff", "fleet-prediff.html", prediffPath},
}

// uiPages are the fleet views' pages by path, built once from their
// templates.
var uiPages = buildFleetPages()

// navLink is a link of a fleet page's header.
type navLink struct {
	Path, Name string
	Current    bool
}

// buildFleetPages executes each fleet page's templates in the frame
// ui/fleet-page.html, which gives every page the same header; it panics
// on a bad template, as mustReadUI on a missing file.
func buildFleetPages() map[string][]byte {
	pages := map[string][]byte{}
	for _, page := range fleetPages {
		var nav []navLink
		for _, p := range fleetPages {
			nav = append(nav, navLink{Path: p.path, Name: p.name, Current: p.path == page.path})
		}
		t := template.Must(template.ParseFS(uiFS, "ui/fleet-page.html", "ui/"+page.file))
		var b bytes.Buffer
		if err := t.ExecuteTemplate(&b, "fleet-page.html", struct {
			Nav []navLink
			API string
		}{nav, page.api}); err != nil {
			panic(fmt.Sprintf("fleet page %s: %v", page.file, err))
		}
		pages[page.path] = b.Bytes()
	}
	return pages
}

// fleetEndpoints are the fleet views' endpoints.
func (s *Server) fleetEndpoints() map[string]endpoint {
	with := func(names ...string) []string { return append(names, query.FilterParams...) }
	return map[string]endpoint{
		fleetEventsPath: {[]string{"from", "to", "source", "kind", "node", "label", "limit"}, s.fleetEvents},
		prediffPath:     {with("kind", "window", "from", "to", "events", "limit", "function", "functionKind", "addresses"), s.prediff},
		prediffDiffPath: {with("kind", "window", "from", "to", "events", "encoding", "addresses"), s.prediffDiff},
	}
}

// nodeFilter parses the node and label parameters, checking the nodes
// named exist.
func (s *Server) nodeFilter(p *params) (store.Filter, error) {
	return p.filter(s.db.Sources(), s.db.Nodes())
}

// listParam splits a comma separated parameter, bounded in items.
func listParam(p *params, name string) ([]string, error) {
	v := p.get(name)
	if v == "" {
		return nil, nil
	}
	list := strings.Split(v, ",")
	if len(list) > maxListItems {
		return nil, paramErr(name, "%d items, at most %d", len(list), maxListItems)
	}
	return list, nil
}

// fleetEventJSON is an event in /api/fleet/events.
type fleetEventJSON struct {
	eventJSON
	Node string `json:"node"`
	Kind string `json:"kind"`
}

// countJSON is one kind's or one node's number of events.
type countJSON struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
}

// fleetEventCounts are the fields of fleetEventsJSON after its list,
// encoded after the list fleetEvents encodes by hand.
type fleetEventCounts struct {
	Total       int         `json:"total"`
	Kinds       []countJSON `json:"kinds"`
	DefaultKind string      `json:"defaultKind"`
	Nodes       []countJSON `json:"nodes"`
	Message     string      `json:"message"`
}

// fleetEventsJSON is the answer of /api/fleet/events.
type fleetEventsJSON struct {
	// Events are the events that pass every filter, in time order, at
	// most limit; More says limit cut them short, Total counts them all.
	Events []fleetEventJSON `json:"events"`
	More   bool             `json:"more"`
	Total  int              `json:"total"`
	// Kinds counts the events by kind, every filter but kind applied, so
	// that the other kinds show beside the one chosen; Nodes counts them
	// by node, every filter applied. Both most first, then by name.
	Kinds []countJSON `json:"kinds"`
	// DefaultKind is the kind the pre-event diff compares before unless
	// told: the most frequent in Kinds that marks an incident
	// (events.Incident: never heatscope's own overhead-guard); "" when
	// none does.
	DefaultKind string      `json:"defaultKind"`
	Nodes       []countJSON `json:"nodes"`
	// Message says why the list is empty; "" when it is not.
	Message string `json:"message"`
}

// fleetEvents answers /api/fleet/events: every event of every node, with
// counts by kind and by node.
func (s *Server) fleetEvents(_ context.Context, p *params, rep *reply) (store.Warnings, error) {
	q, err := parseEventQuery(p)
	if err != nil {
		return nil, err
	}
	f, err := s.nodeFilter(p)
	if err != nil {
		return nil, err
	}
	// Every kind is matched, so that the other kinds are counted; the
	// kinds asked for choose the events listed.
	limit, kinds := q.limit, q.filter.Kinds
	evs := s.db.NodeEvents(q.r, store.EventFilter{Sources: q.filter.Sources}, &f)
	var listed []*store.NodeEvent
	var rest fleetEventCounts
	byKind, byNode := map[string]int{}, map[string]int{}
	for i := range evs {
		e := &evs[i]
		kind := e.Kind()
		byKind[kind]++
		if len(kinds) > 0 && !slices.Contains(kinds, kind) {
			continue
		}
		byNode[e.Node]++
		rest.Total++
		if len(listed) < limit {
			listed = append(listed, e)
		}
	}
	rest.Kinds, rest.Nodes = counts(byKind), counts(byNode)
	for _, k := range rest.Kinds {
		if k.Name != "" && events.Incident(k.Name) {
			rest.DefaultKind = k.Name
			break
		}
	}
	if rest.Total == 0 {
		rest.Message = noEventsMessage(p, kinds, len(evs))
	}
	out, err := eventList(len(listed), rest.Total > len(listed), rep.limit, func(out []byte, i int) []byte {
		e := listed[i]
		out = append(appendEventFields(out, &e.Event), `,"node":`...)
		out = append(appendString(out, e.Node), `,"kind":`...)
		return append(appendString(out, e.Kind()), '}')
	})
	if err == nil {
		out, err = closeEventList(out, rest)
	}
	return nil, rep.encoded(out, err)
}

// nodesWhere names the nodes a fleet view looks at, for its messages.
func nodesWhere(p *params) string {
	if p.get("node") == "" && p.get("label") == "" {
		return "on any node"
	}
	return "on the selected nodes"
}

// noEventsMessage says why no event matched: none in the range on the
// nodes selected, or none of the kinds asked (others there being).
func noEventsMessage(p *params, kinds []string, others int) string {
	where := nodesWhere(p)
	if p.get("from") != "" || p.get("to") != "" {
		where += " in this time range"
	}
	if len(kinds) > 0 && others > 0 {
		return fmt.Sprintf("no event of kind %s %s (%d of other kinds)", strings.Join(kinds, ", "), where, others)
	}
	return "no event " + where
}

func counts(m map[string]int) []countJSON {
	out := make([]countJSON, 0, len(m))
	for name, n := range m {
		out = append(out, countJSON{Name: name, Count: n})
	}
	slices.SortFunc(out, func(a, b countJSON) int { return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Name, b.Name)) })
	return out
}

// prediffOptions parses the parameters both pre-event diff endpoints
// take.
func (s *Server) prediffOptions(p *params) (prediff.Options, error) {
	var o prediff.Options
	var err error
	if o.Kind, err = prediff.ParseKind("kind", p.get("kind")); err != nil {
		return o, err
	}
	if o.Window, err = prediff.ParseWindow("window", p.get("window")); err != nil {
		return o, err
	}
	if o.Range, err = p.timeRange("from", "to", store.Range{From: 0, To: maxTime}, nil, true); err != nil {
		return o, err
	}
	if o.MaxEvents, err = p.int("events", prediff.DefaultMaxEvents, 1, prediff.MaxEvents); err != nil {
		return o, err
	}
	if o.Filter, err = s.nodeFilter(p); err != nil {
		return o, err
	}
	o.Frames, err = query.ParseFrames(p.get("addresses"))
	return o, err
}

// prediffEventJSON is one event of /api/fleet/prediff, its figures in
// CPU-seconds.
type prediffEventJSON struct {
	Node   string  `json:"node"`
	Time   float64 `json:"time"`
	Source string  `json:"source"`
	Text   string  `json:"text"`
	A      float64 `json:"a"`
	B      float64 `json:"b"`
	FocusA float64 `json:"focusA"`
	FocusB float64 `json:"focusB"`
}

type prediffNodeJSON struct {
	Node        string  `json:"node"`
	Events      int     `json:"events"`
	WithSamples int     `json:"withSamples"`
	A           float64 `json:"a"`
	B           float64 `json:"b"`
	FocusA      float64 `json:"focusA"`
	FocusB      float64 `json:"focusB"`
	FocusGrew   int     `json:"focusGrew"`
}

type prediffFunctionJSON struct {
	Name      string  `json:"name"`
	Kind      string  `json:"kind"`
	A         float64 `json:"a"`
	B         float64 `json:"b"`
	SelfA     float64 `json:"selfA"`
	SelfB     float64 `json:"selfB"`
	Delta     float64 `json:"delta"`
	DeltaSelf float64 `json:"deltaSelf"`
	Grew      int     `json:"grew"`
	Ran       int     `json:"ran"`
	GrewNodes int     `json:"grewNodes"`
	// Via names the callee a pass-through passes its growth to (at least
	// 90% of it, DeltaVia); "" for the others.
	Via      string  `json:"via,omitempty"`
	ViaKind  string  `json:"viaKind,omitempty"`
	DeltaVia float64 `json:"deltaVia,omitempty"`
}

// prediffJSON is the answer of /api/fleet/prediff.
type prediffJSON struct {
	Kind string `json:"kind"`
	// Window is each window's length in seconds; Unit names what every
	// other figure is in.
	Window float64 `json:"window"`
	Unit   string  `json:"unit"`
	// Events, WithSamples, More: the events compared (time order), those
	// with a sample in either window, and whether events= cut the list.
	Events      []prediffEventJSON `json:"events"`
	WithSamples int                `json:"withSamples"`
	More        bool               `json:"more"`
	// EventNodes counts the nodes the events are on.
	EventNodes int               `json:"eventNodes"`
	Nodes      []prediffNodeJSON `json:"nodes"`
	A          float64           `json:"a"`
	B          float64           `json:"b"`
	// Functions are the functions that grew most first, at most limit;
	// FunctionCount counts them all.
	Functions     []prediffFunctionJSON `json:"functions"`
	FunctionCount int                   `json:"functionCount"`
	// Focus is the function whose per-event and per-node figures the
	// events and nodes carry (the function parameter); null without one.
	Focus *prediff.Func `json:"focus"`
	// Kinds, when no event matched, counts the kinds the selected nodes
	// do have.
	Kinds []countJSON `json:"kinds"`
	// Message says why there is nothing to compare; "" otherwise.
	Message string `json:"message"`
}

func (s *Server) prediff(ctx context.Context, p *params, rep *reply) (store.Warnings, error) {
	o, err := s.prediffOptions(p)
	if err != nil {
		return nil, err
	}
	limit, err := p.int("limit", defaultPrediffLimit, 1, maxTopLimit)
	if err != nil {
		return nil, err
	}
	if name := p.get("function"); name != "" {
		o.Focus = &prediff.Func{Name: name, Kind: p.get("functionKind")}
		if o.Focus.Kind == "" {
			return nil, paramErr("functionKind", "required with function: kernel, user, jit, python or unknown")
		}
		if !slices.Contains([]string{"kernel", "user", "jit", "python", "unknown"}, o.Focus.Kind) {
			return nil, paramErr("functionKind", "%q: want kernel, user, jit, python or unknown", query.Clip(o.Focus.Kind))
		}
	} else if p.get("functionKind") != "" {
		return nil, paramErr("functionKind", "applies with function only")
	}
	o.Table = true
	res, warnings, err := prediff.Compare(ctx, s.db, o)
	if err != nil {
		return warnings, fmt.Errorf("pre-event diff: %w", err)
	}
	out := prediffJSON{Kind: o.Kind, Window: seconds(o.Window), Unit: query.UnitCPUSeconds, WithSamples: res.WithSamples, More: res.More,
		EventNodes: len(res.Nodes), A: seconds(res.A), B: seconds(res.B), Focus: o.Focus,
		Events: make([]prediffEventJSON, len(res.Events)), Nodes: make([]prediffNodeJSON, len(res.Nodes)),
		Functions: []prediffFunctionJSON{}, FunctionCount: len(res.Functions), Kinds: counts(res.Kinds)}
	for i, e := range res.Events {
		out.Events[i] = prediffEventJSON{Node: e.Node, Time: seconds(e.Time), Source: e.Source, Text: e.Text,
			A: seconds(e.A), B: seconds(e.B), FocusA: seconds(e.FocusA), FocusB: seconds(e.FocusB)}
	}
	for i, n := range res.Nodes {
		out.Nodes[i] = prediffNodeJSON{Node: n.Node, Events: n.Events, WithSamples: n.WithSamples, A: seconds(n.A), B: seconds(n.B),
			FocusA: seconds(n.FocusA), FocusB: seconds(n.FocusB), FocusGrew: n.FocusGrew}
	}
	for _, f := range res.Functions[:min(limit, len(res.Functions))] {
		out.Functions = append(out.Functions, prediffFunctionJSON{Name: f.Name, Kind: f.Kind, A: seconds(f.A), B: seconds(f.B),
			SelfA: seconds(f.SelfA), SelfB: seconds(f.SelfB), Delta: seconds(f.A - f.B), DeltaSelf: seconds(f.SelfA - f.SelfB),
			Grew: f.Grew, Ran: f.Ran, GrewNodes: f.GrewNodes, Via: f.Via, ViaKind: f.ViaKind, DeltaVia: seconds(f.DeltaVia)})
	}
	out.Message = prediffMessage(p, o, res)
	return warnings, rep.json(out)
}

// prediffMessage says why a pre-event diff has nothing to show: no event
// of the kind (and which kinds there are), or no sample in any window.
func prediffMessage(p *params, o prediff.Options, res *prediff.Result) string {
	where := nodesWhere(p)
	switch {
	case len(res.Events) == 0 && len(res.Kinds) == 0:
		return fmt.Sprintf("no %s event %s: no event at all there", o.Kind, where)
	case len(res.Events) == 0:
		var kinds []string
		for _, c := range counts(res.Kinds) {
			kinds = append(kinds, c.Name+" ("+strconv.Itoa(c.Count)+")")
		}
		return fmt.Sprintf("no %s event %s; the events there are of kinds %s", o.Kind, where, strings.Join(kinds, ", "))
	case res.WithSamples == 0:
		return fmt.Sprintf("none of the %d %s events has a sample (passing the filters) in the %v before it or the %v before that",
			len(res.Events), o.Kind, time.Duration(o.Window), time.Duration(o.Window))
	}
	return ""
}

// prediffNode appends a pre-event diff's tree as the nested JSON of
// /api/fleet/prediff/diff, its CPU times in seconds.
func prediffNode(out []byte, n *prediff.TreeNode, limit int) ([]byte, error) {
	return tree(out, n, limit, func(out []byte, n *prediff.TreeNode) []byte {
		return appendDiffFields(out, n.Name, n.Kind, []intField{{"a", n.A}, {"b", n.B}, {"selfA", n.SelfA}, {"selfB", n.SelfB}})
	}, func(n *prediff.TreeNode) []*prediff.TreeNode { return n.Children })
}

// prediffDiff answers /api/fleet/prediff/diff: the differential flame
// graph of all A windows against all B windows. JSON carries
// CPU-seconds; the compact encoding (magic HSD1, as /api/diff) carries
// integer CPU nanoseconds, its header saying "unit":"cpu-nanoseconds".
func (s *Server) prediffDiff(ctx context.Context, p *params, rep *reply) (store.Warnings, error) {
	o, err := s.prediffOptions(p)
	if err != nil {
		return nil, err
	}
	compact, err := compactEncoding(p)
	if err != nil {
		return nil, err
	}
	o.Tree = true
	res, warnings, err := prediff.Compare(ctx, s.db, o)
	if err != nil {
		return warnings, fmt.Errorf("pre-event diff: %w", err)
	}
	root := res.Root
	if root == nil {
		root = &prediff.TreeNode{Name: "root", Kind: "root"}
	}
	if !compact {
		out, err := prediffNode([]byte(`{"unit":"`+query.UnitCPUSeconds+`","root":`), root, rep.limit)
		if err == nil {
			out = append(out, '}')
		}
		return warnings, rep.encoded(out, err)
	}
	header := cpuDiffHeader(intField{"totalA", root.A}, intField{"totalB", root.B})
	return warnings, rep.binary(compactTree(compactDiffMagic, root, 6, rep.limit, header, func(n *prediff.TreeNode, nums []float64) (string, string) {
		for i, v := range []int64{n.A, n.B, n.SelfA, n.SelfB, n.SelfA - n.SelfB, n.A - n.B} {
			nums[i] = float64(v)
		}
		return n.Name, n.Kind
	}, func(n *prediff.TreeNode) []*prediff.TreeNode { return n.Children }))
}
