// Command ui measures how fast the web UI draws, in headless chromium,
// against the targets: the heatmap of a 10-minute span drawn within
// 1 s of its response arriving, and the flame graph of 50 000 distinct
// stacks within 500 ms.
//
//	go run ./bench/ui [-dir /var/tmp/heatscope-bench-ui] [-runs 9] [-minutes 60]
//
// It builds (once) a store of synthetic samples (internal/synth: 64 CPUs at
// 99 Hz, 60 000 distinct stacks), serves it with package web, opens the UI
// and reloads each view -runs times as a user action would
// (window.heatscope.load), reading the UI's own performance measures: from
// the response's last byte to the JavaScript drawing done (":draw") and to
// the next frame painted (":paint"). Then it times, in the same page, the
// decoding alone of the flame graph's two encodings: JSON.parse of the
// nested JSON and the UI's decodeTree of encoding=compact. It prints the
// medians (and min/max) as markdown; figures from a noisy machine vary, so
// compare medians.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/heatscope/heatscope/bench/internal/benchweb"
	"github.com/heatscope/heatscope/internal/browsertest"
	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/query"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

const (
	cpus = 64
	hz   = 99
	// distinctStacks is the flame graph target's size.
	distinctStacks = 50_000
	heatmapSpan    = 600 // seconds: the heatmap target's span
)

func main() {
	log.SetFlags(0)
	dir := flag.String("dir", "/var/tmp/heatscope-bench-ui", "data directory (built on first use)")
	runs := flag.Int("runs", 9, "draws per view")
	minutes := flag.Float64("minutes", 60, "minutes of samples to generate when building the store")
	chromium := flag.String("chromium", "chromium", "the browser to drive")
	flag.Parse()
	if err := run(*dir, *runs, *minutes, *chromium); err != nil {
		log.Fatal(err)
	}
}

func run(dir string, runs int, minutes float64, chromium string) error {
	if _, err := os.Stat(filepath.Join(dir, "blocks")); err != nil {
		if err := generate(dir, minutes); err != nil {
			return fmt.Errorf("generate the store: %w", err)
		}
	}
	db, err := store.Open(dir, store.Options{ReadOnly: true, Logger: benchweb.Quiet()})
	if err != nil {
		return err
	}
	defer db.Close()
	var src store.SourceInfo
	for _, s := range db.Sources() {
		if s.Name == "synthetic" {
			src = s
		}
	}
	if src.Samples == 0 {
		return fmt.Errorf("%s holds no synthetic samples: remove it to rebuild", dir)
	}
	first := float64(src.First/1e9 + 1)
	if float64(src.Last)/1e9-first < heatmapSpan {
		return fmt.Errorf("%s holds less than %d s of samples: remove it to rebuild", dir, heatmapSpan)
	}
	flameTo, stacks, err := flameWindow(db, src)
	if err != nil {
		return err
	}

	base, stop, err := benchweb.Serve(db)
	if err != nil {
		return err
	}
	defer stop()
	bctx, exe, done, err := benchweb.Browser(chromium, 1300, 1000, 30*time.Minute)
	if err != nil {
		return err
	}
	defer done()

	fmt.Printf("UI drawing in headless %s, medians of %d draws (min-max), from the response's last byte:\n\n", filepath.Base(exe), runs)
	fmt.Println("| view | size | response | drawn (JS) | painted | target |")
	fmt.Println("|---|---|---|---|---|---|")
	base += "/#source=synthetic"

	// The heatmap of 10 minutes; the selection is one second, so that the
	// flame graph loading with the page stays small.
	url := fmt.Sprintf("%s&from=%.0f&to=%.0f&rows=50&sf=%.0f&st=%.0f", base, first, first+heatmapSpan, first, first+1)
	res, err := measure(bctx, url, "heatmap", "window.heatscope.load.heatmap()", runs)
	if err != nil {
		return err
	}
	shape, err := chromedp.Run(bctx, chromedp.Evaluate[[]int](`(() => { const h = window.heatscope.heatmap();
		return [h.columns.length, h.rows.length, h.values.flat().reduce((a, b) => a + b, 0)]; })()`))
	if err != nil {
		return err
	}
	res.print("heatmap, 10 min span", fmt.Sprintf("%d columns × %d rows, %d samples", shape[0], shape[1], shape[2]), "≤ 1000 ms")

	// The flame graph of a selection holding distinctStacks distinct stacks.
	url = fmt.Sprintf("%s&from=%.0f&to=%.0f&rows=50&sf=%.0f&st=%.0f", base, first, first+60, first, flameTo)
	res, err = measure(bctx, url, "flame", "window.heatscope.load.selection()", runs)
	if err != nil {
		return err
	}
	res.print(fmt.Sprintf("flame graph, %.0f s selection", flameTo-first), fmt.Sprintf("%d distinct stacks", stacks), "≤ 500 ms")

	// The decoding alone, both encodings of the same tree in the same page.
	dec, err := measureDecode(bctx, fmt.Sprintf("source=synthetic&from=%.0f&to=%.0f", first, flameTo), runs)
	if err != nil {
		return err
	}
	fmt.Printf("\nDecoding the flame graph's answer in the page, medians of %d (min-max):\n\n", runs)
	fmt.Println("| encoding | bytes | nodes | decode | ratio to nested JSON |")
	fmt.Println("|---|---|---|---|---|")
	fmt.Printf("| nested JSON, JSON.parse | %.1f MB | %.0f | %s | 1 |\n", dec.jsonBytes/1e6, dec.nodes, benchweb.Stat(dec.json))
	fmt.Printf("| compact, decodeTree | %.1f MB | %.0f | %s | %.3f |\n", dec.compactBytes/1e6, dec.nodes, benchweb.Stat(dec.compact),
		benchweb.Median(dec.compact)/benchweb.Median(dec.json))
	fmt.Printf("\nstore: %s, %d samples of %d CPUs at %d Hz\n", dir, src.Samples, cpus, hz)
	return nil
}

