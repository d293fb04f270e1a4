package web

import (
	"context"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/heatscope/heatscope/query"
	"github.com/heatscope/heatscope/store"
)

// window is one time range of a request whose answer may be empty: its
// name in a message ("" for the only one), and whether its answer is.
type window struct {
	name  string
	r     store.Range
	empty bool
}

// explain says why the windows of a request that hold no sample hold
// none, as the answer's message (query.Explain: the node filter keeps no
// node, no data in the window, all of it idle, the filter matched none of
// its N samples, data not read), with the storage's outage when it does
// not answer; "" when every window holds samples. warnings are the
// answer's; the counting's are added.
func (s *Server) explain(ctx context.Context, p *params, f *store.Filter, warnings store.Warnings, windows ...window) (string, store.Warnings, error) {
	var parts []string
	for _, w := range windows {
		if !w.empty {
			continue
		}
		e, more, err := query.Explain(ctx, s.db, w.r, f, query.DescribeFilter(p.get), warnings)
		if err != nil {
			return "", more, fmt.Errorf("explain an empty answer: %w", err)
		}
		warnings = more
		if w.name != "" {
			parts = append(parts, w.name+": "+e.Error())
		} else {
			parts = append(parts, e.Error())
		}
	}
	if len(parts) == 0 {
		return "", warnings, nil
	}
	msg := sentence(strings.Join(parts, "; "))
	if o := s.outage(); o != nil {
		msg += " " + sentence(o.stale())
	}
	return msg, warnings, nil
}

// sentence writes msg as a sentence: capitalized, with a full stop.
func sentence(msg string) string {
	r, n := utf8.DecodeRuneInString(msg)
	return string(unicode.ToUpper(r)) + msg[n:] + "."
}
