// Command fleet benchmarks heatscope over a synthetic fleet in a real
// MinIO: blocks as recorders ship them (2-minute blocks, 8 CPUs at 99 Hz),
// 50, 100 and 200 nodes, read by a real query service (heatscope serve
// --objstore-config) over HTTP; then a 1,000-node fleet with short spans,
// compacted by heatscope compact, whose figures back docs/design.md's
// 10,000-node model.
//
//	go run ./bench/fleet                     # default: 10-minute spans (a few minutes)
//	go run ./bench/fleet -span 1h            # the full run: 200 nodes x 1 h x 8 CPUs at 99 Hz (570 M samples)
//
// Generating: one node's blocks are generated once with the store's block
// writer (internal/synth samples through store Import, one block per 2
// minutes), the rate measured; every node then uploads a copy of those
// blocks with its own meta (node name, zone label): the query service
// reads each node's objects separately, so its costs are those of
// distinct data, but the samples of all nodes are the same.
//
// Timings are medians of -repeat runs; the machine is shared, so ratios
// between fleet sizes say more than any one figure.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heatscope/heatscope/bucket"
	"github.com/heatscope/heatscope/bucketcompact"
	"github.com/heatscope/heatscope/bucketindex"
	"github.com/heatscope/heatscope/bucketlayout"
	"github.com/heatscope/heatscope/events"
	"github.com/heatscope/heatscope/internal/miniotest"
	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

func main() {
	span := flag.Duration("span", 10*time.Minute, "each node's recording (the full run: 1h)")
	sizes := flag.String("nodes", "50,100,200", "fleet sizes to measure, ascending")
	cpus := flag.Int("cpus", 8, "CPUs per node")
	hz := flag.Int("hz", 99, "sampling frequency")
	sim := flag.Int("sim-nodes", 1000, "nodes of the short-span simulation (0: skip)")
	simSpan := flag.Duration("sim-span", 2*time.Minute, "each simulated node's span")
	repeat := flag.Int("repeat", 9, "warm repeats per query")
	keep := flag.Bool("keep", false, "keep the MinIO directory")
	flag.Parse()
	var fleet []int
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 || (len(fleet) > 0 && n <= fleet[len(fleet)-1]) {
			log.Fatalf("-nodes %q: want ascending positive counts", *sizes)
		}
		fleet = append(fleet, n)
	}
	b := newBench(*keep)
	defer b.close()
	b.repeat = *repeat
	b.buildHeatscope()

	fmt.Printf("# Fleet in MinIO: %d CPUs at %d Hz, %s per node, 2-minute blocks\n\n", *cpus, *hz, *span)
	start := time.Now().Add(-3 * time.Hour).Truncate(time.Hour)
	tmpl := b.generate(*cpus, *hz, start, *span)
	fmt.Printf("- generated one node: %d samples in %d blocks, %.1f MB, in %s: %.2f M samples/s (store block writer, synth samples)\n",
		tmpl.samples, len(tmpl.blocks), float64(tmpl.bytes)/1e6, tmpl.took.Round(time.Millisecond), float64(tmpl.samples)/tmpl.took.Seconds()/1e6)
	fmt.Printf("- full fleet of %d nodes: %.0f M samples, %.2f GB\n\n", fleet[len(fleet)-1],
		float64(tmpl.samples*fleet[len(fleet)-1])/1e6, float64(tmpl.bytes*int64(fleet[len(fleet)-1]))/1e9)
	fmt.Println("| nodes | upload | serve start | /api/nodes warm | heatmap 1 node 10 min cold | warm | cold, restarted over its disk cache | timeline all nodes 10 min warm | events all nodes cold | warm (events) | /api/fleet/events warm | GETs (bytes) cold heatmap | index GETs / LISTs in one refresh interval | index rewrite (compactor) | serve RSS (peak) |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	have := 0
	for _, n := range fleet {
		t0 := time.Now()
		b.upload("fleet", tmpl, have, n)
		up := time.Since(t0)
		have = n
		r := b.measure("fleet", n, start, *span)
		fmt.Printf("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s (%d) | %s | %d (%.1f MB) | %d / %d | %s | %.0f MB (%.0f MB) |\n", n, up.Round(time.Millisecond), r.startup.Round(time.Millisecond),
			ms(r.nodesWarm), ms(r.heatCold), ms(r.heatWarm), ms(r.heatDisk), ms(r.timelineWarm), ms(r.eventsCold), ms(r.eventsWarm), r.events, ms(r.fleetEventsWarm), r.coldGets, float64(r.coldBytes)/1e6,
			r.indexReads, r.lists, r.indexUpdate.Round(time.Millisecond), r.rssMB, r.hwmMB)
	}
	if *sim > 0 {
		fmt.Printf("\n# Simulation: %d nodes x %s (short spans), then one compactor pass\n\n", *sim, *simSpan)
		stmpl := b.generate(*cpus, *hz, start, *simSpan)
		t0 := time.Now()
		b.upload("sim", stmpl, 0, *sim)
		fmt.Printf("- uploaded %d nodes x %d blocks (%d objects) in %s\n", *sim, len(stmpl.blocks), 2*(*sim)*len(stmpl.blocks), time.Since(t0).Round(time.Millisecond))
		r := b.measure("sim", *sim, start, *simSpan)
		fmt.Printf("- query service (a compactor rewrites the bucket index every 10 s, each rewrite taking %s; the query service reads it when its listing is at most 15 s old, else lists): start %s, index GETs / LISTs per refresh interval %d / %d, /api/nodes warm %s, one node's heatmap cold %s / warm %s, timeline over all nodes warm %s, events over all nodes warm %s (%d), /api/fleet/events warm %s, RSS %.0f MB (peak %.0f MB)\n",
			r.indexUpdate.Round(time.Millisecond), r.startup.Round(time.Millisecond), r.indexReads, r.lists, ms(r.nodesWarm), ms(r.heatCold), ms(r.heatWarm), ms(r.timelineWarm), ms(r.eventsWarm), r.events, ms(r.fleetEventsWarm), r.rssMB, r.hwmMB)
		b.compact("sim", start)
	}
}

