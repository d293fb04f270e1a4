package query

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/heatscope/heatscope/store"
)

// EmptyReader is what Explain reads to say why a selection holds no
// sample: the samples (to count a window's edges), the timeline's counts
// (the blocks' 10 s summaries answer them without reading a sample), and
// the sources and nodes with their spans.
type EmptyReader interface {
	Selector
	Timeline(ctx context.Context, r store.Range, step int64, f *store.Filter) (*store.Steps, store.Warnings, error)
	Sources() []store.SourceInfo
	SourcesOf(f *store.Filter) []store.SourceInfo
	Nodes() []store.NodeInfo
}

// SampleFilterParams are the filter parameters that look at each sample
// (its process, thread, CPU, cgroup, container, frames), as opposed to
// those that pick whole recordings (source, node, label) and idle.
var SampleFilterParams = []string{"comm", "pid", "tid", "cpu", "cgroup", "container", "pod", "namespace", "qos", "frame", "stack"}

// DescribeFilter names the sample filter parameters given, with their
// values as given (clipped), in the order of SampleFilterParams:
// `comm "nosuch", frame "^vfs_"`; "" when none is.
func DescribeFilter(get func(name string) string) string {
	var parts []string
	for _, name := range SampleFilterParams {
		if v := get(name); v != "" && !(name == "stack" && v == "all") {
			parts = append(parts, name+" "+strconv.Quote(Clip(v)))
		}
	}
	return strings.Join(parts, ", ")
}

// Emptiness says why no sample of a range passes a filter: the node
// filter keeps no node, the selected recordings hold no sample at all or
// none in the range, those in the range are all of the CPU idle loop, or
// none of them passes the sample filters. Its Error says which.
type Emptiness struct {
	// Range is the range asked for, and Relative whether its times are
	// a capture's own clock (written as seconds on it).
	Range    store.Range
	Relative bool
	// Of names the recordings the source, node and label filters select
	// (`source "web", node "a"`); "" for all of them.
	Of string
	// NodeFilter is set when it keeps none of Nodes, the nodes the data
	// holds.
	NodeFilter string
	Nodes      []string
	// Data spans the selected recordings' samples; HasData is false when
	// they hold none.
	Data    store.Range
	HasData bool
	// InRange counts the samples of the selected recordings in Range
	// before the sample filters (Filters, as DescribeFilter writes them),
	// idle ones left out unless asked for; when it is 0 and they were,
	// Idle counts the idle ones.
	InRange, Idle int64
	Filters       string
	// Warnings counts the answer's warnings: data it could not read, or
	// could not judge, may hold what was asked for.
	Warnings int
}

// Explain says why no sample in r passes f, whose sample filters
// filters describes (DescribeFilter). It counts r's samples of the
// recordings f selects, from the blocks' 10 s summaries where they cover
// it, reading samples only in r's partial 10 s at each end. warnings are
// the empty answer's own; they are counted in, and the counting's added.
func Explain(ctx context.Context, db EmptyReader, r store.Range, f *store.Filter, filters string, warnings store.Warnings) (*Emptiness, store.Warnings, error) {
	e := Unselected(db, f)
	e.Range, e.Filters = r, filters
	defer func() { e.Warnings = len(warnings) }()
	if !e.HasData {
		return e, warnings, nil
	}
	whole := store.Filter{Sources: f.Sources, Nodes: f.Nodes, NodeRegex: f.NodeRegex, NodeLabels: f.NodeLabels, IncludeIdle: f.IncludeIdle}
	var err error
	if e.InRange, warnings, err = count(ctx, db, r, &whole, warnings); err != nil || e.InRange > 0 || f.IncludeIdle {
		return e, warnings, err
	}
	whole.IncludeIdle = true
	e.Idle, warnings, err = count(ctx, db, r, &whole, warnings)
	return e, warnings, err
}

// Unselected says why the recordings f's source, node and label filters
// select hold no sample at any time (the node filter keeps no node, or
// they hold none); its HasData is true, and Data their span, when they
// hold some. It reads no sample.
func Unselected(db EmptyReader, f *store.Filter) *Emptiness {
	e := &Emptiness{Relative: Relative(db.Sources(), f.Sources), Of: recordingsOf(f)}
	nodes := db.Nodes()
	if !slices.ContainsFunc(nodes, func(n store.NodeInfo) bool { return f.KeepsNode(n.Name, n.Labels) }) {
		e.NodeFilter = nodeFilterOf(f)
		for _, n := range nodes {
			e.Nodes = append(e.Nodes, n.Name)
		}
		return e
	}
	e.Data, e.HasData = Span(db.SourcesOf(f), f.Sources)
	return e
}

// summaryStep is the store's timeline summaries' step: a timeline at
// whole multiples of it is answered without reading samples.
const summaryStep = int64(10 * time.Second)

