package prediff

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/heatscope/heatscope/events"
	"github.com/heatscope/heatscope/query"
)

// MinWindow is the shortest window ParseWindow takes.
const MinWindow = int64(time.Millisecond)

// ParseWindow parses the window parameter: a Go duration ("2s", "500ms")
// or a number of seconds ("2.5"), from MinWindow to MaxWindow. Errors are
// *query.ParamError naming param.
func ParseWindow(param, v string) (int64, error) {
	if v == "" {
		return 0, &query.ParamError{Param: param, Err: errors.New("required: the length of the window before each event, like 2s")}
	}
	return query.ParseDuration(param, v, MinWindow, MaxWindow)
}

// ParseKind checks an event kind parameter: 1 to events.MaxLabelValLen
// bytes of UTF-8 without control characters, as an event's kind label
// may be.
func ParseKind(param, v string) (string, error) {
	if v == "" {
		return "", &query.ParamError{Param: param, Err: fmt.Errorf("required: an event kind like ena-reset or cpu-saturation (see /api/fleet/events)")}
	}
	if len(v) > events.MaxLabelValLen {
		return "", &query.ParamError{Param: param, Err: fmt.Errorf("%d characters, at most %d", len(v), events.MaxLabelValLen)}
	}
	if !utf8.ValidString(v) || strings.IndexFunc(v, func(c rune) bool { return c < ' ' || c == 0x7f }) >= 0 {
		return "", &query.ParamError{Param: param, Err: fmt.Errorf("%q: not printable text", query.Clip(v))}
	}
	return v, nil
}
