package diskcache

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWriteReadPrune: a file is written whole and read back; a key that
// cannot name a file, and a cache without a directory, write nothing;
// beyond the bound the least recently used file goes (reading one makes
// it recent), and files of other extensions stay.
func TestWriteReadPrune(t *testing.T) {
	d := Dir{Path: filepath.Join(t.TempDir(), "c"), Ext: ".x", MaxBytes: 25, What: "test cache", Pruned: &PruneStats{}}
	ten := bytes.Repeat([]byte("a"), 10)
	if err := d.Write("0000000a", ten); err != nil {
		t.Fatal(err)
	}
	if got, err := d.Read("0000000a"); err != nil || !bytes.Equal(got, ten) || !d.Has("0000000a") {
		t.Fatalf("Read = %q, %v (Has %v); want what was written", got, err, d.Has("0000000a"))
	}
	if err := d.Write("../escape", ten); err == nil {
		t.Error("Write with a key that is not a build id: no error")
	}
	if _, err := (Dir{}).Read("0000000a"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Read without a directory: %v, want not exist", err)
	}
	if err := (Dir{}).Write("0000000a", ten); err == nil {
		t.Error("Write without a directory: no error")
	}
	other := filepath.Join(d.Path, "kallsyms.cache")
	if err := os.WriteFile(other, bytes.Repeat([]byte("k"), 100), 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(d.File("0000000a"), old, old); err != nil {
		t.Fatal(err)
	}
	if err := d.Write("0000000b", ten); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Read("0000000a"); err != nil { // now the most recent
		t.Fatal(err)
	}
	if err := d.Write("0000000c", ten); err != nil { // 30 bytes: one must go
		t.Fatal(err)
	}
	for key, want := range map[string]bool{"0000000a": true, "0000000b": false, "0000000c": true} {
		if d.Has(key) != want {
			t.Errorf("after pruning: Has(%s) = %v, want %v", key, !want, want)
		}
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("a file of another extension was pruned: %v", err)
	}
	if d.Pruned.Files.Load() != 1 || d.Pruned.Bytes.Load() != 10 {
		t.Errorf("PruneStats: %d files, %d bytes; want 1, 10", d.Pruned.Files.Load(), d.Pruned.Bytes.Load())
	}
}
