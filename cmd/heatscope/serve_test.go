package main

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/bpftest"
)

// freePort returns a TCP port that nothing listens on right now.
func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// daemon is a heatscope process left running, its stderr in a file.
type daemon struct {
	cmd    *exec.Cmd
	stderr string
	done   chan error
}

func startDaemon(t testing.TB, bin string, args ...string) *daemon {
	t.Helper()
	d := &daemon{cmd: exec.Command(bin, args...), stderr: filepath.Join(t.TempDir(), "stderr"), done: make(chan error, 1)}
	f, err := os.Create(d.stderr)
	if err != nil {
		t.Fatal(err)
	}
	d.cmd.Stderr = f
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(func() {
		d.cmd.Process.Kill()
		<-d.done
	})
	return d
}

func (d *daemon) log() string {
	b, _ := os.ReadFile(d.stderr)
	return string(b)
}

// stop sends SIGINT and waits for a clean exit.
func (d *daemon) stop(t *testing.T) {
	t.Helper()
	d.cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-d.done:
		d.done <- err // for the cleanup
		if err != nil {
			t.Fatalf("exit after SIGINT: %v\n%s", err, d.log())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("still running 15 s after SIGINT\n%s", d.log())
	}
}

// waitServing polls url until the server answers.
func waitServing(t testing.TB, d *daemon, url string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			return
		}
		select {
		case err := <-d.done:
			d.done <- err
			t.Fatalf("exited before serving: %v\n%s", err, d.log())
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("%s does not answer\n%s", url, d.log())
}

func getJSON(t *testing.T, url string, v any, headers ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if v != nil {
		if err := json.Unmarshal(body, v); err != nil {
			t.Fatalf("GET %s: %d, not JSON: %v\n%s", url, resp.StatusCode, err, body)
		}
	}
	return resp
}

type sourceInfo struct {
	Name     string  `json:"name"`
	First    float64 `json:"first"`
	Last     float64 `json:"last"`
	Samples  int     `json:"samples"`
	Imported bool    `json:"imported"`
}

// TestServe imports a perf script, serves the data directory and reads
// its sources and its heatmap over HTTP.
func TestServe(t *testing.T) {
	bin, _, data := importedDataDir(t, 3000) // 1 ms apart from 5000 s, for 3 s
	addr := "127.0.0.1:" + freePort(t)
	d := startDaemon(t, bin, "serve", "--data", data, "--listen", addr)
	url := "http://" + addr
	waitServing(t, d, url+"/api/sources")

	var sources []sourceInfo
	if resp := getJSON(t, url+"/api/sources", &sources); resp.StatusCode != http.StatusOK {
		t.Fatalf("sources: %d", resp.StatusCode)
	}
	if len(sources) != 1 || sources[0].Name != "capture" || sources[0].Samples != 3000 || !sources[0].Imported ||
		sources[0].First != 5000 || sources[0].Last < 5002.998 || sources[0].Last > 5003 {
		t.Fatalf("sources %+v", sources)
	}

	var h struct {
		Start    float64   `json:"start"`
		Columns  []int     `json:"columns"`
		Rows     []float64 `json:"rows"`
		Values   [][]int   `json:"values"`
		MaxValue int       `json:"maxvalue"`
	}
	resp := getJSON(t, url+"/api/heatmap?source=capture", &h)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json; charset=utf-8" ||
		resp.Header.Get("X-Content-Type-Options") != "nosniff" || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Fatalf("heatmap: %d, headers %v", resp.StatusCode, resp.Header)
	}
	if h.Start != 5000 || len(h.Columns) != 3 || len(h.Rows) != 50 || h.Rows[0] != 980 || h.MaxValue < 19 || h.MaxValue > 21 {
		t.Fatalf("heatmap start %v, %d columns, %d rows, max %d", h.Start, len(h.Columns), len(h.Rows), h.MaxValue)
	}
	for c, col := range h.Values {
		sum := 0
		for _, v := range col {
			sum += v
		}
		if sum != 1000 { // one sample a millisecond
			t.Fatalf("column %d holds %d samples, want 1000", c, sum)
		}
	}

	var e struct{ Error, Param string }
	if resp := getJSON(t, url+"/api/heatmap?source=capture&rows=0", &e); resp.StatusCode != http.StatusBadRequest || e.Param != "rows" {
		t.Fatalf("rows=0: %d %+v", resp.StatusCode, e)
	}

	// The fleet overview is warmed at start: its block warm, none pending.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		m := scrape(t, url+"/metrics")
		if metricSum(m, "heatscope_overview_warm_blocks") == 1 && metricSum(m, "heatscope_overview_warm_pending") == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the overview not warmed after 10 s: %d warm, %d pending", int(metricSum(m, "heatscope_overview_warm_blocks")),
				int(metricSum(m, "heatscope_overview_warm_pending")))
		}
	}
	// The bounds of the cells, and a timeline of every thread (idle
	// samples too: steps the warm ones do not serve) keeping its steps in
	// the same budget as the zooms'.
	var tl struct{ Counts []int64 }
	if resp := getJSON(t, url+"/api/timeline?source=capture&from=5000&to=5010&step=10s&idle=include", &tl); resp.StatusCode != http.StatusOK || len(tl.Counts) != 1 || tl.Counts[0] != 3000 {
		t.Fatalf("timeline: %d, %+v", resp.StatusCode, tl)
	}
	m := scrape(t, url+"/metrics")
	for name, want := range map[string]float64{"heatscope_overview_warm_limit_bytes": 32 << 20, "heatscope_overview_step_cells_limit_bytes": 16 << 20} {
		if got := metricSum(m, name); got != want {
			t.Errorf("%s %v, want %v", name, got, want)
		}
	}
	if got := metricSum(m, "heatscope_overview_step_cells_bytes"); got <= 0 {
		t.Errorf("heatscope_overview_step_cells_bytes %v: the timeline's steps are not in the cells' budget", got)
	}
	d.stop(t)
	if log := d.log(); !strings.Contains(log, "warmed the fleet overview") || !strings.Contains(log, "blocks=1") {
		t.Errorf("no log line of the warming:\n%s", log)
	}
	if log := d.log(); !strings.Contains(log, "serving the heatscope API") || strings.Contains(log, "WITHOUT AUTHENTICATION") {
		t.Fatalf("log:\n%s", log)
	}
}

