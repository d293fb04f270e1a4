package main

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// TestExportNodeOfASharedSource: node a and node b both recorded as
// source "vm" (cloned VMs share a hostname); exporting node a's "vm"
// without --from and --to covers node a's span of it, not the source's
// span on both nodes.
func TestExportNodeOfASharedSource(t *testing.T) {
	dir := t.TempDir()
	start := time.Now().Add(-time.Hour).Truncate(time.Second)
	spans := map[string][2]time.Duration{"a": {0, 10 * time.Second}, "b": {20 * time.Second, 40 * time.Second}}
	for _, node := range []string{"a", "b"} {
		db, err := store.Open(dir, store.Options{Source: "vm", Node: node, PeriodNs: int64(10 * time.Millisecond)})
		if err != nil {
			t.Fatal(err)
		}
		for off := spans[node][0]; off < spans[node][1]; off += 10 * time.Millisecond {
			s := sample.Sample{Time: start.Add(off).UnixNano(), PID: 7, TID: 7, Comm: "spin",
				Stack: []sample.Frame{{Function: "spin", Module: "/bin/spin", Kind: sample.KindUser}}}
			if err := db.Append(&s); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	var out, errb bytes.Buffer
	args := []string{"export", "--data", dir, "--source", "vm", "--node", "a", "--format", "folded", "-o", filepath.Join(t.TempDir(), "a.folded")}
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("export: exit %d: %s", code, errb.String())
	}
	last := start.Add(spans["a"][1] - 10*time.Millisecond).UTC().Format("15:04:05.99")
	if want := fmt.Sprintf("exported %d samples", 1000); !strings.Contains(errb.String(), want) || !strings.Contains(errb.String(), last) {
		t.Errorf("export of node a's vm: %q, want %q up to node a's last sample (%s)", errb.String(), want, last)
	}

	// A node the data does not hold is named as such, with the nodes it
	// does hold, as an unknown source is: not "no samples" of a node
	// that might exist.
	out.Reset()
	errb.Reset()
	args = []string{"export", "--data", dir, "--node", "a,nosuch", "--format", "folded", "-o", filepath.Join(t.TempDir(), "x.folded")}
	if code := run(args, &out, &errb); code != 2 || !strings.Contains(errb.String(), `--node: no node "nosuch": the data holds a, b`) {
		t.Errorf("export --node a,nosuch: exit %d, %q; want 2 and the unknown node named beside a and b", code, errb.String())
	}
}