func ms(d time.Duration) string {
	if d < 0 {
		return "failed (see log)"
	}
	return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
}

type bench struct {
	dir, bin string
	minio    *miniotest.Server
	keep     bool
	repeat   int
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// newBench starts MinIO on a free loopback port with a throwaway bucket.
func newBench(keep bool) *bench {
	dir, err := os.MkdirTemp("/var/tmp", "heatscope-bench-fleet-")
	if err != nil {
		log.Fatal(err)
	}
	b := &bench{dir: dir, keep: keep}
	if b.minio, err = miniotest.Launch(dir, miniotest.Options{}); err != nil {
		b.close()
		log.Fatal(err)
	}
	return b
}

func (b *bench) close() {
	if b.minio != nil {
		b.minio.Stop()
	}
	if !b.keep {
		os.RemoveAll(b.dir)
	}
}

func (b *bench) config(prefix string) bucket.Config { return b.minio.Config(prefix) }

func (b *bench) configFile(prefix string) string {
	path, err := b.minio.ConfigFile(b.config(prefix))
	if err != nil {
		log.Fatal(err)
	}
	return path
}

func (b *bench) open(prefix string) *bucket.Bucket {
	bkt, err := bucket.Open(context.Background(), b.config(prefix), bucket.Options{Component: "bench"})
	if err != nil {
		log.Fatal(err)
	}
	return bkt
}

func (b *bench) buildHeatscope() {
	b.bin = filepath.Join(b.dir, "heatscope")
	cmd := exec.Command("go", "build", "-o", b.bin, "./cmd/heatscope")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		log.Fatalf("build heatscope: %v", err)
	}
}

