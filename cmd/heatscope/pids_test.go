package main

import (
	"bytes"
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/bpftest"
)

// TestPIDWatch warns at start about a pid that does not exist, and once
// when the last listed process exits.
func TestPIDWatch(t *testing.T) {
	var log bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	newPIDWatch([]uint32{999999}, time.Second, logger)
	if !strings.Contains(log.String(), "none of these processes exists") || !strings.Contains(log.String(), "999999") {
		t.Fatalf("start with only a missing pid: %q", log.String())
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := uint32(cmd.Process.Pid)
	log.Reset()
	w := newPIDWatch([]uint32{pid, 999999}, time.Second, logger)
	if !strings.Contains(log.String(), "no such process") || strings.Contains(log.String(), fmt.Sprint(pid)) {
		t.Fatalf("start with one live pid and one missing: %q", log.String())
	}
	log.Reset()
	now := time.Now()
	w.check(now.Add(2 * time.Second))
	if log.Len() != 0 {
		t.Fatalf("a listed process lives, yet: %q", log.String())
	}
	cmd.Process.Kill()
	cmd.Wait()
	w.check(now.Add(2500 * time.Millisecond)) // within the interval: not checked
	w.check(now.Add(4 * time.Second))
	w.check(now.Add(6 * time.Second))
	if n := strings.Count(log.String(), "every listed process has exited"); n != 1 {
		t.Fatalf("after the last process exited: %q, want one warning", log.String())
	}
}

// TestRecordMissingPID records with a --pid that does not exist: it says
// so at start.
func TestRecordMissingPID(t *testing.T) {
	bpftest.Require(t)
	dir := t.TempDir()
	bin := buildHeatscope(t, dir)
	_, stderr, err := runHeatscope(bin, "record", "--data", filepath.Join(dir, "data"), "--listen", "", "--pid", "999999", "--duration", "1s")
	if err != nil || !strings.Contains(stderr, "none of these processes exists") || !strings.Contains(stderr, "999999") {
		t.Fatalf("record --pid 999999: %v\n%s", err, stderr)
	}
}
