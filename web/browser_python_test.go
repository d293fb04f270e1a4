package web

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// The frames of pythonUIStore's flame graph, one of each kind, as the
// flame graph names them.
const (
	uiPythonFrame  = "Trainer.step (/srv/trainer.py)"
	uiKernelFrame  = "do_syscall_64"
	uiNativeFrame  = "deflate"
	uiJITFrame     = "LFoo;.bar"
	uiUnknownFrame = "[unknown]"
)

// pythonUIStore holds a second of samples of a CPython process (zlib's
// native frames above Trainer.step above the interpreter, and a write
// whose kernel frames sit above Python ones) and of a Java process (a JIT
// frame under an unknown one), stored through a real store.
func pythonUIStore(t *testing.T) *store.DB {
	t.Helper()
	db, err := store.Open(t.TempDir(), store.Options{Source: "host", Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	py := func(fn, file string, line, start uint32) sample.Frame {
		return sample.Frame{Function: fn, Module: file, Kind: sample.KindPython, Line: line, StartLine: start}
	}
	native := func(fn, module string, addr uint64) sample.Frame {
		return sample.Frame{Function: fn, Module: module, Address: addr, Kind: sample.KindUser}
	}
	const interp = "/usr/bin/python3.11"
	root := []sample.Frame{py("main", "/srv/train.py", 41, 40), py("<module>", "/srv/train.py", 60, 1),
		native("Py_RunMain", interp, 0x251000), native("main", interp, 0x252000)}
	compress := append([]sample.Frame{native(uiNativeFrame, "/usr/lib/x86_64-linux-gnu/libz.so.1", 0x3000),
		native("zlib_compress", interp, 0x2a0000), py("Trainer.step", "/srv/trainer.py", 33, 30)}, root...)
	write := append([]sample.Frame{{Function: "vfs_write", Module: sample.KernelModule, Address: 0xffffffff81300000, Kind: sample.KindKernel},
		{Function: uiKernelFrame, Module: sample.KernelModule, Address: 0xffffffff81000100, Kind: sample.KindKernel},
		native("__libc_write", "/usr/lib/x86_64-linux-gnu/libc.so.6", 0x11000), py("Logger.emit", "/usr/lib/python3.11/logging/__init__.py", 1100, 1087)}, root...)
	java := []sample.Frame{{Function: uiUnknownFrame, Module: "[unknown]", Address: 0x7f0000001000, Kind: sample.KindUnknown},
		{Function: uiJITFrame, Module: "/tmp/perf-77.map", Address: 0x7f0000002000, Kind: sample.KindJIT},
		native("JavaMain", "/usr/lib/jvm/lib/libjli.so", 0x4000)}
	if _, err := db.Import("python", 0, func(fn func(*sample.Sample) error) error {
		for i := range 200 {
			s := sample.Sample{Time: (base+1)*1e9 + int64(i)*5e6, CPU: uint32(i % 2), PID: 42, TID: 42, Comm: "python3", Stack: compress}
			switch i % 5 {
			case 3:
				s.Stack = write
			case 4:
				s.PID, s.TID, s.Comm, s.Stack = 77, 77, "java", java
			}
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

// hueOf returns the hue (degrees) and saturation (0 to 1) of an RGB
// colour.
func hueOf(c [3]int) (hue, sat float64) {
	r, g, b := float64(c[0])/255, float64(c[1])/255, float64(c[2])/255
	hi, lo := math.Max(r, math.Max(g, b)), math.Min(r, math.Min(g, b))
	l := (hi + lo) / 2
	if hi == lo {
		return 0, 0
	}
	d := hi - lo
	sat = d / (1 - math.Abs(2*l-1))
	switch hi {
	case r:
		hue = math.Mod((g-b)/d, 6)
	case g:
		hue = (b-r)/d + 2
	default:
		hue = (r-g)/d + 4
	}
	hue *= 60
	if hue < 0 {
		hue += 360
	}
	return hue, sat
}

// TestBrowserFlameGraphKinds: the flame graph colours each frame by its
// kind, and a legend names each colour: a Python frame (named with its
// file) in Python's blues, kernel frames in orange, native in reds, JIT
// in greens, unknown in grey; the legend's swatches are
// those colours, and it hides in a differential graph, coloured by change.
func TestBrowserFlameGraphKinds(t *testing.T) {
	fx := newFixture(t, pythonUIStore(t), Options{})
	b := newBrowser(t)
	b.run("open the python source", chromedp.Navigate(fmt.Sprintf("%s/#source=python&from=%d&to=%d", fx.url, base, base+3)), settled)

	legend := eval[string](t, b.ctx, `(() => { const l = document.getElementById('flame-kinds'); return l.hidden ? '' : l.textContent; })()`)
	if legend != "colour: kind of frame kernel native JIT Python unknown" && legend != "colour: kind of framekernelnativeJITPythonunknown" {
		t.Errorf("flame graph legend %q, want it to name the colour of each kind", legend)
	}
	if drawn := eval[string](t, b.ctx, `document.getElementById('flame').dataset.kinds`); drawn != "jit kernel python unknown user" {
		t.Errorf("kinds drawn %q, want every kind", drawn)
	}
	// The top functions table names each kind as the legend does (the
	// API's kind user is the legend's native), row by row.
	kinds := eval[map[string]string](t, b.ctx, `Object.fromEntries([...document.querySelectorAll('#top tbody tr')].map((tr) => [tr.cells[0].firstChild.textContent, tr.cells[1].textContent]))`)
	for frame, want := range map[string]string{uiPythonFrame: "Python", uiKernelFrame: "kernel", uiNativeFrame: "native", uiJITFrame: "JIT", uiUnknownFrame: "unknown"} {
		if kinds[frame] != want {
			t.Errorf("top table: %q has kind %q, want %q as the legend names it (every row: %q)", frame, kinds[frame], want, kinds)
		}
	}
	// Each kind's hue range and least saturation (kindColour's), checked
	// on the swatch and on the frame's box (a pixel clear of its label).
	ranges := []struct {
		kind, frame string
		lo, hi, sat float64
	}{
		{"python", uiPythonFrame, 195, 225, 0.5},
		{"kernel", uiKernelFrame, 28, 45, 0.6},
		{"user", uiNativeFrame, 0, 16, 0.6},
		{"jit", uiJITFrame, 105, 145, 0.4},
		{"unknown", uiUnknownFrame, 0, 360, 0},
	}
	for _, r := range ranges {
		check := func(where string, c [3]int) {
			t.Helper()
			h, s := hueOf(c)
			if r.kind == "unknown" {
				if s > 0.02 {
					t.Errorf("%s of kind unknown: %v, want grey", where, c)
				}
				return
			}
			if h < r.lo || h > r.hi || s < r.sat {
				t.Errorf("%s of kind %s: %v (hue %.0f, saturation %.2f), want hue %v to %v, saturation at least %v", where, r.kind, c, h, s, r.lo, r.hi, r.sat)
			}
		}
		check("legend swatch", eval[[3]int](t, b.ctx, fmt.Sprintf(`(() => {
			const c = getComputedStyle(document.querySelector('#flame-kinds .swatch[data-kind=%q]')).backgroundColor;
			return c.match(/\d+/g).slice(0, 3).map(Number); })()`, r.kind)))
		boxes := eval[int](t, b.ctx, fmt.Sprintf(`window.heatscope.flameBoxes(%q).length`, r.frame))
		if boxes != 1 {
			t.Errorf("%d boxes named %q, want one", boxes, r.frame)
			continue
		}
		check("the box of "+r.frame, eval[[3]int](t, b.ctx, fmt.Sprintf(`(() => {
			const c = document.getElementById('flame'), dpr = window.devicePixelRatio || 1, bx = window.heatscope.flameBoxes(%q)[0];
			const d = c.getContext('2d').getImageData(Math.floor((bx.x + 1) * dpr), Math.floor((bx.y + 2) * dpr), 1, 1).data;
			return [d[0], d[1], d[2]]; })()`, r.frame)))
	}

	// The Python frame's tooltip names its file and kind.
	b.run("scroll to the flame graph", chromedp.ScrollIntoView(chromedp.CSS("#flame")))
	at := eval[[]float64](t, b.ctx, fmt.Sprintf(`(() => { const r = document.getElementById('flame').getBoundingClientRect(),
		b = window.heatscope.flameBoxes(%q)[0]; return [r.left + b.x + b.w / 2, r.top + b.y + 8]; })()`, uiPythonFrame))
	b.run("hover the Python frame", chromedp.MouseEvent(chromedp.MouseMoved, at[0], at[1]))
	tip := eval[string](t, b.ctx, `document.getElementById('tooltip').hidden ? '' : document.getElementById('tooltip').textContent`)
	if !strings.HasPrefix(tip, uiPythonFrame+"\nPython: ") {
		t.Errorf("the Python frame's tooltip %q, want its name and kind Python, as the legend names it", tip)
	}
	b.screenshot("ui-python-flame.png")
	b.run("leave the graph", chromedp.MouseEvent(chromedp.MouseMoved, 1, 1))
}
