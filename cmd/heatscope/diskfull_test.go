package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/bpftest"
	"github.com/heatscope/heatscope/internal/tmpfstest"
)

// TestRecordIntoAFullDisk records into a small tmpfs that fills up and
// then has room again: the recording goes on; /metrics and the progress
// line count the failed appends; the log says once that appends fail
// (why: no space) and once that they work again. Before the pipeline,
// record dropped Append's error: nothing said the samples were not safe.
func TestRecordIntoAFullDisk(t *testing.T) {
	bpftest.Require(t)
	mnt := tmpfstest.Mount(t, "4m")
	bin := buildHeatscope(t, t.TempDir())
	addr := "127.0.0.1:" + freePort(t)
	d := startDaemon(t, bin, "record", "--data", filepath.Join(mnt, "data"), "--duration", "60s", "--listen", addr,
		"--progress", "500ms", "--kmsg", "", "--max-cpu", "0", "--cache-dir", "")
	url := "http://" + addr
	waitServing(t, d, url+"/healthz")
	free := tmpfstest.Fill(t, filepath.Join(mnt, "filler"))
	// The WAL is written at the polls, fsynced every second: appends fail
	// from the first write after the disk filled.
	deadline := time.Now().Add(20 * time.Second)
	var failed float64
	for failed <= 0 && time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
		failed = metricSum(scrape(t, url+"/metrics"), "heatscope_store_append_errors_total")
	}
	if failed <= 0 {
		t.Fatalf("the disk is full, but /metrics counts no failed append (%v)\n%s", failed, d.log())
	}
	time.Sleep(time.Second)
	free()
	deadline = time.Now().Add(20 * time.Second)
	for !strings.Contains(d.log(), "store appends work again") && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	d.stop(t)
	log := d.log()
	if n := strings.Count(log, "store appends fail"); n != 1 {
		t.Errorf("the episode of failed appends was logged %d times, want once\n%s", n, log)
	}
	if !strings.Contains(log, "no space left on device") {
		t.Errorf("the log does not say why appends failed\n%s", log)
	}
	if !strings.Contains(log, "store appends work again") {
		t.Errorf("the log does not say appends work again once there is room\n%s", log)
	}
	if !strings.Contains(log, "appends to the data directory failed (see the log)") {
		t.Errorf("no progress line counts the failed appends\n%s", log)
	}
}