// template is one node's blocks, read into memory to upload for each node.
type template struct {
	blocks  []tblock
	samples int
	bytes   int64
	took    time.Duration
	// segments are the node's event segments (name, bytes), events the
	// number of events in them.
	segments []tsegment
	events   int
}

type tsegment struct {
	name string
	data []byte
}

type tblock struct {
	meta store.Meta
	data []byte
}

// generate writes one node's span as 2-minute blocks with the store's
// block writer and reads them back.
func (b *bench) generate(cpus, hz int, start time.Time, span time.Duration) template {
	dir, err := os.MkdirTemp(b.dir, "gen-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := store.Open(dir, store.Options{Node: "template", Source: "template", CallerTicks: true})
	if err != nil {
		log.Fatal(err)
	}
	var t template
	t0 := time.Now()
	for off := time.Duration(0); off < span; off += 2 * time.Minute {
		g := synth.New(synth.Config{CPUs: cpus, Hz: hz, Start: start.Add(off).UnixNano(), Seconds: min(2*time.Minute, span-off).Seconds(), Seed: uint64(off), Containers: true})
		st, err := db.Import("template", sample.PeriodOf(int64(hz)), func(fn func(*sample.Sample) error) error { return g.Feed(fn) })
		if err != nil {
			log.Fatal(err)
		}
		t.samples += st.Samples
	}
	t.took = time.Since(t0)
	// Events: one a minute, as a busy node's kernel log might give (a
	// link flap, an OOM kill, a device reset), with varied texts.
	texts := []string{"ena 0000:00:05.0 eth0: Device reset", "Out of memory: Killed process 4242 (java)", "TCP: request_sock_TCP: Possible SYN flooding on port 443",
		"nvme nvme0: I/O 12 QID 3 timeout, aborting", "kubelet: PLEG is not healthy"}
	for off := time.Duration(0); off < span; off += time.Minute {
		e := events.Event{Time: start.Add(off + 17*time.Second).UnixNano(), Source: "kmsg", Severity: events.Warning, Text: texts[t.events%len(texts)]}
		if err := db.AppendEvent(e); err != nil {
			log.Fatal(err)
		}
		t.events++
	}
	if err := db.Close(); err != nil {
		log.Fatal(err)
	}
	segs, err := store.EventSegmentFiles(dir)
	if err != nil {
		log.Fatal(err)
	}
	for _, sf := range segs {
		data, err := sf.WholePages()
		if err != nil {
			log.Fatal(err)
		}
		t.segments = append(t.segments, tsegment{sf.Name, data})
	}
	blocks, err := store.LocalBlocks(dir)
	if err != nil {
		log.Fatal(err)
	}
	for _, lb := range blocks {
		m, err := store.ReadMeta(lb.MetaPath())
		if err != nil {
			log.Fatal(err)
		}
		data, err := os.ReadFile(lb.DataPath())
		if err != nil {
			log.Fatal(err)
		}
		m.ImportedAt = 0 // as recorded
		t.blocks = append(t.blocks, tblock{m, data})
		t.bytes += int64(len(data))
	}
	return t
}

func nodeName(i int) string { return fmt.Sprintf("node-%04d", i) }

// upload ships nodes [from, to) as recorders do: each block's data, then
// its meta.json, then the event segments, 8 uploads at a time.
func (b *bench) upload(prefix string, t template, from, to int) {
	bkt := b.open(prefix)
	defer bkt.Close()
	var wg sync.WaitGroup
	work := make(chan int)
	var mu sync.Mutex
	var firstErr error
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				node := nodeName(i)
				for _, blk := range t.blocks {
					m := blk.meta
					m.Node, m.Source = node, node
					// Each node's blocks get ids of their own, as recorders' do.
					m.ID = fmt.Sprintf("%s%08x", m.ID[:14], crc32.ChecksumIEEE([]byte(node+m.ID)))
					m.NodeLabels = map[string]string{"zone": fmt.Sprintf("zone-%c", 'a'+i%3)}
					raw, _ := json.MarshalIndent(m, "", "  ")
					obj := bucketlayout.Block{Node: node, ID: m.ID}
					err := bkt.Upload(context.Background(), obj.Object(bucketlayout.DataFile), bytes.NewReader(blk.data))
					if err == nil {
						err = bkt.Upload(context.Background(), obj.Object(bucketlayout.MetaFile), bytes.NewReader(raw))
					}
					if err != nil {
						mu.Lock()
						firstErr = err
						mu.Unlock()
					}
				}
				for _, sg := range t.segments {
					// Each node is a data directory of its own: an instance id of its own.
					key, err := bucketlayout.ShippedSegment(node, fmt.Sprintf("%016x", i), sg.name)
					if err == nil {
						err = bkt.Upload(context.Background(), key, bytes.NewReader(sg.data))
					}
					if err != nil {
						mu.Lock()
						firstErr = err
						mu.Unlock()
					}
				}
			}
		}()
	}
	for i := from; i < to; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		log.Fatal(firstErr)
	}
}

