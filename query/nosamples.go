package query

import (
	"fmt"
	"math"
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
}

func (e *NoSamplesError) Error() string {
	var msg string
	switch {
	case e.Range.From == math.MinInt64:
		msg = "no samples before " + FormatTime(e.Range.To)
	case e.Range.To == math.MaxInt64:
		msg = "no samples at or after " + FormatTime(e.Range.From)
	default:
		msg = fmt.Sprintf("no samples from %s to %s", FormatTime(e.Range.From), FormatTime(e.Range.To))
	}
	if !e.HasData {
		return msg + ": the selected sources hold no samples"
	}
	return fmt.Sprintf("%s for this filter; the selected sources' samples span %s to %s", msg, FormatTime(e.Data.From), FormatTime(e.Data.To))
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
