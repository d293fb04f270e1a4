// Command overview measures the fleet overview (GET /api/fleet/overview
// and the UI's fleet page, web/ui/fleet.js) over a large fleet: by
// default 500 nodes × 24 h × 8 CPUs, against the target of the
// overview drawn within 1 s.
//
//	go run ./bench/overview [-dir /var/tmp/heatscope-bench-overview] [-nodes 500] [-hours 24] [-runs 9]
//
// It builds (once) a data directory: one node's day of synthetic samples
// (internal/synth, 8 CPUs at -hz, imported through the store's block
// writer as blocks of 4 M samples, format version 4 with the per-CPU
// summary) whose blocks are then hard-linked once per node, each copy
// with a meta.json of its own (node name, zone label, block id): the
// overview reads every node's blocks separately, so its cost is that of
// distinct data, though the samples of all nodes are the same. A day per
// node in a few blocks is what the bucket compactor leaves (2 h, then
// 24 h ranges).
//
// It serves the directory with package web and measures, as medians of
// -runs (min-max): the API's answer cold (the first request after the
// start: every block's per-CPU summary section read) and warm, in the
// compact encoding the UI asks for and in JSON; cold again on a store
// opened afresh, against the first request after serve's start-up warming
// (web.Server.WarmFleetOverview) finished, and how long that warming
// took; and in headless chromium,
// the fleet page's load as a click on Apply does it (request, response,
// decoding and drawing of every row, and the part after the body
// arrived), and its drawing alone (a sort change). The machine is shared:
// compare medians, and read them with the load average printed beside
// them. -cpuprofile profiles the run (server and client).
package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/heatscope/heatscope/bench/internal/benchweb"
	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/store"
	"github.com/heatscope/heatscope/web"
)

func main() {
	log.SetFlags(0)
	dir := flag.String("dir", "/var/tmp/heatscope-bench-overview", "data directory (built on first use; remove it to rebuild)")
	nodes := flag.Int("nodes", 500, "nodes")
	hours := flag.Float64("hours", 24, "hours per node")
	cpus := flag.Int("cpus", 8, "CPUs per node")
	hz := flag.Int("hz", 10, "sampling rate of the synthetic samples (the summaries' size hardly depends on it)")
	runs := flag.Int("runs", 9, "repeats per measure")
	columns := flag.Int("columns", 0, "columns asked of the API (0: as many as the UI asks for at 1300 px)")
	chromium := flag.String("chromium", "chromium", "the browser to drive")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run (the server is in this process) to this file")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(*dir, *nodes, *hours, *cpus, *hz, *runs, *columns, *chromium); err != nil {
		pprof.StopCPUProfile()
		log.Fatal(err)
	}
}