type result struct {
	startup, nodesWarm, heatCold, heatWarm, timelineWarm time.Duration
	eventsCold, eventsWarm, fleetEventsWarm, heatDisk    time.Duration
	events                                               int
	coldGets, coldBytes, lists, indexReads               int64
	indexUpdate                                          time.Duration
	rssMB, hwmMB                                         float64
}

// measure starts a query service over the bucket and times its queries,
// while a compactor rewrites the bucket index every 10 s as heatscope
// compact does between passes (the query service reads it instead of
// listing the bucket).
func (b *bench) measure(prefix string, nodes int, start time.Time, span time.Duration) result {
	var r result
	stopIndex, indexTook := b.keepIndexFresh(prefix)
	defer stopIndex()
	heapDir := filepath.Join(b.dir, fmt.Sprintf("heap-%s-%d", prefix, nodes))
	if err := os.MkdirAll(heapDir, 0o755); err != nil {
		log.Fatal(err)
	}
	base, cmd, startup := b.serve(prefix, "--heap-profile-dir", heapDir)
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	r.startup = startup
	get := func(path string) time.Duration {
		t := time.Now()
		resp, err := http.Get(base + path)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			// Reported, not fatal: a fleet-wide query may hit serve's
			// time limit on a loaded machine; -1 marks it in the table.
			log.Printf("%s: %d %s", path, resp.StatusCode, body)
			return -1
		}
		return time.Since(t)
	}
	median := func(path string) time.Duration {
		var ds []time.Duration
		for range b.repeat {
			d := get(path)
			if d < 0 {
				return d
			}
			ds = append(ds, d)
		}
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	from := start.Add(span/2 - min(span/2, 5*time.Minute))
	win := fmt.Sprintf("from=%d&to=%d", from.Unix(), from.Add(min(span, 10*time.Minute)).Unix())
	node := nodeName(nodes / 2)
	lists0, gets0, bytes0 := b.bucketMetrics(base)
	r.heatCold = get("/api/heatmap?node=" + node + "&" + win)
	lists1, gets1, bytes1 := b.bucketMetrics(base)
	r.coldGets, r.coldBytes = gets1-gets0, bytes1-bytes0
	_ = lists1 - lists0
	r.heatWarm = median("/api/heatmap?node=" + node + "&" + win)
	r.nodesWarm = median("/api/nodes")
	get("/api/timeline?" + win) // the first read of every node's blocks
	r.timelineWarm = median("/api/timeline?" + win)
	evPath := "/api/events?limit=10000&from=" + strconv.FormatInt(start.Unix(), 10) + "&to=" + strconv.FormatInt(start.Add(span).Unix(), 10)
	r.eventsCold = get(evPath)
	r.eventsWarm = median(evPath)
	r.events = b.countEvents(base + evPath)
	r.fleetEventsWarm = median("/api/fleet/events?limit=10000&from=" + strconv.FormatInt(start.Unix(), 10) + "&to=" + strconv.FormatInt(start.Add(span).Unix(), 10))
	// The requests of one refresh interval: index GETs, or LISTs when
	// the query service had to list.
	l0, _, _ := b.bucketMetrics(base)
	i0 := b.metric(base, "heatscope_bucket_read_index_reads_total")
	time.Sleep(bucketRefresh + 2*time.Second)
	l1, _, _ := b.bucketMetrics(base)
	r.lists = l1 - l0
	r.indexReads = b.metric(base, "heatscope_bucket_read_index_reads_total") - i0
	r.indexUpdate = indexTook()
	r.rssMB, r.hwmMB = rss(cmd.Process.Pid)
	b.heapProfile(cmd.Process, heapDir)
	r.heatDisk = b.diskCacheCold(prefix, "/api/heatmap?node="+node+"&"+win)
	return r
}

