package query

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/heatscope/heatscope/store"
)

// NoSamplesError says that a range holds no sample for a filter, and where
// the selected sources' samples do start and end.
type NoSamplesError struct {
	// Range is the range asked for; From is math.MinInt64 when it has no
	// start (before To), To math.MaxInt64 when it has no end.
	Range store.Range
	// Data spans the selected sources' samples, from the first to just
	// after the last; HasData is false when they hold none.
	Data    store.Range
	HasData bool
	// Relative is true when the selected sources' times are their
	// capture's own clock (Relative): times are written as seconds on it,
	// never as dates in 1970.
	Relative bool
}

func (e *NoSamplesError) Error() string {
	format := FormatTime
	if e.Relative {
		format = FormatSeconds
	}
	var msg string
	switch {
	case e.Range.From == math.MinInt64 && e.Range.To == math.MaxInt64:
		msg = "no samples"
	case e.Range.From == math.MinInt64:
		msg = "no samples before " + format(e.Range.To)
	case e.Range.To == math.MaxInt64:
		msg = "no samples at or after " + format(e.Range.From)
	default:
		msg = fmt.Sprintf("no samples from %s to %s", format(e.Range.From), format(e.Range.To))
	}
	if !e.HasData {
		return msg + ": the selected sources hold no samples"
	}
	msg = fmt.Sprintf("%s for this filter; the selected sources' samples span %s to %s", msg, format(e.Data.From), format(e.Data.To-1))
	if e.Relative {
		msg += " (their capture's own clock, in seconds: no wall time)"
	}
	return msg
}

// FormatSeconds writes a time on a capture's own clock (Unix nanoseconds
// that are not wall time) as seconds, as ParseTime reads them back:
// "100.01 s".
func FormatSeconds(ns int64) string {
	return strconv.FormatFloat(float64(ns)/1e9, 'f', -1, 64) + " s"
}

// Relative reports whether the sources that sources names (all when empty)
// hold samples and all of them keep their capture's own clock, not wall
// time (perf scripts imported without one).
func Relative(list []store.SourceInfo, sources []string) bool {
	some := false
	for _, s := range list {
		if len(sources) > 0 && !contains(sources, s.Name) || s.Samples == 0 {
			continue
		}
		if !s.Relative {
			return false
		}
		some = true
	}
	return some
}

// UnknownSources returns an error naming the sources of names that list
// does not hold, with those it does, or nil.
func UnknownSources(list []store.SourceInfo, names []string) error {
	held := make([]string, 0, len(list))
	for _, s := range list {
		held = append(held, s.Name)
	}
	return unknown("source", held, names)
}

// UnknownNodes returns an error naming the nodes of names that list does
// not hold, with those it does, or nil: a node name mistyped in a filter
// is named as such, not taken for a node without samples.
func UnknownNodes(list []store.NodeInfo, names []string) error {
	held := make([]string, 0, len(list))
	for _, n := range list {
		held = append(held, n.Name)
	}
	return unknown("node", held, names)
}

// unknown returns an error naming the names that held lacks, what they
// are (a source, a node), and what held has, or nil.
func unknown(what string, held, names []string) error {
	var missing []string
	for _, n := range names {
		if !contains(held, n) {
			missing = append(missing, strconv.Quote(n))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if len(held) == 0 {
		return fmt.Errorf("no %s %s: the data holds none yet", what, strings.Join(missing, ", "))
	}
	return fmt.Errorf("no %s %s: the data holds %s", what, strings.Join(missing, ", "), strings.Join(held, ", "))
}

// FormatTime writes Unix nanoseconds as RFC 3339 in UTC, as ParseTime reads
// them back.
func FormatTime(ns int64) string { return time.Unix(0, ns).UTC().Format(time.RFC3339Nano) }

// Span is the time range of the sources that sources names (all when
// empty), from the first sample to just after the last; ok is false when
// they hold no samples.
func Span(list []store.SourceInfo, sources []string) (r store.Range, ok bool) {
	for _, s := range list {
		if len(sources) > 0 && !contains(sources, s.Name) {
			continue
		}
		if !ok {
			r, ok = store.Range{From: s.First, To: s.Last + 1}, true
		}
		r.From, r.To = min(r.From, s.First), max(r.To, s.Last+1)
	}
	return r, ok
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
