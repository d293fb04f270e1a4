// Command overview measures the fleet overview (GET /api/fleet/overview
// and the UI's fleet page, web/ui/views/fleet.js) over a large fleet: by
// default 500 nodes × 24 h × 8 CPUs, against the target of the
// overview drawn within 1 s.
//
//	go run ./bench/overview [-dir /var/tmp/heatscope-bench-overview] [-nodes 500] [-hours 24] [-runs 9] [-minio-nodes 50]
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
// (overview.Warm) finished, and how long that warming
// took; after it, a request in other columns (the window 100 px narrower:
// a coarser step the warm cells serve) and a zoom into an hour (a finer
// step: cold, then again from the cache); with -minio-nodes, the same
// through a real MinIO holding that many of the nodes; and in headless
// chromium,
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
	"math"
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
	"github.com/heatscope/heatscope/bench/internal/loadavg"
	"github.com/heatscope/heatscope/bucket"
	"github.com/heatscope/heatscope/bucketlayout"
	"github.com/heatscope/heatscope/bucketstore"
	"github.com/heatscope/heatscope/internal/browsertest"
	"github.com/heatscope/heatscope/internal/miniotest"
	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/overview"
	"github.com/heatscope/heatscope/sample"
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
	minioNodes := flag.Int("minio-nodes", 0, "also put this many of the nodes in a real MinIO ($HEATSCOPE_MINIO) and measure the overview through it (0: no)")
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
	if err := run(*dir, *nodes, *hours, *cpus, *hz, *runs, *columns, *minioNodes, *chromium); err != nil {
		pprof.StopCPUProfile()
		log.Fatal(err)
	}
}

func run(dir string, nodes int, hours float64, cpus, hz, runs, columns, minioNodes int, chromium string) error {
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
	load := func() { fmt.Printf("load average: %s\n", loadavg.Line()) }

	fmt.Printf("# Fleet overview: %d nodes × %.0f h × %d CPUs (%d blocks, %s)\n\n", nodes, hours, cpus, st.Blocks, dir)
	load()
	fmt.Printf("store opened in %v (block metas and chunk indexes)\n\n", opened.Round(time.Millisecond))
	// The UI asks for the compact encoding; the JSON one is the API's
	// default.
	cold, compact, err := get(api+"&encoding=compact", compactAnswer)
	if err != nil {
		return err
	}
	var warm, warmJSON []float64
	var jsonBody []byte
	for range runs {
		d, _, err := get(api+"&encoding=compact", compactAnswer)
		if err != nil {
			return err
		}
		warm = append(warm, d)
		d, jsonBody, err = get(api, jsonAnswer)
		if err != nil {
			return err
		}
		warmJSON = append(warmJSON, d)
	}
	// The first request after a start, -runs times, each on a store
	// opened afresh: without warming, and once serve's warming (at the
	// step of this overview) finished; and how long the warming took.
	openDir := func() (servedStore, func(), error) {
		db, err := store.Open(dir, store.Options{ReadOnly: true, Logger: benchweb.Quiet()})
		if err != nil {
			return nil, nil, err
		}
		return db, func() { db.Close() }, nil
	}
	if err := firstRequests(openDir, api, columns, runs, st.Blocks); err != nil {
		return err
	}
	fmt.Printf("| API, warm, compact encoding as the UI asks (%d runs) | %s |\n", runs, benchweb.Stat(warm))
	fmt.Printf("| API, warm, JSON (%d runs) | %s |\n", runs, benchweb.Stat(warmJSON))
	fmt.Printf("| answer, %d columns | compact %.1f MB, JSON %.1f MB |\n", columns, float64(len(compact))/1e6, float64(len(jsonBody))/1e6)
	fmt.Printf("\n(the first cold request, before the runs: %.0f ms)\n\n", cold)
	if minioNodes > 0 {
		load()
		if err := throughMinIO(dir, minioNodes, runs, columns); err != nil {
			return fmt.Errorf("minio: %w", err)
		}
		load()
		fmt.Println()
	}

	bctx, exe, done, err := benchweb.Browser(chromium, 1300, 1000, 20*time.Minute)
	if err != nil {
		return err
	}
	defer done()
	ready := browsertest.Until(`document.body.dataset.fleetReady === '1'`, 5*time.Minute)
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
	fmt.Println("| measure | median (min-max) |")
	fmt.Println("|---|---|")
	fmt.Printf("| UI in headless %s: request to every row drawn (as Apply, %d runs) | %s |\n", filepath.Base(exe), runs, benchweb.Stat(loaded))
	fmt.Printf("| UI: of which the request, to the body received | %s |\n", benchweb.Stat(received))
	fmt.Printf("| UI: of which the body decoded and every row drawn | %s |\n", benchweb.Stat(decoded))
	fmt.Printf("| UI: drawing alone (a sort change, %d runs) | %s |\n", runs, benchweb.Stat(drawn))
	fmt.Println()
	load()
	return nil
}