// serve starts a query service over the bucket's prefix and waits until
// it answers; it returns its address, its process and how long it took.
func (b *bench) serve(prefix string, args ...string) (base string, cmd *exec.Cmd, startup time.Duration) {
	addr := fmt.Sprintf("127.0.0.1:%d", freePort())
	cmd = exec.Command(b.bin, append([]string{"serve", "--objstore-config", b.configFile(prefix), "--listen", addr}, args...)...)
	logf, _ := os.Create(filepath.Join(b.dir, "serve-"+prefix+".log"))
	cmd.Stdout, cmd.Stderr = logf, logf
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	base = "http://" + addr
	for {
		if resp, err := http.Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Since(t0) > 5*time.Minute {
			log.Fatalf("serve did not start (log %s)", logf.Name())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return base, cmd, time.Since(t0)
}

// diskCacheCold times path as the first query of a query service
// restarted over a disk cache (serve --objstore-cache-dir) that a
// previous one filled by answering it once.
func (b *bench) diskCacheCold(prefix, path string) time.Duration {
	cache, err := os.MkdirTemp(b.dir, "cache-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(cache)
	var took time.Duration
	for range 2 {
		base, cmd, _ := b.serve(prefix, "--objstore-cache-dir", cache)
		t := time.Now()
		resp, err := http.Get(base + path)
		if err != nil {
			log.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		took = time.Since(t)
		if resp.StatusCode != 200 {
			log.Printf("%s with a disk cache: %d", path, resp.StatusCode)
			took = -1
		}
		cmd.Process.Kill()
		cmd.Wait()
	}
	return took
}

// heapProfile has the query service write its heap profile (SIGUSR1) and
// logs its largest in-use allocations, to say what holds its memory.
func (b *bench) heapProfile(p *os.Process, dir string) {
	if err := p.Signal(syscall.SIGUSR1); err != nil {
		log.Printf("heap profile: %v", err)
		return
	}
	for range 100 {
		if files, _ := filepath.Glob(filepath.Join(dir, "heap-*.pb.gz")); len(files) > 0 {
			out, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=15", "-sample_index=inuse_space", b.bin, files[0]).CombinedOutput()
			if err != nil {
				log.Printf("heap profile %s: %v", files[0], err)
			}
			log.Printf("query service heap profile %s:\n%s", files[0], out)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	log.Printf("heap profile: none written in %s", dir)
}

// bucketRefresh is serve's bucket refresh interval (cmd/heatscope).
const bucketRefresh = 10 * time.Second

// keepIndexFresh rewrites the bucket index every 10 s (a compactor's
// UpdateIndex, as heatscope compact --index-interval does) until stopped;
// took returns the median rewrite's time.
func (b *bench) keepIndexFresh(prefix string) (stop func(), took func() time.Duration) {
	bkt := b.open(prefix)
	work, _ := os.MkdirTemp(b.dir, "index-")
	c, err := bucketcompact.New(bkt, bkt.Name(), bucketcompact.Options{WorkDir: work, Holder: "bench-index"})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var times []time.Duration
	update := func() {
		t0 := time.Now()
		if _, err := c.UpdateIndex(ctx); err != nil {
			if ctx.Err() == nil {
				log.Printf("index update: %v", err)
			}
			return
		}
		mu.Lock()
		times = append(times, time.Since(t0))
		mu.Unlock()
	}
	update() // there before the query service starts
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(10 * time.Second) // start to start, as heatscope compact
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				update()
			}
		}
	}()
	stop = func() {
		cancel()
		<-done
		c.Unlock(context.Background())
		bkt.Close()
	}
	took = func() time.Duration {
		mu.Lock()
		defer mu.Unlock()
		ts := slices.Clone(times)
		slices.Sort(ts)
		return ts[len(ts)/2]
	}
	return stop, took
}

// countEvents returns how many events an /api/events answer lists.
func (b *bench) countEvents(url string) int {
	resp, err := http.Get(url)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	var ans struct {
		Events []json.RawMessage `json:"events"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
		log.Printf("events answer: %v", err)
	}
	return len(ans.Events)
}

// metric reads one counter from the query service's /metrics.
func (b *bench) metric(base, name string) int64 {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == name {
			v, _ := strconv.ParseFloat(f[1], 64)
			return int64(v)
		}
	}
	return 0
}

// bucketMetrics reads the query service's bucket request counters.
func (b *bench) bucketMetrics(base string) (lists, gets, bytes int64) {
	return b.metric(base, "heatscope_bucket_read_lists_total"), b.metric(base, "heatscope_bucket_read_gets_total"),
		b.metric(base, "heatscope_bucket_read_bytes_total")
}

// rss returns a process's resident and peak resident memory in MB.
func rss(pid int) (cur, peak float64) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			cur = kb / 1024
		case "VmHWM:":
			peak = kb / 1024
		}
	}
	return
}

// compact runs one compactor pass over the simulated fleet and reports
// its requests and the bucket index's size.
func (b *bench) compact(prefix string, start time.Time) {
	bkt := b.open(prefix)
	defer bkt.Close()
	work, _ := os.MkdirTemp(b.dir, "compact-")
	c, err := bucketcompact.New(bkt, bkt.Name(), bucketcompact.Options{WorkDir: work, Ranges: []time.Duration{time.Hour}, ShipDelay: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	t0 := time.Now()
	rep, err := c.Run(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	took := time.Since(t0)
	reqs := requests(c)
	t0 = time.Now()
	if _, err := c.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
	again := time.Since(t0)
	reqs2 := requests(c)
	for k := range reqs2 {
		reqs2[k] -= reqs[k]
	}
	ix, err := bucketindex.Read(context.Background(), bkt)
	if err != nil {
		log.Fatal(err)
	}
	raw, _ := json.Marshal(ix)
	fmt.Printf("- compactor pass: %s; merged %d blocks into %d; index of %d blocks (%d marked) over %d nodes: %d bytes gzipped (%d bytes JSON): %.0f bytes gzipped per block\n",
		took.Round(time.Millisecond), rep.MergedParents, rep.Merges, len(ix.Blocks), len(ix.DeletionMarks), rep.Nodes, rep.IndexBytes, len(raw), float64(rep.IndexBytes)/float64(max(len(ix.Blocks), 1)))
	fmt.Printf("- compactor requests, first pass (reads every meta): %v; a second pass (metas cached) %s: %v\n", reqs, again.Round(time.Millisecond), reqs2)
	_ = start
}

// requests reads the compactor's bucket request counters by operation.
func requests(c *bucketcompact.Compactor) map[string]float64 {
	reg := prometheus.NewRegistry()
	if err := reg.Register(c.Collector()); err != nil {
		log.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "heatscope_compactor_bucket_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	return out
}