// TestServeOffLoopback serves on every address: without a token it is
// refused, with --insecure-listen it warns loudly; with a token it asks
// for it.
func TestServeOffLoopback(t *testing.T) {
	bin, _, data := importedDataDir(t, 10)

	port := freePort(t)
	for _, cmd := range [][]string{{"serve", "--data", data}, {"record", "--data", filepath.Join(t.TempDir(), "rec"), "--duration", "1s"}} {
		_, stderr, err := runHeatscope(bin, append(cmd, "--listen", "0.0.0.0:"+port)...)
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(stderr, "--auth-token") || !strings.Contains(stderr, "--insecure-listen") {
			t.Fatalf("%s on 0.0.0.0 without a token: %v, stderr %q; want exit status 2 naming --auth-token and --insecure-listen", cmd[0], err, stderr)
		}
	}
	d := startDaemon(t, bin, "serve", "--data", data, "--listen", "0.0.0.0:"+port, "--insecure-listen")
	waitServing(t, d, "http://127.0.0.1:"+port+"/api/sources")
	d.stop(t)
	if log := d.log(); !strings.Contains(log, "level=WARN") || !strings.Contains(log, "WITHOUT AUTHENTICATION") || !strings.Contains(log, "--auth-token") {
		t.Fatalf("no warning serving 0.0.0.0 without a token:\n%s", log)
	}

	port = freePort(t)
	d = startDaemon(t, bin, "serve", "--data", data, "--listen", "0.0.0.0:"+port, "--auth-token", "t0ken")
	url := "http://127.0.0.1:" + port + "/api/sources"
	waitServing(t, d, url)
	if resp := getJSON(t, url, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without the token: %d", resp.StatusCode)
	}
	var sources []sourceInfo
	if resp := getJSON(t, url, &sources, "Authorization", "Bearer t0ken"); resp.StatusCode != http.StatusOK || len(sources) != 1 {
		t.Errorf("with the token: %d %+v", resp.StatusCode, sources)
	}
	d.stop(t)
	if log := d.log(); strings.Contains(log, "WITHOUT AUTHENTICATION") {
		t.Fatalf("warned although a token is set:\n%s", log)
	}
}