// firstRequests times, runs times, the first compact overview request to
// api's path on a store open returns afresh, without warming; and on
// another, the warming serve does at start (overview.Warm
// in columns columns), the first request after it (which must read no
// per-CPU summary), one in otherColumns (a coarser step of the ladder,
// which must read none either), and a zoom into an hour in the middle of
// the range in columns (a step finer than the warm one) twice: cold, then
// from the cache. It prints them as table rows.
// servedStore is what the first requests serve and measure: a read-only
// *store.DB or a *store.Reader of a bucket.
type servedStore interface {
	web.Reader
	Stats() store.Stats
	overview.WarmStore
}

func firstRequests(open func() (servedStore, func(), error), api string, columns, runs, blocks int) error {
	var colds, warmings, afterWarm, other, zoomCold, zoomWarm []float64
	var res overview.WarmResult
	var otherStep, zoomStep float64
	var zoomReads uint64
	u, err := url.Parse(api)
	if err != nil {
		return err
	}
	for range runs {
		for _, warm := range []bool{false, true} {
			db, closeDB, err := open()
			if err != nil {
				return err
			}
			cells := overview.NewCells(0, 0)
			srv, err := web.New(db, web.Options{Logger: benchweb.Quiet(), Overview: cells})
			if err != nil {
				closeDB()
				return err
			}
			ts := httptest.NewServer(srv.Handler())
			// request times one compact request and checks how many per-CPU
			// summaries it read.
			request := func(uri string, maxReads uint64) (float64, overviewHead, uint64, error) {
				reads := db.Stats().CPUSummaryReads
				d, b, err := get(ts.URL+uri+"&encoding=compact", compactAnswer)
				if err != nil {
					return 0, overviewHead{}, 0, err
				}
				more := db.Stats().CPUSummaryReads - reads
				if more > maxReads {
					return 0, overviewHead{}, 0, fmt.Errorf("%s read %d per-CPU summaries, at most %d expected", uri, more, maxReads)
				}
				h, err := compactHead(b)
				return d, h, more, err
			}
			err = func() error {
				if !warm {
					d, _, _, err := request(u.RequestURI(), math.MaxInt)
					colds = append(colds, d)
					return err
				}
				if res, err = overview.Warm(context.Background(), db, cells, columns); err != nil {
					return err
				}
				if res.Pending > 0 || res.Warmed == 0 {
					return fmt.Errorf("warming left %d blocks pending, warmed %d", res.Pending, res.Warmed)
				}
				warmings = append(warmings, float64(res.Took.Microseconds())/1000)
				d, h, _, err := request(u.RequestURI(), 0)
				if err != nil {
					return err
				}
				afterWarm = append(afterWarm, d)
				q := strings.Replace(u.RequestURI(), fmt.Sprintf("columns=%d", columns), fmt.Sprintf("columns=%d", otherColumns(columns)), 1)
				d, oh, _, err := request(q, 0)
				if err != nil {
					return err
				}
				other, otherStep = append(other, d), oh.Step
				from := h.Start + math.Round(float64(h.Columns)*h.Step/2/3600)*3600
				q = fmt.Sprintf("%s&from=%.0f&to=%.0f", u.RequestURI(), from, from+3600)
				d, zh, n, err := request(q, math.MaxInt)
				if err != nil {
					return err
				}
				zoomCold, zoomStep, zoomReads = append(zoomCold, d), zh.Step, n
				d, _, _, err = request(q, 0)
				zoomWarm = append(zoomWarm, d)
				return err
			}()
			ts.Close()
			closeDB()
			if err != nil {
				return err
			}
		}
	}
	fmt.Println("| measure | median (min-max) |")
	fmt.Println("|---|---|")
	fmt.Printf("| API, cold, on a store opened afresh (%d runs, no warming) | %s |\n", runs, benchweb.Stat(colds))
	fmt.Printf("| warming at start (%d blocks' per-CPU summaries at %v, %.1f MB of cells, one goroutine, %d runs) | %s |\n", blocks,
		time.Duration(res.Step), float64(res.Bytes)/1e6, runs, benchweb.Stat(warmings))
	fmt.Printf("| API, first request after the warming finished (%d runs) | %s |\n", runs, benchweb.Stat(afterWarm))
	fmt.Printf("| API, then one in %d columns (100 px narrower: %g s a column, from the warm cells, %d runs) | %s |\n",
		otherColumns(columns), otherStep, runs, benchweb.Stat(other))
	fmt.Printf("| API, then a zoom into an hour in %d columns (%g s a column: %d summaries read, %d runs) | %s |\n",
		columns, zoomStep, zoomReads, runs, benchweb.Stat(zoomCold))
	fmt.Printf("| API, the same zoom again (from the step cells cache, %d runs) | %s |\n", runs, benchweb.Stat(zoomWarm))
	return nil
}

