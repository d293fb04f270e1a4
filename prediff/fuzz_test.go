package prediff

import (
	"errors"
	"strings"
	"testing"

	"github.com/heatscope/heatscope/query"
)

// FuzzParseWindow: any text is a window in range or a ParamError naming
// the parameter, never a panic.
func FuzzParseWindow(f *testing.F) {
	for _, s := range []string{"2s", "500ms", "2.5", "1h", "1h0m1s", "0", "-1s", "1e300", "NaN", "", "0.0001", "9223372036854775807ns"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		ns, err := ParseWindow("window", v)
		var pe *query.ParamError
		switch {
		case err == nil && (ns < MinWindow || ns > MaxWindow):
			t.Fatalf("%q: %d ns accepted, out of range", v, ns)
		case err != nil && (!errors.As(err, &pe) || pe.Param != "window"):
			t.Fatalf("%q: %v is not a ParamError naming window", v, err)
		}
	})
}

// FuzzParseKind: a kind accepted is printable, at most 256 bytes; any
// other is a ParamError naming the parameter.
func FuzzParseKind(f *testing.F) {
	for _, s := range []string{"ena-reset", "cpu-saturation", "", "a b", "x\x00y", "\xff", strings.Repeat("k", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		k, err := ParseKind("kind", v)
		var pe *query.ParamError
		switch {
		case err == nil && (k != v || v == "" || len(v) > 256 || strings.ContainsFunc(v, func(c rune) bool { return c < ' ' })):
			t.Fatalf("%q accepted", v)
		case err != nil && (!errors.As(err, &pe) || pe.Param != "kind"):
			t.Fatalf("%q: %v is not a ParamError naming kind", v, err)
		}
	})
}
