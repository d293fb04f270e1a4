package main

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
	"github.com/heatscope/heatscope/web"
)

// TestExportAndAPIUnwindLabels: samples whose frames say how they were
// found (synth's Unwind: tables, frame pointers, both, none) are stored;
// heatscope export --format pprof and the API's /api/pprof write them
// with the unwind and unwind_fp labels record --output writes, and the
// real go tool pprof -tags reads the same tags from both, and from the
// export imported into another data directory and exported again.
func TestExportAndAPIUnwindLabels(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	const start = 1_700_000_000 // s
	db, err := store.Open(data, store.Options{Source: "host", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	g := synth.New(synth.Config{CPUs: 2, Hz: 99, Start: start * 1e9, Seconds: 20, Stacks: 100, Unwind: true})
	var s sample.Sample
	for g.Next(&s) {
		if err := db.Append(&s); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	bin := buildHeatscope(t, dir)
	exported := filepath.Join(dir, "export.pb.gz")
	if _, stderr, err := runHeatscope(bin, "export", "--data", data, "--from", fmt.Sprint(start), "--to", fmt.Sprint(start+30),
		"--format", "pprof", "-o", exported); err != nil {
		t.Fatalf("export: %v\n%s", err, stderr)
	}

	db, err = store.Open(data, store.Options{ReadOnly: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	srv, err := web.New(db, web.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	resp, err := http.Get(fmt.Sprintf("%s/api/pprof?from=%d&to=%d", ts.URL, start, start+30))
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/api/pprof: %d %v\n%.300s", resp.StatusCode, err, body)
	}
	served := filepath.Join(dir, "api.pb.gz")
	if err := os.WriteFile(served, body, 0o644); err != nil {
		t.Fatal(err)
	}

	tags := func(path string) string {
		out, err := exec.Command("go", "tool", "pprof", "-tags", "-tagshow", "^unwind", path).CombinedOutput()
		if err != nil {
			t.Fatalf("go tool pprof -tags %s: %v\n%s", path, err, out)
		}
		return string(out)
	}
	fromExport, fromAPI := tags(exported), tags(served)
	t.Logf("heatscope export, go tool pprof -tags -tagshow ^unwind:\n%s", fromExport)
	for _, want := range []string{"unwind: Total", ": table+fp\n", ": table\n", "unwind_fp: Total", ": app1::fn_2_0\n"} {
		if !strings.Contains(fromExport, want) {
			t.Errorf("the exported profile's tags lack %q", want)
		}
	}
	if strings.Contains(fromExport, "cpu:") || strings.Contains(fromExport, "comm:") {
		t.Error("-tagshow ^unwind showed other tags: the comparison below compares more than the unwind labels")
	}
	if fromAPI != fromExport {
		t.Errorf("/api/pprof's tags\n%s\nare not the export's\n%s", fromAPI, fromExport)
	}

	// The exported profile imported into another data directory keeps
	// how each frame was found: exported again, it says the same.
	again := filepath.Join(dir, "data2")
	if _, stderr, err := runHeatscope(bin, "import", "--data", again, exported); err != nil {
		t.Fatalf("import: %v\n%s", err, stderr)
	}
	reexported := filepath.Join(dir, "again.pb.gz")
	if _, stderr, err := runHeatscope(bin, "export", "--data", again, "--from", fmt.Sprint(start), "--to", fmt.Sprint(start+30),
		"--format", "pprof", "-o", reexported); err != nil {
		t.Fatalf("export of the import: %v\n%s", err, stderr)
	}
	if fromImport := tags(reexported); fromImport != fromExport {
		t.Errorf("the imported export's tags\n%s\nare not the export's\n%s", fromImport, fromExport)
	}
}