func TestServeBadFlags(t *testing.T) {
	dir := t.TempDir()
	bin := buildHeatscope(t, dir)
	for _, tc := range []struct {
		args []string
		want string
		code int
	}{
		{[]string{"serve", "--listen", ""}, "--listen", 2},
		{[]string{"serve", "--data", dir, "--memory-limit", "lots"}, "--memory-limit", 2},
		{[]string{"serve", "--data", dir, "--overview-warm-columns", "-1"}, "--overview-warm-columns", 2},
		{[]string{"serve", "--data", dir, "--heap-profile-dir", filepath.Join(dir, "nothing-here")}, "--heap-profile-dir", 2},
		{[]string{"serve", "--data", dir, "--auth-token", "two words"}, "--auth-token", 2},
		{[]string{"serve", "--data", dir, "--objstore-cache-dir", dir}, "--objstore-cache-dir", 2},
		{[]string{"serve", "--data", filepath.Join(dir, "nothing-here")}, "nothing-here", 1},
		{[]string{"serve", "--data", dir, "--listen", "127.0.0.1:99999"}, "99999", 1},
		{[]string{"record", "--data", "", "--output", filepath.Join(dir, "p.pb.gz"), "--listen", "127.0.0.1:0"}, "--data", 2},
	} {
		_, stderr, err := runHeatscope(bin, tc.args...)
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%q: %v, stderr %q; want exit status %d naming %s", tc.args, err, stderr, tc.code, tc.want)
		}
	}
}

// TestRecordServes reads the API of a recorder while it records, and
// checks the server goes away with the recording.
func TestRecordServes(t *testing.T) {
	bpftest.Require(t)
	dir := t.TempDir()
	bin := buildHeatscope(t, dir)
	addr := "127.0.0.1:" + freePort(t)
	d := startDaemon(t, bin, "record", "--data", filepath.Join(dir, "data"), "--duration", "8s", "--listen", addr,
		"--progress", "0", "--top", "0")
	url := "http://" + addr
	waitServing(t, d, url+"/api/sources")
	deadline := time.Now().Add(6 * time.Second)
	var sources []sourceInfo
	for time.Now().Before(deadline) && (len(sources) == 0 || sources[0].Samples == 0) {
		time.Sleep(200 * time.Millisecond)
		getJSON(t, url+"/api/sources", &sources)
	}
	if len(sources) != 1 || sources[0].Samples == 0 || sources[0].Imported {
		t.Fatalf("sources while recording: %+v", sources)
	}
	var tree struct {
		Value int64 `json:"value"`
	}
	if resp := getJSON(t, url+"/api/flamegraph?from=-1m&to=-0s&idle=include", &tree); resp.StatusCode != http.StatusOK || tree.Value == 0 {
		t.Fatalf("flame graph of the last minute: %d, %d samples", resp.StatusCode, tree.Value)
	}
	select {
	case err := <-d.done:
		d.done <- err
		if err != nil {
			t.Fatalf("record: %v\n%s", err, d.log())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("record did not stop after --duration")
	}
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Fatal("still serving after recording stopped")
	}
}

// TestServeAddressTaken serves on an address another program holds: the
// error says the address is in use and names the flag that moves it.
func TestServeAddressTaken(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	addr := held.Addr().String()
	code, _, stderr := runIn("serve", "--data", t.TempDir(), "--listen", addr)
	for _, want := range []string{"--listen " + addr + ": the address is in use", "choose a free one with --listen", "make run LISTEN="} {
		if code != 1 || !strings.Contains(stderr, want) {
			t.Errorf("serve on a taken address: exit %d, stderr %q; want exit 1 and %q", code, stderr, want)
		}
	}
}

// TestRecordAddressTaken records with a --listen address another program
// holds: an error that says so and names the flag, as serve's.
func TestRecordAddressTaken(t *testing.T) {
	bpftest.Require(t)
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	addr := held.Addr().String()
	code, _, stderr := runIn("record", "--data", t.TempDir(), "--duration", "2s", "--listen", addr, "--progress", "0", "--top", "0")
	if want := "--listen " + addr + ": the address is in use"; code != 1 || !strings.Contains(stderr, want) || !strings.Contains(stderr, "make run LISTEN=") {
		t.Errorf("record on a taken address: exit %d, stderr %q; want exit 1 and %q", code, stderr, want)
	}
}