// generate builds the store: minutes of synth samples ending at the last
// whole hour (recent, so that no retention drops them).
func generate(dir string, minutes float64) error {
	db, err := store.Open(dir, store.Options{Source: "bench-ui", Logger: benchweb.Quiet()})
	if err != nil {
		return err
	}
	defer db.Close()
	end := time.Now().Truncate(time.Hour)
	start := end.Add(-time.Duration(minutes * float64(time.Minute)))
	g := synth.New(synth.Config{CPUs: cpus, Hz: hz, Start: start.UnixNano(), Seconds: minutes * 60, Stacks: 60_000, Seed: 7})
	st, err := db.Import("synthetic", sample.PeriodOf(hz), g.Feed)
	if err != nil {
		return err
	}
	db.Maintain()
	fmt.Fprintf(os.Stderr, "generated %d samples in %s\n", st.Samples, dir)
	return nil
}

// flameWindow finds the shortest whole-second selection from the source's
// first whole second whose flame graph holds at least distinctStacks
// distinct stacks (nodes where samples end), doubling then bisecting.
func flameWindow(db *store.DB, src store.SourceInfo) (to float64, stacks int, err error) {
	first := src.First/1e9 + 1
	count := func(secs int64) (int, error) {
		r := store.Range{From: first * 1e9, To: (first + secs) * 1e9}
		root, _, err := query.FlameGraphOf(context.Background(), db, r, &store.Filter{})
		if err != nil {
			return 0, err
		}
		n := 0
		var walk func(*query.Node)
		walk = func(nd *query.Node) {
			if nd.Self > 0 {
				n++
			}
			for _, c := range nd.Children {
				walk(c)
			}
		}
		walk(root)
		return n, nil
	}
	lo, hi := int64(0), int64(1)
	for {
		n, err := count(hi)
		if err != nil {
			return 0, 0, err
		}
		if n >= distinctStacks {
			stacks = n
			break
		}
		if (first+hi*2)*1e9 > src.Last {
			return 0, 0, fmt.Errorf("the store holds only %d distinct stacks: remove it and build a longer one (-minutes)", n)
		}
		lo, hi = hi, hi*2
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		n, err := count(mid)
		if err != nil {
			return 0, 0, err
		}
		if n >= distinctStacks {
			hi, stacks = mid, n
		} else {
			lo = mid
		}
	}
	return float64(first + hi), stacks, nil
}