// count counts the samples in r that pass f, a filter that keeps every
// thread: the whole 10 s in r from the summaries, the rest by reading.
func count(ctx context.Context, db EmptyReader, r store.Range, f *store.Filter, warnings store.Warnings) (int64, store.Warnings, error) {
	var n int64
	// The answer read the same data: a block it could not read is one
	// warning, not one for each reading.
	add := func(w store.Warnings) {
		for _, x := range w {
			if !slices.ContainsFunc(warnings, func(y error) bool { return y.Error() == x.Error() }) {
				warnings = append(warnings, x)
			}
		}
	}
	scan := func(part store.Range) error {
		w, err := db.Select(ctx, part, f, func(b *store.Batch) error {
			n += int64(len(b.Rows))
			return nil
		})
		add(w)
		return err
	}
	from, to := ceilTo(r.From, summaryStep), floorTo(r.To, summaryStep)
	if to-from < summaryStep {
		err := scan(r)
		return n, warnings, err
	}
	tl, w, err := db.Timeline(ctx, store.Range{From: from, To: to}, to-from, f)
	add(w)
	if err != nil {
		return n, warnings, err
	}
	n += tl.Samples[0]
	for _, part := range []store.Range{{From: r.From, To: from}, {From: to, To: r.To}} {
		if part.To > part.From {
			if err := scan(part); err != nil {
				return n, warnings, err
			}
		}
	}
	return n, warnings, nil
}

func floorTo(t, step int64) int64 {
	if t < 0 && t%step != 0 {
		return t/step*step - step
	}
	return t / step * step
}

func ceilTo(t, step int64) int64 {
	if f := floorTo(t, step); f != t {
		return f + step
	}
	return t
}

// recordingsOf names what f's source and node filters select.
func recordingsOf(f *store.Filter) string {
	var parts []string
	if len(f.Sources) > 0 {
		parts = append(parts, plural("source", len(f.Sources))+" "+quoteList(f.Sources))
	}
	if nf := nodeFilterOf(f); nf != "" {
		parts = append(parts, nf)
	}
	return strings.Join(parts, ", ")
}

// nodeFilterOf names f's node filters: `node "a"`, `node "~^web"`,
// `label "zone=b"`.
func nodeFilterOf(f *store.Filter) string {
	var parts []string
	switch {
	case len(f.Nodes) > 0:
		parts = append(parts, plural("node", len(f.Nodes))+" "+quoteList(f.Nodes))
	case f.NodeRegex != nil:
		parts = append(parts, "node "+strconv.Quote(Clip("~"+f.NodeRegex.String())))
	}
	if len(f.NodeLabels) > 0 {
		labels := make([]string, len(f.NodeLabels))
		for i, l := range f.NodeLabels {
			labels[i] = l.Key + "=" + l.Value
		}
		parts = append(parts, plural("label", len(labels))+" "+quoteList(labels))
	}
	return strings.Join(parts, ", ")
}

// maxNamed bounds the names a message lists.
const maxNamed = 10

func quoteList(names []string) string {
	q := make([]string, 0, min(len(names), maxNamed))
	for _, n := range names[:min(len(names), maxNamed)] {
		q = append(q, strconv.Quote(Clip(n)))
	}
	if len(names) > maxNamed {
		q = append(q, fmt.Sprintf("and %d more", len(names)-maxNamed))
	}
	return strings.Join(q, ", ")
}

func plural(word string, n int) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

func (e *Emptiness) Error() string {
	format := FormatTime
	if e.Relative {
		format = FormatSeconds
	}
	window := Window(e.Range, e.Relative)
	of := "of " + e.Of
	if e.Of == "" {
		of = "in the data"
	}
	var msg string
	switch {
	case e.NodeFilter != "" && len(e.Nodes) == 0:
		msg = "no samples: the data holds none yet (nodes appear once they record, or once they upload a block)"
	case e.NodeFilter != "":
		msg = fmt.Sprintf("no node matches %s: the data holds %s %s", e.NodeFilter, plural("node", len(e.Nodes)), quoteList(e.Nodes))
	case !e.HasData && e.Of == "":
		msg = "no samples: the data holds none yet"
	case !e.HasData:
		msg = fmt.Sprintf("no samples %s at any time", of)
	case e.InRange == 0 && e.Idle > 0:
		msg = fmt.Sprintf("no samples %s %s but %d of the CPU idle loop, which the views leave out unless idle=include", of, window, e.Idle)
	case e.InRange == 0 && e.Warnings > 0:
		return fmt.Sprintf("no samples %s %s could be read: %s what was not", of, window, warningsName(e.Warnings))
	case e.InRange == 0:
		msg = fmt.Sprintf("no samples %s %s: they span %s to %s", of, window, format(e.Data.From), format(e.Data.To-1))
	case e.Filters != "":
		msg = fmt.Sprintf("none of the %d samples %s %s passes the filter %s", e.InRange, of, window, e.Filters)
	default:
		msg = fmt.Sprintf("no samples %s %s", of, window)
	}
	if e.Relative && e.HasData {
		msg += " (times on the capture's own clock, in seconds: no wall time)"
	}
	if e.Warnings > 0 {
		msg += fmt.Sprintf("; %s data this answer could not include", warningsName(e.Warnings))
	}
	return msg
}

// Window writes a range for a person: "from A to B", or "from A through
// B" when it stops a nanosecond after B, as a range defaulted to the
// data's end does after its last sample (stored in microseconds). Times
// are RFC 3339 in UTC or, relative (a capture's own clock), seconds on
// that clock.
func Window(r store.Range, relative bool) string {
	format := FormatTime
	if relative {
		format = FormatSeconds
	}
	if r.To%1000 == 1 {
		return fmt.Sprintf("from %s through %s", format(r.From), format(r.To-1))
	}
	return fmt.Sprintf("from %s to %s", format(r.From), format(r.To))
}

// warningsName is "1 warning names", "2 warnings name".
func warningsName(n int) string {
	if n == 1 {
		return "1 warning names"
	}
	return fmt.Sprintf("%d warnings name", n)
}
