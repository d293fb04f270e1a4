package prediff

import (
	"fmt"
	"math"
	"strconv"
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
	bad := func(format string, args ...any) error {
		return &query.ParamError{Param: param, Err: fmt.Errorf(format, args...)}
	}
	if v == "" {
		return 0, bad("required: the length of the window before each event, like 2s")
	}
	var ns int64
	if d, err := time.ParseDuration(v); err == nil {
		ns = int64(d)
	} else if s, err := strconv.ParseFloat(v, 64); err == nil && !math.IsNaN(s) && !math.IsInf(s, 0) && math.Abs(s) < 1e9 {
		ns = int64(math.Round(s * 1e9))
	} else {
		return 0, bad("%q is not a duration like 2s or a number of seconds", clip(v))
	}
	if ns < MinWindow || ns > MaxWindow {
		return 0, bad("%q is out of range: want %v to %v", clip(v), time.Duration(MinWindow), time.Duration(MaxWindow))
	}
	return ns, nil
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
		return "", &query.ParamError{Param: param, Err: fmt.Errorf("%q: not printable text", clip(v))}
	}
	return v, nil
}

// clip shortens a value echoed in an error.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