func run(dir string, nodes int, hours float64, cpus, hz, runs, columns int, chromium string) error {
	if _, err := os.Stat(filepath.Join(dir, "blocks")); err != nil {
		if err := generate(dir, nodes, hours, cpus, hz); err != nil {
			return fmt.Errorf("generate: %w", err)
		}
	}
	start := time.Now()
	db, err := store.Open(dir, store.Options{ReadOnly: true, Logger: benchweb.Quiet()})
	if err != nil {
		return err
	}
	defer db.Close()
	opened := time.Since(start)
	list := db.Nodes()
	if len(list) != nodes {
		return fmt.Errorf("%s holds %d nodes, not %d: remove it to rebuild", dir, len(list), nodes)
	}
	st := db.Stats()

	base, stop, err := benchweb.Serve(db)
	if err != nil {
		return err
	}
	defer stop()

	// The UI asks for as many columns as fit: at 1300 px, 1300 - 2 - 180
	// (names) over 3 px.
	if columns == 0 {
		columns = (1300 - 32 - 2 - 180) / 3
	}
	api := fmt.Sprintf("%s/api/fleet/overview?columns=%d", base, columns)
	load := func() { fmt.Printf("load average: %s\n", benchweb.LoadAverage()) }

	fmt.Printf("# Fleet overview: %d nodes × %.0f h × %d CPUs (%d blocks, %s)\n\n", nodes, hours, cpus, st.Blocks, dir)
	load()
	fmt.Printf("store opened in %v (block metas and chunk indexes)\n\n", opened.Round(time.Millisecond))
	// The UI asks for the compact encoding; the JSON one is the API's
	// default.
	cold, compactSize, err := get(api+"&encoding=compact", compactAnswer)
	if err != nil {
		return err
	}
	var warm, warmJSON []float64
	var jsonSize int
	for range runs {
		d, _, err := get(api+"&encoding=compact", compactAnswer)
		if err != nil {
			return err
		}
		warm = append(warm, d)
		d, jsonSize, err = get(api, jsonAnswer)
		if err != nil {
			return err
		}
		warmJSON = append(warmJSON, d)
	}
	// The first request after a start, -runs times, each on a store
	// opened afresh: without warming, and once serve's warming (at the
	// step of this overview) finished; and how long the warming took.
	var colds, warmings, afterWarm, otherStep []float64
	for range runs {
		d, err := firstRequest(dir, api, columns, false)
		if err != nil {
			return err
		}
		colds = append(colds, d[0])
		if d, err = firstRequest(dir, api, columns, true); err != nil {
			return err
		}
		warmings, afterWarm, otherStep = append(warmings, d[0]), append(afterWarm, d[1]), append(otherStep, d[2])
	}
	fmt.Println("| measure | median (min-max) |")
	fmt.Println("|---|---|")
	fmt.Printf("| API, cold (first request: every block's per-CPU summary read) | %.0f ms |\n", cold)
	fmt.Printf("| API, cold, on a store opened afresh (%d runs, no warming) | %s |\n", runs, benchweb.Stat(colds))
	fmt.Printf("| warming at start (%d blocks' per-CPU summaries, one goroutine, %d runs) | %s |\n", st.Blocks, runs, benchweb.Stat(warmings))
	fmt.Printf("| API, first request after the warming finished (%d runs) | %s |\n", runs, benchweb.Stat(afterWarm))
	fmt.Printf("| API, then one in %d columns (another step: not warm, %d runs) | %s |\n", otherColumns(columns), runs, benchweb.Stat(otherStep))
	fmt.Printf("| API, warm, compact encoding as the UI asks (%d runs) | %s |\n", runs, benchweb.Stat(warm))
	fmt.Printf("| API, warm, JSON (%d runs) | %s |\n", runs, benchweb.Stat(warmJSON))
	fmt.Printf("| answer, %d columns | compact %.1f MB, JSON %.1f MB |\n", columns, float64(compactSize)/1e6, float64(jsonSize)/1e6)

	bctx, exe, done, err := benchweb.Browser(chromium, 1300, 1000, 20*time.Minute)
	if err != nil {
		return err
	}
	defer done()
	ready := chromedp.Poll[chromedp.Void](`document.body.dataset.fleetReady === '1'`, chromedp.WithPollingTimeout(5*time.Minute))
	if err := chromedp.Do(bctx, chromedp.Navigate(base+"/#fleet"), ready); err != nil {
		return err
	}
	rows, err := chromedp.Run(bctx, chromedp.Evaluate[int](`window.heatscopeFleet.rows().length`))
	if err != nil || rows != nodes {
		return fmt.Errorf("the page drew %d rows, want %d (%v)", rows, nodes, err)
	}
	// A reload as Apply does it, and a redraw as a sort change does it.
	var loaded, received, decoded, drawn []float64
	for i := range runs {
		v, err := chromedp.Run(bctx, chromedp.Evaluate[[]float64](`(async () => { const t0 = performance.now();
			await window.heatscopeFleet.load(); const t1 = performance.now();
			const got = performance.getEntriesByName('received /api/fleet/overview').at(-1).startTime;
			return [t1 - t0, got - t0, performance.getEntriesByName('fleet:draw').at(-1).duration]; })()`, chromedp.EvalAwaitPromise))
		if err != nil {
			return err
		}
		loaded, received, decoded = append(loaded, v[0]), append(received, v[1]), append(decoded, v[2])
		sort := []string{"name", "events", "peak"}[i%3]
		d, err := chromedp.Run(bctx, chromedp.Evaluate[float64](fmt.Sprintf(`(() => { const e = document.getElementById('fleet-sort');
			const t0 = performance.now(); e.value = %q; e.dispatchEvent(new Event('change')); return performance.now() - t0; })()`, sort)))
		if err != nil {
			return err
		}
		drawn = append(drawn, d)
	}
	fmt.Printf("| UI in headless %s: request to every row drawn (as Apply, %d runs) | %s |\n", filepath.Base(exe), runs, benchweb.Stat(loaded))
	fmt.Printf("| UI: of which the request, to the body received | %s |\n", benchweb.Stat(received))
	fmt.Printf("| UI: of which the body decoded and every row drawn | %s |\n", benchweb.Stat(decoded))
	fmt.Printf("| UI: drawing alone (a sort change, %d runs) | %s |\n", runs, benchweb.Stat(drawn))
	fmt.Println()
	load()
	return nil
}