// overviewHead is what the benchmark reads of an answer's JSON header.
type overviewHead struct {
	Start, Step float64
	Columns     int
}

// compactHead reads the JSON header of a compact overview.
func compactHead(b []byte) (overviewHead, error) {
	var h overviewHead
	if len(b) < 16 {
		return h, fmt.Errorf("a compact overview of %d bytes, shorter than its 16-byte preamble", len(b))
	}
	n := int(binary.LittleEndian.Uint32(b[12:]))
	if len(b) < 16+n {
		return h, fmt.Errorf("a compact overview of %d bytes with a %d-byte header", len(b), n)
	}
	return h, json.Unmarshal(b[16:16+n], &h)
}

// otherColumns is a column count near columns whose step differs: the
// UI in a window 100 px narrower.
func otherColumns(columns int) int { return max(columns-33, 1) }

// throughMinIO puts the blocks of the first nodes nodes of dir into a
// real MinIO, as their recorders' shippers would, and measures the
// overview of those nodes through it as firstRequests does, each run on a
// bucket source opened afresh (no disk cache).
func throughMinIO(dir string, nodes, runs, columns int) error {
	tmp, err := os.MkdirTemp("/var/tmp", "heatscope-bench-overview-minio-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	srv, err := miniotest.Launch(tmp, miniotest.Options{})
	if err != nil {
		return err
	}
	defer srv.Stop()
	ctx := context.Background()
	bkt, err := bucket.Open(ctx, srv.Config("fleet"), bucket.Options{Component: "bench"})
	if err != nil {
		return err
	}
	defer bkt.Close()
	t0 := time.Now()
	local, err := store.LocalBlocks(dir)
	if err != nil {
		return err
	}
	blocks, size := 0, int64(0)
	for _, lb := range local {
		m, err := store.ReadMeta(lb.MetaPath())
		if err != nil {
			return err
		}
		var n int
		if _, err := fmt.Sscanf(m.Node, "node-%d", &n); err != nil || n >= nodes {
			continue
		}
		obj := bucketlayout.Block{Node: m.Node, ID: lb.ID}
		if err := upload(ctx, bkt, obj.Object(bucketlayout.DataFile), lb.DataPath(), &size); err != nil {
			return err
		}
		if err := upload(ctx, bkt, obj.Object(bucketlayout.MetaFile), lb.MetaPath(), &size); err != nil {
			return err
		}
		blocks++
	}
	fmt.Printf("## Through MinIO: %d nodes, %d blocks, %.1f GB uploaded in %v\n\n", nodes, blocks, float64(size)/1e9, time.Since(t0).Round(time.Second))
	// GETs and bytes per store opened: firstRequests opens them cold,
	// warmed, cold, warmed, ….
	var gets, getBytes [2][]float64
	opened := 0
	open := func() (servedStore, func(), error) {
		src := bucketstore.New(bkt, "minio", bucketstore.Options{Logger: benchweb.Quiet()})
		db, err := store.OpenReader([]store.BlockSource{src}, store.ReaderOptions{Logger: benchweb.Quiet()})
		if err != nil {
			return nil, nil, err
		}
		return db, func() {
			st, k := src.Stats(), opened%2
			gets[k], getBytes[k] = append(gets[k], float64(st.Gets)), append(getBytes[k], float64(st.GetBytes)/1e6)
			opened++
			db.Close()
		}, nil
	}
	api := fmt.Sprintf("http://x/api/fleet/overview?columns=%d", columns)
	if err := firstRequests(open, api, columns, runs, blocks); err != nil {
		return err
	}
	fmt.Printf("| GETs (MB) of a store opened afresh, its metas and one cold request | %.0f (%.1f MB) |\n", benchweb.Median(gets[0]), benchweb.Median(getBytes[0]))
	fmt.Printf("| GETs (MB) of a store opened afresh, its metas, the warming and the requests after it | %.0f (%.1f MB) |\n", benchweb.Median(gets[1]), benchweb.Median(getBytes[1]))
	return nil
}

// upload puts the file at path into bkt as name, adding its size to size.
func upload(ctx context.Context, bkt *bucket.Bucket, name, path string, size *int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	*size += fi.Size()
	return bkt.Upload(ctx, name, f)
}

// get fetches url and returns how long it took (ms) and the body, after
// check found the body an overview with nodes.
func get(url string, check func([]byte) error) (float64, []byte, error) {
	t0 := time.Now()
	resp, err := http.Get(url)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	ms := float64(time.Since(t0).Microseconds()) / 1000
	if err != nil {
		return 0, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, nil, fmt.Errorf("%s: %d %s", url, resp.StatusCode, b)
	}
	if err := check(b); err != nil {
		return 0, nil, fmt.Errorf("%s: %w: %.200q", url, err, b)
	}
	return ms, b, nil
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
	st, err := db.Import("template", sample.PeriodOf(int64(hz)), g.Feed)
	if err != nil {
		db.Close()
		return err
	}
	if err := db.Close(); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "generated %d samples in %d blocks in %v\n", st.Samples, st.Blocks, time.Since(t0).Round(time.Second))
	entries, err := store.LocalBlocks(tpl)
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
			m, err := store.ReadMeta(e.MetaPath())
			if err != nil {
				return err
			}
			var r [4]byte
			rand.Read(r[:])
			m.ID = strings.SplitN(e.ID, "-", 2)[0] + "-" + hex.EncodeToString(r[:])
			m.Node, m.Source, m.NodeLabels = node, node, map[string]string{"zone": zones[n%len(zones)]}
			out := store.LocalBlock{ID: m.ID, Dir: filepath.Join(blocks, m.ID)}
			if err := os.Mkdir(out.Dir, 0o755); err != nil {
				return err
			}
			if err := os.Link(e.DataPath(), out.DataPath()); err != nil {
				return err
			}
			b, err := json.MarshalIndent(m, "", "  ")
			if err != nil {
				return err
			}
			if err := os.WriteFile(out.MetaPath(), b, 0o644); err != nil {
				return err
			}
		}
	}
	return os.RemoveAll(filepath.Join(tpl, "wal"))
}
