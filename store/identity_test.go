package store

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/synth"
)

// TestIdentity: a data directory gets an instance id at its first start,
// keeps it across restarts, and writes it into every block it records; a
// reader sees it; a damaged identity file stops a writer with its path.
func TestIdentity(t *testing.T) {
	dir := t.TempDir()
	start := time.Now().Add(-time.Hour).UnixNano()
	db, err := Open(dir, Options{Source: "host", Node: "a", BlockDuration: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	id := db.Identity()
	if !ValidInstance(id.Instance) || id.Node != "a" {
		t.Fatalf("identity at the first start: %+v", id)
	}
	appendSynth(t, db, synth.Config{CPUs: 2, Hz: 99, Start: start, Seconds: 60, Seed: 1})
	db.Close()

	db, err = Open(dir, Options{Source: "host", Node: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if got := db.Identity().Instance; got != id.Instance {
		t.Fatalf("instance after a restart: %s, want %s", got, id.Instance)
	}
	db.Close()

	other, err := Open(t.TempDir(), Options{Source: "host", Node: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if other.Identity().Instance == id.Instance {
		t.Fatal("two data directories have one instance id")
	}
	other.Close()

	r, err := Open(dir, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := r.Identity().Instance; got != id.Instance {
		t.Errorf("a reader's identity: %s, want %s", got, id.Instance)
	}
	blocks := metasOf(r)
	if len(blocks) < 3 {
		t.Fatalf("%d blocks, want at least 3", len(blocks))
	}
	for _, m := range blocks {
		if m.Instance != id.Instance {
			t.Errorf("block %s: instance %q, want %q", m.ID, m.Instance, id.Instance)
		}
	}

	os.WriteFile(filepath.Join(dir, identityFile), []byte(`{"version":1,"instance":"not hex"}`), 0o644)
	_, err = Open(dir, Options{Source: "host", Node: "a"})
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, identityFile)) || !strings.Contains(err.Error(), "remove it") {
		t.Fatalf("Open with a damaged identity: %v, want an error naming the file", err)
	}
}

// TestRenamedDirectoryKeepsItsWALNode: samples a crash left in the WAL
// while recording as node b are written, at the next start as b2, into a
// block of node b: blocks keep the node they were recorded as.
func TestRenamedDirectoryKeepsItsWALNode(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{Source: "host", Node: "b"})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	n := len(appendSynth(t, db, synth.Config{CPUs: 2, Hz: 99, Start: time.Now().Add(-time.Minute).UnixNano(), Seconds: 10, Seed: 3}))
	db.Flush()
	crashed := t.TempDir()
	copyDir(t, dir, crashed)
	os.Remove(filepath.Join(crashed, "lock"))
	renamed, err := Open(crashed, Options{Source: "host", Node: "b2"})
	if err != nil {
		t.Fatal(err)
	}
	defer renamed.Close()
	blocks := metasOf(renamed)
	if len(blocks) != 1 || blocks[0].Node != "b" || blocks[0].Samples != n || blocks[0].Instance != db.Identity().Instance {
		t.Fatalf("blocks after the renamed restart: %+v; want one of node b, %d samples, instance %s", blocks, n, db.Identity().Instance)
	}
	if got := renamed.Identity().Node; got != "b2" {
		t.Errorf("identity's node after the restart: %q, want b2", got)
	}
}

// metasOf returns the metas of db's blocks.
func metasOf(db *DB) []Meta {
	db.mu.RLock()
	defer db.mu.RUnlock()
	out := make([]Meta, len(db.blocks))
	for i, b := range db.blocks {
		out[i] = b.Meta
	}
	return out
}

// FuzzReadIdentity: any identity.json is read or refused with an error
// naming it, never taken with a malformed instance id.
func FuzzReadIdentity(f *testing.F) {
	f.Add([]byte(`{"version":1,"instance":"3f9c21d04e5b6a78","created":1764021600000,"node":"a"}`))
	f.Add([]byte(`{"version":2,"instance":"3f9c21d04e5b6a78"}`))
	f.Add([]byte(`{"version":1,"instance":"3F9C21D04E5B6A78"}`))
	f.Add([]byte(`{"version":1`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, identityFile), b, 0o644); err != nil {
			t.Fatal(err)
		}
		id, ok, err := readIdentity(dir)
		switch {
		case err != nil:
			if ok || !strings.Contains(err.Error(), filepath.Join(dir, identityFile)) {
				t.Fatalf("refused without naming the file: %v", err)
			}
		case !ok || !ValidInstance(id.Instance) || id.Version != 1:
			t.Fatalf("taken: %+v, ok %v", id, ok)
		}
	})
}