// firstRequest opens the store in dir afresh, serves it, and times (ms)
// its first compact overview request to api's path; with warm, first the
// warming serve does at start (web.Server.WarmFleetOverview in columns
// columns), returned as the first figure, the request as the second, and
// a request in other columns (another step, which the warming does not
// cover) as the third.
func firstRequest(dir, api string, columns int, warm bool) ([3]float64, error) {
	var out [3]float64
	db, err := store.Open(dir, store.Options{ReadOnly: true, Logger: benchweb.Quiet()})
	if err != nil {
		return out, err
	}
	defer db.Close()
	srv, err := web.New(db, web.Options{Logger: benchweb.Quiet()})
	if err != nil {
		return out, err
	}
	if warm {
		res, err := srv.WarmFleetOverview(context.Background(), columns)
		if err != nil {
			return out, err
		}
		if res.Pending > 0 || res.Warmed == 0 {
			return out, fmt.Errorf("warming left %d blocks pending, warmed %d", res.Pending, res.Warmed)
		}
		out[0] = float64(res.Took.Microseconds()) / 1000
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	u, err := url.Parse(api)
	if err != nil {
		return out, err
	}
	reads := db.Stats().CPUSummaryReads
	d, _, err := get(ts.URL+u.RequestURI()+"&encoding=compact", compactAnswer)
	if err != nil {
		return out, err
	}
	if more := db.Stats().CPUSummaryReads - reads; warm && more > 0 {
		return out, fmt.Errorf("the first request after warming read %d per-CPU summaries", more)
	}
	out[1] = d
	if !warm {
		out[0] = d
		return out, nil
	}
	other := strings.Replace(u.RequestURI(), fmt.Sprintf("columns=%d", columns), fmt.Sprintf("columns=%d", otherColumns(columns)), 1)
	if out[2], _, err = get(ts.URL+other+"&encoding=compact", compactAnswer); err != nil {
		return out, err
	}
	return out, nil
}

// otherColumns is a column count near columns whose step differs: the
// UI in a window 100 px narrower.
func otherColumns(columns int) int { return max(columns-33, 1) }

// get fetches url and returns how long it took (ms) and the body's size,
// after check found the body an overview with nodes.
func get(url string, check func([]byte) error) (float64, int, error) {
	t0 := time.Now()
	resp, err := http.Get(url)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	ms := float64(time.Since(t0).Microseconds()) / 1000
	if err != nil {
		return 0, 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("%s: %d %s", url, resp.StatusCode, b)
	}
	if err := check(b); err != nil {
		return 0, 0, fmt.Errorf("%s: %w: %.200q", url, err, b)
	}
	return ms, len(b), nil
}

// jsonAnswer checks a JSON overview holds nodes.
func jsonAnswer(b []byte) error {
	var ov struct {
		Nodes []json.RawMessage `json:"nodes"`
	}
	if err := json.Unmarshal(b, &ov); err != nil || len(ov.Nodes) == 0 {
		return fmt.Errorf("no node in the answer (%v)", err)
	}
	return nil
}

// compactAnswer checks a compact overview holds nodes.
func compactAnswer(b []byte) error {
	if len(b) < 16 || string(b[:4]) != "HSO1" || binary.LittleEndian.Uint32(b[4:]) == 0 {
		return fmt.Errorf("not a compact overview with nodes")
	}
	return nil
}

// generate writes one node's hours of synthetic samples into dir/template,
// then hard-links its blocks into dir/blocks once per node with a meta of
// that node's.
func generate(dir string, nodes int, hours float64, cpus, hz int) error {
	tpl := filepath.Join(dir, "template")
	if err := os.RemoveAll(tpl); err != nil {
		return err
	}
	db, err := store.Open(tpl, store.Options{Source: "template", Logger: benchweb.Quiet()})
	if err != nil {
		return err
	}
	end := time.Now().Truncate(time.Hour)
	g := synth.New(synth.Config{CPUs: cpus, Hz: hz, Start: end.Add(-time.Duration(hours * float64(time.Hour))).UnixNano(),
		Seconds: hours * 3600, Processes: 60, Stacks: 2000, Seed: 11})
	t0 := time.Now()
	st, err := db.Import("template", int64(time.Second)/int64(hz), g.Feed)
	if err != nil {
		db.Close()
		return err
	}
	if err := db.Close(); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "generated %d samples in %d blocks in %v\n", st.Samples, st.Blocks, time.Since(t0).Round(time.Second))
	entries, err := os.ReadDir(filepath.Join(tpl, "blocks"))
	if err != nil {
		return err
	}
	blocks := filepath.Join(dir, "blocks")
	if err := os.MkdirAll(blocks, 0o755); err != nil {
		return err
	}
	zones := []string{"us-east-1a", "us-east-1b", "us-east-1c"}
	for n := range nodes {
		node := fmt.Sprintf("node-%04d", n)
		for _, e := range entries {
			m, err := store.ReadMeta(filepath.Join(tpl, "blocks", e.Name(), "meta.json"))
			if err != nil {
				return err
			}
			var r [4]byte
			rand.Read(r[:])
			m.ID = strings.SplitN(e.Name(), "-", 2)[0] + "-" + hex.EncodeToString(r[:])
			m.Node, m.Source, m.NodeLabels = node, node, map[string]string{"zone": zones[n%len(zones)]}
			out := filepath.Join(blocks, m.ID)
			if err := os.Mkdir(out, 0o755); err != nil {
				return err
			}
			if err := os.Link(filepath.Join(tpl, "blocks", e.Name(), "data"), filepath.Join(out, "data")); err != nil {
				return err
			}
			b, err := json.MarshalIndent(m, "", "  ")
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(out, "meta.json"), b, 0o644); err != nil {
				return err
			}
		}
	}
	return os.RemoveAll(filepath.Join(tpl, "wal"))
}
