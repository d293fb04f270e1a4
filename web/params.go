package web

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/heatscope/heatscope/query"
	"github.com/heatscope/heatscope/store"
)

// Bounds on parameters. Times are limited to [0, maxTime] (query.ParseTime
// takes no other) and steps to maxStep so that no range or step arithmetic
// (widths, alignment, step counts) can overflow int64.
const (
	maxTime = query.MaxTime
	maxStep = int64(1) << 60
	// maxListItems bounds the comma-separated lists (pid, tid, cpu,
	// cgroup, container, pod, namespace, qos, source): filters test each
	// thread against every item.
	maxListItems = 1024
)

func paramErr(param, format string, args ...any) error {
	return &query.ParamError{Param: param, Err: fmt.Errorf(format, args...)}
}

// params are the query parameters of one request.
type params struct {
	vals url.Values
	now  time.Time
}

// parseParams parses r's query string. It refuses parameters not in
// accepted and parameters given more than once, naming them.
func parseParams(r *http.Request, accepted []string, now time.Time) (*params, error) {
	vals, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, &query.ParamError{Param: "query", Err: err}
	}
	names := make([]string, 0, len(vals))
	for name := range vals {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		switch {
		case name == "":
			return nil, paramErr("query", "a parameter without a name")
		case !slices.Contains(accepted, name) && len(accepted) == 0:
			return nil, paramErr(query.Clip(name), "unknown parameter (this endpoint takes none)")
		case !slices.Contains(accepted, name):
			return nil, paramErr(query.Clip(name), "unknown parameter (this endpoint takes %s)", strings.Join(accepted, ", "))
		case len(vals[name]) > 1:
			return nil, paramErr(name, "given %d times, want at most once", len(vals[name]))
		}
	}
	return &params{vals: vals, now: now}, nil
}

// get returns a parameter's value; missing and empty are both "".
func (p *params) get(name string) string { return p.vals.Get(name) }

// time parses a time parameter; ok is false when it is missing.
func (p *params) time(name string) (t int64, ok bool, err error) {
	v := p.get(name)
	if v == "" {
		return 0, false, nil
	}
	if t, err = query.ParseTime(name, v, p.now); err != nil {
		return 0, false, err
	}
	return t, true, nil
}

// timeRange reads a range from the parameters named from and to. Missing
// ends default to whole, the span of the selected data, when there is one
// (noWhole nil, else why there is none); without it they are required.
func (p *params) timeRange(from, to string, whole store.Range, noWhole error, optional bool) (store.Range, error) {
	var r store.Range
	var hasFrom, hasTo bool
	var err error
	if r.From, hasFrom, err = p.time(from); err != nil {
		return r, err
	}
	if r.To, hasTo, err = p.time(to); err != nil {
		return r, err
	}
	for _, end := range []struct {
		name  string
		given bool
		t     *int64
		def   int64
	}{{from, hasFrom, &r.From, whole.From}, {to, hasTo, &r.To, whole.To}} {
		switch {
		case end.given:
		case !optional:
			return r, paramErr(end.name, "required")
		case noWhole != nil:
			return r, paramErr(end.name, "required: there is no data to default to: %v", noWhole)
		default:
			*end.t = end.def
		}
	}
	if r.To > r.From {
		return r, nil
	}
	if hasFrom && hasTo {
		return r, paramErr(to, "must be after %s", from)
	}
	// An end left out defaulted to the data's start or end, which the end
	// given lies beyond: say where the data is.
	open := store.Range{From: math.MinInt64, To: math.MaxInt64}
	name := to
	if hasFrom {
		open.From, name = r.From, from
	} else {
		open.To = r.To
	}
	return r, &query.ParamError{Param: name, Err: &query.NoSamplesError{Range: open, Data: whole, HasData: true}}
}

// int parses an integer parameter in [lo, hi], def when missing.
func (p *params) int(name string, def, lo, hi int) (int, error) {
	v := p.get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, paramErr(name, "%q is not a whole number", v)
	}
	if n < lo || n > hi {
		return 0, paramErr(name, "%d is out of range: want %d to %d", n, lo, hi)
	}
	return n, nil
}

// step parses the timeline step, a Go duration ("10s") or seconds ("2.5");
// ok is false when it is missing.
func (p *params) step() (ns int64, ok bool, err error) {
	v := p.get("step")
	if v == "" {
		return 0, false, nil
	}
	ns, err = query.ParseDuration("step", v, 1, maxStep)
	return ns, err == nil, err
}

// filter parses the filter parameters and checks the sources named exist.
// Lists are counted before query.ParseFilter sees them, and it bounds the
// CPUs a list names (query.MaxCPU, cpulist), so a request cannot make a
// filter allocate gigabytes. Parsing reads no file
// system: a cgroup path is matched against the paths the recording host
// kept, not looked up on this one.
func (p *params) filter(sources []store.SourceInfo, nodes []store.NodeInfo) (store.Filter, error) {
	for _, name := range []string{"source", "node", "label", "pid", "tid", "cpu", "cgroup", "container", "pod", "namespace", "qos"} {
		if n := strings.Count(p.get(name), ",") + 1; n > maxListItems {
			return store.Filter{}, paramErr(name, "%d items, at most %d", n, maxListItems)
		}
	}
	f, err := query.ParseFilter(p.get)
	if err != nil {
		return f, err
	}
	for _, name := range f.Sources {
		if !slices.ContainsFunc(sources, func(s store.SourceInfo) bool { return s.Name == name }) {
			return f, paramErr("source", "no source named %q (see /api/sources)", name)
		}
	}
	for _, name := range f.Nodes {
		if !slices.ContainsFunc(nodes, func(n store.NodeInfo) bool { return n.Name == name }) {
			return f, paramErr("node", "no node named %q (see /api/nodes)", name)
		}
	}
	return f, nil
}

// span is the time range of the samples of the sources f selects on the
// nodes it keeps, from the first sample to just after the last (within
// the times parameters may name); empty when they hold none (noData
// says why). A source is spanned on those nodes only: two nodes'
// recordings may share a source name (their hostname), and one node's
// range is its own.
func span(db Reader, f *store.Filter) store.Range {
	r, _ := query.Span(db.SourcesOf(f), f.Sources)
	r.From, r.To = max(r.From, 0), min(r.To, maxTime)
	return r
}

// noData says why the recordings f's source, node and label filters
// select hold no sample (query.Unselected): nil when they hold some.
func noData(db Reader, f *store.Filter) error {
	if e := query.Unselected(db, f); !e.HasData {
		return e
	}
	return nil
}
