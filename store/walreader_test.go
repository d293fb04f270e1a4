package store

import (
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/synth"
)

// TestReaderOfALiveDirectory: serve --data beside a running recorder reads
// the samples still in the recorder's WAL at its start; once the recorder
// writes them as a block, a Refresh reads them from the block, once.
func TestReaderOfALiveDirectory(t *testing.T) {
	dir := t.TempDir()
	w, err := Open(dir, Options{Source: "node-a", Node: "node-a", BlockDuration: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	n := len(appendSynth(t, w, synth.Config{CPUs: 2, Hz: 99, Start: time.Now().Add(-time.Minute).UnixNano(), Seconds: 20}))
	w.Flush()
	r, err := Open(dir, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := perNode(t, &r.Reader, Filter{}); got["node-a"] != n {
		t.Errorf("before the block: %v, want node-a %d (from the WAL)", got, n)
	}
	if err := w.Close(); err != nil { // the head written as a block
		t.Fatal(err)
	}
	if err := r.Refresh(); err != nil {
		t.Fatal(err)
	}
	if got := perNode(t, &r.Reader, Filter{}); got["node-a"] != n {
		t.Errorf("after the block: %v, want node-a %d once", got, n)
	}
}
