package web

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// unwoundStore holds five samples of one stack, main → caller → hot_leaf,
// whose caller (named like markup) was found with unwind tables in three,
// with frame pointers in one, and not in a table walk in the last: the
// caller is one flame graph node, 20% of whose samples reached it by
// frame pointers; main never was.
func unwoundStore(t *testing.T) *store.DB {
	t.Helper()
	db, err := store.Open(t.TempDir(), store.Options{Source: "host", Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	const table, fp, none = sample.MethodTable, sample.MethodFP, sample.MethodNotKnown
	methods := [][2]sample.Method{{table, table}, {table, table}, {table, table}, {fp, table}, {none, none}}
	if _, err := db.Import("unwound", 0, func(fn func(*sample.Sample) error) error {
		for i, m := range methods {
			s := sample.Sample{Time: (base+1)*1e9 + int64(i)*1e8, PID: 42, TID: 42, Comm: "unwound", Stack: []sample.Frame{
				{Function: "hot_leaf", Module: "/usr/bin/unwound", Address: 0x1010, Kind: sample.KindUser},
				{Function: xssName, Module: "/usr/bin/unwound", Address: 0x1020, Kind: sample.KindUser, Method: m[0]},
				{Function: "main", Module: "/usr/bin/unwound", Address: 0x1030, Kind: sample.KindUser, Method: m[1]},
			}}
			if err := fn(&s); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return db
}

// TestBrowserUnwindTooltip: hovering a flame graph node whose frame some
// samples reached by frame pointers in a walk with unwind tables says
// their share; a node never reached that way says nothing of it. The
// frame reached both ways is one box, and its markup-like name stays
// text.
func TestBrowserUnwindTooltip(t *testing.T) {
	fx := newFixture(t, unwoundStore(t), Options{})
	b := newBrowser(t)
	b.run("open the unwound source", chromedp.Navigate(fmt.Sprintf("%s/#source=unwound&from=%d&to=%d", fx.url, base, base+3)), settled)
	hover := func(name string) string {
		t.Helper()
		n := eval[int](t, b.ctx, fmt.Sprintf(`window.heatscope.flameBoxes(%q).length`, name))
		if n != 1 {
			t.Fatalf("%d boxes named %s, want one", n, name)
		}
		b.run("scroll to the flame graph", chromedp.ScrollIntoView(chromedp.CSS("#flame")))
		at := eval[[]float64](t, b.ctx, fmt.Sprintf(`(() => { const r = document.getElementById('flame').getBoundingClientRect(),
			b = window.heatscope.flameBoxes(%q)[0]; return [r.left + b.x + b.w / 2, r.top + b.y + 8]; })()`, name))
		b.run("hover "+name, chromedp.MouseEvent(chromedp.MouseMoved, at[0], at[1]))
		tip := eval[string](t, b.ctx, `document.getElementById('tooltip').hidden ? '' : document.getElementById('tooltip').textContent`)
		if name == xssName {
			b.screenshot("ui-unwind-tooltip.png")
		}
		b.run("leave the graph", chromedp.MouseEvent(chromedp.MouseMoved, 1, 1))
		return tip
	}
	caller := hover(xssName)
	if !strings.HasPrefix(caller, xssName+"\nnative: ") || !strings.HasSuffix(caller, "\n5 samples, self 0\nreached by frame pointers: 20.00% of its samples") {
		t.Errorf("the caller's tooltip %q does not say that 1 of its 5 samples reached it by frame pointers", caller)
	}
	for _, name := range []string{"main", "hot_leaf"} {
		if tip := hover(name); !strings.HasPrefix(tip, name+"\n") || strings.Contains(tip, "frame pointers") {
			t.Errorf("%s's tooltip %q: want one that says nothing of frame pointers", name, tip)
		}
	}
	if n := eval[int](t, b.ctx, `document.querySelectorAll('img').length + document.getElementById('tooltip').children.length`); n != 0 {
		t.Errorf("the markup-like name made %d elements", n)
	}
}