// result holds one view's timings in milliseconds.
type result struct {
	response, draw, paint []float64
	// bytes is the size of the last response's body.
	bytes float64
}

func (r result) print(view, size, target string) {
	fmt.Printf("| %s | %s, %.1f MB | %s | %s | %s | %s |\n", view, size, r.bytes/1e6, benchweb.Stat(r.response), benchweb.Stat(r.draw), benchweb.Stat(r.paint), target)
}

// decoding holds the decoding times of both encodings of one flame graph.
type decoding struct {
	json, compact                  []float64
	jsonBytes, compactBytes, nodes float64
}

// measureDecode fetches /api/flamegraph?query in both encodings into the
// open page and times, runs times each, JSON.parse of the nested JSON
// (its text already decoded) and the UI's decodeTree of the compact one.
func measureDecode(ctx context.Context, query string, runs int) (decoding, error) {
	js := fmt.Sprintf(`(async () => {
		const m = await import('/ui/flame.js');
		const text = await (await fetch('/api/flamegraph?%[1]s')).text();
		const buf = await (await fetch('/api/flamegraph?%[1]s&encoding=compact')).arrayBuffer();
		const json = [], compact = [];
		let nodes = 0;
		for (let i = 0; i < %[2]d; i++) {
			let t0 = performance.now();
			JSON.parse(text);
			json.push(performance.now() - t0);
			t0 = performance.now();
			nodes = m.decodeTree(buf).n;
			compact.push(performance.now() - t0);
		}
		return [...json, ...compact, new TextEncoder().encode(text).length, buf.byteLength, nodes];
	})()`, query, runs)
	v, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](js, chromedp.EvalAwaitPromise))
	if err != nil {
		return decoding{}, fmt.Errorf("decode: %w", err)
	}
	return decoding{json: v[:runs], compact: v[runs : 2*runs], jsonBytes: v[2*runs], compactBytes: v[2*runs+1], nodes: v[2*runs+2]}, nil
}

// measure opens url, then reloads the view runs times with load (a
// promise), reading the performance measures name+":draw" and
// name+":paint" and the response time of the view's last request.
func measure(ctx context.Context, url, name, load string, runs int) (result, error) {
	settled := browsertest.Until(`document.body.dataset.ready === '1' && document.body.dataset.busy === '0'`, 10*time.Minute)
	if err := chromedp.Do(ctx, chromedp.Navigate(url), settled); err != nil {
		return result{}, fmt.Errorf("open %s: %w", url, err)
	}
	if msg, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('status').classList.contains('error') ? document.getElementById('status').textContent : ''`)); err != nil || msg != "" {
		return result{}, fmt.Errorf("the UI failed: %q %v", msg, err)
	}
	var res result
	for range runs {
		// wait for the paint measure, set after the next frame
		js := fmt.Sprintf(`(async () => {
			performance.clearResourceTimings();
			const n = performance.getEntriesByName(%[1]q).length;
			await %[2]s;
			while (performance.getEntriesByName(%[1]q).length === n) await new Promise((r) => setTimeout(r, 5));
			const last = (name) => performance.getEntriesByName(name).at(-1);
			const req = performance.getEntriesByType('resource').filter((e) => e.name.includes('/api/' + (%[3]q === 'heatmap' ? 'heatmap' : 'flamegraph'))).at(-1);
			return [req.responseEnd - req.requestStart, last(%[3]q + ':draw').duration, last(%[1]q).duration, req.encodedBodySize];
		})()`, name+":paint", load, name)
		v, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](js, chromedp.EvalAwaitPromise))
		if err != nil {
			return res, fmt.Errorf("draw %s: %w", name, err)
		}
		res.response = append(res.response, v[0])
		res.draw = append(res.draw, v[1])
		res.paint = append(res.paint, v[2])
		res.bytes = v[3]
	}
	return res, nil
}
