package web

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/heatscope/heatscope/profileio"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// strippedPerfScript is a stripped gzip: 40 samples over 8 unresolved
// addresses of its text (5 each) and 10 in memcpy, all under main, from
// base on, 10 a second.
func strippedPerfScript() string {
	var b strings.Builder
	for i := range 50 {
		fmt.Fprintf(&b, "gzip 77/77 [000] %d.%06d: 10101010 cpu-clock:\n", base+i/10, (i%10)*100000)
		if i < 40 {
			fmt.Fprintf(&b, "\t    %x [unknown] (/usr/bin/gzip)\n", 0x4000+0x100*(i%8))
		} else {
			b.WriteString("\t    7f0000001000 memcpy (/usr/lib/libc.so.6)\n")
		}
		b.WriteString("\t    401000 main (/usr/bin/gzip)\n\n")
	}
	return b.String()
}

func strippedStore(t *testing.T) *store.DB {
	t.Helper()
	db, err := store.Open(t.TempDir(), store.Options{Source: "host", Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Import("gzip", 0, func(fn func(*sample.Sample) error) error {
		return profileio.ReadPerfScript(strings.NewReader(strippedPerfScript()), fn)
	}); err != nil {
		t.Fatal(err)
	}
	return db
}

// TestAPIAddresses checks the addresses parameter of the flame graph,
// differential and top endpoints: unresolved frames are one "[gzip]" by
// default and one frame per address with addresses=show.
func TestAPIAddresses(t *testing.T) {
	fx := newFixture(t, strippedStore(t), Options{})
	type node struct {
		Name  string `json:"name"`
		Value int64  `json:"value"`
		// a differential's CPU time in A, seconds: samples of 10101010 ns
		A        float64 `json:"a"`
		Children []*node `json:"children"`
	}
	underMain := func(target string) map[string]int64 {
		t.Helper()
		resp, body := fx.get(t, target)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", target, resp.StatusCode, body)
		}
		var root node
		if strings.Contains(target, "/api/diff") {
			var d struct{ Root node }
			if err := json.Unmarshal(body, &d); err != nil {
				t.Fatal(err)
			}
			root = d.Root
		} else if err := json.Unmarshal(body, &root); err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, n := range root.Children[0].Children[0].Children {
			out[n.Name] = n.Value + int64(math.Round(n.A/0.01010101))
		}
		return out
	}
	const window = "from=1795237380&to=1795237385"
	const diff = "/api/diff?from=1795237383&to=1795237385&from2=1795237380&to2=1795237382&"
	for _, target := range []string{"/api/flamegraph?" + window, "/api/flamegraph?addresses=group&" + window, diff} {
		if got := underMain(target); len(got) != 2 || got["[gzip]"] != 40 && got["[gzip]"] != 10 {
			t.Errorf("GET %s: under main %v, want [gzip] and memcpy", target, got)
		}
	}
	for _, target := range []string{"/api/flamegraph?addresses=show&" + window, diff + "addresses=show"} {
		got := underMain(target)
		if len(got) != 9 || got["[gzip+0x4700]"] == 0 || got["[gzip]"] != 0 {
			t.Errorf("GET %s: under main %v, want 8 addresses and memcpy", target, got)
		}
	}
	top := func(target string) []string {
		t.Helper()
		var v struct {
			Functions []struct {
				Name string `json:"name"`
			} `json:"functions"`
		}
		resp, body := fx.get(t, target)
		if err := json.Unmarshal(body, &v); resp.StatusCode != http.StatusOK || err != nil {
			t.Fatalf("GET %s: %d %s", target, resp.StatusCode, body)
		}
		var names []string
		for _, f := range v.Functions {
			names = append(names, f.Name)
		}
		slices.Sort(names)
		return names
	}
	if got := top("/api/top?" + window); !slices.Equal(got, []string{"[gzip]", "main", "memcpy"}) {
		t.Errorf("top: %q", got)
	}
	if got := top("/api/top?from2=1795237380&to2=1795237382&from=1795237383&to=1795237385"); !slices.Equal(got, []string{"[gzip]", "main", "memcpy"}) {
		t.Errorf("growth: %q", got)
	}
	if got := top("/api/top?addresses=show&" + window); len(got) != 10 || got[0] != "[gzip+0x4000]" {
		t.Errorf("top with addresses: %q", got)
	}
	for _, target := range []string{"/api/top?addresses=keep&" + window, "/api/flamegraph?addresses=1&" + window, diff + "addresses=SHOW"} {
		resp, body := fx.get(t, target)
		var e errorBody
		if json.Unmarshal(body, &e); resp.StatusCode != http.StatusBadRequest || e.Param != "addresses" {
			t.Errorf("GET %s: %d %s", target, resp.StatusCode, body)
		}
	}
}

// TestBrowserAddresses checks the flame graph's addresses toggle: the
// flame graph and the top table show "[gzip]" until it is ticked, then
// the addresses, and the URL keeps the choice.
func TestBrowserAddresses(t *testing.T) {
	fx := newFixture(t, strippedStore(t), Options{})
	b := newBrowser(t)
	b.openFresh(fx.url + "/")
	names := eval[[]string](t, b.ctx, `window.heatscope.flameNames()`)
	top := eval[string](t, b.ctx, `document.querySelector('#top tbody').textContent`)
	if !slices.Contains(names, "[gzip]") || slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "[gzip+") }) ||
		!strings.Contains(top, "[gzip]") || strings.Contains(top, "[gzip+") {
		t.Fatalf("grouped: flame graph %q, top %q", names, top)
	}
	box := eval[[]map[string]float64](t, b.ctx, `window.heatscope.flameBoxes('[gzip]')`)
	// 40 samples, as CPU time: the width's measure.
	if len(box) != 1 || math.Abs(box[0]["value"]-40*float64(store.DefaultPeriodNs)/1e9) > 1e-9 {
		t.Errorf("[gzip] boxes: %v", box)
	}
	b.run("show addresses", chromedp.Click("#addresses"), settled)
	names = eval[[]string](t, b.ctx, `window.heatscope.flameNames()`)
	top = eval[string](t, b.ctx, `document.querySelector('#top tbody').textContent`)
	if slices.Contains(names, "[gzip]") || !slices.Contains(names, "[gzip+0x4000]") || !slices.Contains(names, "[gzip+0x4700]") ||
		!strings.Contains(top, "[gzip+0x4300]") || b.hashParam("addr") != "1" {
		t.Fatalf("with addresses: flame graph %q, top %q, hash %q", names, top, b.hashParam("addr"))
	}
	if pprof := eval[string](t, b.ctx, `document.getElementById('pprof-link').href`); strings.Contains(pprof, "addresses") {
		t.Errorf("pprof link %s", pprof)
	}
	b.openFresh(fx.url + "/#source=gzip&addr=1")
	if !eval[bool](t, b.ctx, `document.getElementById('addresses').checked`) ||
		!slices.Contains(eval[[]string](t, b.ctx, `window.heatscope.flameNames()`), "[gzip+0x4000]") {
		t.Error("addr=1 in the URL does not show addresses")
	}
}
