package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/heatscope/heatscope/internal/bpftest"
)

// TestRecordWithoutKernelLog: a kernel log that cannot be read (as in a
// container without /dev/kmsg) leaves recording going, with a warning and
// a summary that say events are off.
func TestRecordWithoutKernelLog(t *testing.T) {
	bpftest.Require(t)
	dir := t.TempDir()
	bin := buildHeatscope(t, dir)
	missing := filepath.Join(dir, "no-kmsg")
	_, stderr, err := runHeatscope(bin, "record", "--duration", "2s", "--listen", "", "--kmsg", missing,
		"--data", filepath.Join(dir, "data"))
	if err != nil {
		t.Fatalf("record without a kernel log: %v\n%s", err, stderr)
	}
	for _, want := range []string{"kernel log events are off", "kernel log events: off", missing, "samples on"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}
