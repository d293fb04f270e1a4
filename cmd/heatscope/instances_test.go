package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/heatscope/heatscope/internal/miniotest"
	"github.com/heatscope/heatscope/internal/storetest"
	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/store"
)

// TestServeTwoInstancesOfOneNode: two recorders (two data directories,
// two instances) shipped the same minute under one node name into a real
// MinIO, as a partition or an older bucket leaves them. The query service
// never adds them into one CPU: no CPU of any node is busier than one
// CPU-second per second, neither in /api/percpu nor in the fleet overview,
// the second instance is a node of its own (a@<id>), every sample is
// there once, and every answer and export says so in a warning.
func TestServeTwoInstancesOfOneNode(t *testing.T) {
	m := miniotest.Start(t)
	bkt := m.Open("fleet")
	cfg := synth.Config{CPUs: 2, Hz: 99, Start: fleetStart, Seconds: 60}
	var dirs []string
	total := 0
	for seed := range uint64(2) {
		// The second starts 10 s after the first, which keeps the name.
		cfg.Seed, cfg.Start = seed+1, fleetStart+int64(seed)*10e9
		dir, n := storetest.RecordSynth(t, "a", nil, cfg, 30e9)
		miniotest.UploadBlocks(t, bkt, "a", dir)
		dirs, total = append(dirs, dir), total+n
	}
	raw, err := os.ReadFile(filepath.Join(dirs[1], "identity.json"))
	if err != nil {
		t.Fatal(err)
	}
	second := ""
	if i := strings.Index(string(raw), `"instance":"`); i >= 0 {
		second = string(raw)[i+12 : i+28]
	}
	if !store.ValidInstance(second) {
		t.Fatalf("the second directory's identity: %s", raw)
	}
	apart := store.InstanceNodeName("a", second)

	conf := m.WriteConfig("fleet")
	bin := buildHeatscope(t, t.TempDir())
	addr := "127.0.0.1:" + freePort(t)
	d := startDaemon(t, bin, "serve", "--objstore-config", conf, "--listen", addr)
	url := "http://" + addr
	waitServing(t, d, url+"/api/nodes")

	warned := func(resp *http.Response, what string) {
		t.Helper()
		for _, w := range resp.Header.Values("Warning") {
			if strings.Contains(w, "node a was recorded by 2 recorders at once") && strings.Contains(w, "as node "+apart) {
				return
			}
		}
		t.Errorf("%s: no Warning naming node a's two recorders: %q", what, resp.Header.Values("Warning"))
	}

	window := fmt.Sprintf("from=%d&to=%d", fleetStart/1e9+10, fleetStart/1e9+60)
	var ov struct {
		Nodes []struct {
			Name    string    `json:"name"`
			Busiest []float64 `json:"busiest"`
		} `json:"nodes"`
	}
	resp := getJSON(t, url+"/api/fleet/overview?"+window, &ov)
	warned(resp, "/api/fleet/overview")
	for _, n := range ov.Nodes {
		if b := slices.Max(n.Busiest); b > 1 || b < 0.5 {
			t.Errorf("overview row %s: busiest CPU share %.3f, want one CPU's (0.7 with 30%% idle), never above 1", n.Name, b)
		}
	}
	if len(ov.Nodes) != 2 {
		t.Errorf("overview rows: %d, want two", len(ov.Nodes))
	}

	for _, node := range []string{"a", apart} {
		var pc struct {
			Step float64     `json:"step"`
			CPU  [][]float64 `json:"cpu"`
		}
		resp = getJSON(t, url+"/api/percpu?idle=include&step=1s&node="+node+"&"+window, &pc)
		if resp.StatusCode != http.StatusOK || len(pc.CPU) != 2 {
			t.Fatalf("/api/percpu for node %s: %d, %d CPUs", node, resp.StatusCode, len(pc.CPU))
		}
		warned(resp, "/api/percpu")
		busiest := 0.0
		for _, cpu := range pc.CPU {
			busiest = max(busiest, slices.Max(cpu))
		}
		// A second of samples every 10.1 ms reads 0.99 to 1.01: never 2.
		if busiest > 1.02*pc.Step || busiest < 0.9*pc.Step {
			t.Errorf("node %s: the busiest CPU second holds %.3f CPU-s per %.0f s, want one CPU's (about 1)", node, busiest, pc.Step)
		}
	}
	var nodes []nodeInfo
	resp = getJSON(t, url+"/api/nodes", &nodes)
	var names []string
	samples := 0
	for _, n := range nodes {
		names, samples = append(names, n.Name), samples+n.Samples
	}
	if !slices.Equal(names, []string{"a", apart}) || samples != total {
		t.Fatalf("nodes %v with %d samples; want a and %s, %d samples", names, samples, apart, total)
	}
	warned(resp, "/api/nodes")
	// The second instance's recording is a source of its own.
	var sources []struct {
		Name    string `json:"name"`
		Samples int    `json:"samples"`
	}
	getJSON(t, url+"/api/sources", &sources)
	if len(sources) != 2 || sources[1].Name != apart {
		t.Errorf("sources: %+v, want a and %s", sources, apart)
	}
	if code, body := getBody(t, url+"/api/percpu?idle=include&step=1s&source="+apart+"&"+window); code != http.StatusOK {
		t.Errorf("/api/percpu?source=%s: %d %s", apart, code, body)
	}

	out := filepath.Join(t.TempDir(), "a.folded")
	_, stderr, err := runHeatscope(bin, "export", "--objstore-config", conf, "--format", "folded", "--idle", "include", "-o", out)
	if err != nil || !strings.Contains(stderr, "warning: node a was recorded by 2 recorders at once") {
		t.Fatalf("export: %v, stderr %q; want a warning naming node a's two recorders", err, stderr)
	}
}
