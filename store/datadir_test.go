package store

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDataDirForCopies: a copy of a data directory sees its sealed blocks
// (not one being written), its event segments (not other files), and of a
// segment only its whole, intact pages.
func TestDataDirForCopies(t *testing.T) {
	dir := t.TempDir()
	if blocks, err := LocalBlocks(dir); err != nil || len(blocks) != 0 {
		t.Fatalf("an empty directory: blocks %v, %v", blocks, err)
	}
	if segs, err := EventSegmentFiles(dir); err != nil || len(segs) != 0 {
		t.Fatalf("an empty directory: segments %v, %v", segs, err)
	}
	db, err := Open(dir, Options{Source: "host", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	base := time.Now().UnixNano()
	for i := range 3 {
		if err := db.AppendEvent(testEvent(base+int64(i)*1e9, "kmsg", "ena reset")); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(dir, blocksDir, "1795237380000-0badf00d"), filepath.Join(dir, blocksDir, "1795237500000-00c0ffee.tmp")} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, eventsDir, "notes.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	blocks, err := LocalBlocks(dir)
	if err != nil || len(blocks) != 1 || blocks[0].ID != "1795237380000-0badf00d" ||
		blocks[0].DataPath() != filepath.Join(dir, "blocks", "1795237380000-0badf00d", "data") ||
		blocks[0].MetaPath() != filepath.Join(dir, "blocks", "1795237380000-0badf00d", "meta.json") {
		t.Fatalf("blocks %+v, %v; want the sealed block only", blocks, err)
	}
	segs, err := EventSegmentFiles(dir)
	if err != nil || len(segs) != 1 || segs[0].Name != EventSegmentName(1) || segs[0].Seq != 1 {
		t.Fatalf("segments %+v, %v; want segment 1 only", segs, err)
	}
	whole, err := os.ReadFile(segs[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := segs[0].WholePages(); err != nil || len(got) != len(whole) {
		t.Fatalf("a segment of whole pages: %d of %d bytes, %v", len(got), len(whole), err)
	}
	var ends []int64 // where each page ends
	pages := newEventPageReader(bytes.NewReader(whole), segs[0].Path)
	for {
		if _, err := pages.next(); err != nil {
			break
		}
		ends = append(ends, pages.offset)
	}
	if len(ends) != 3 || ends[2] != int64(len(whole)) {
		t.Fatalf("pages end at %v, want 3 pages in %d bytes", ends, len(whole))
	}
	// A page being appended, and a damaged last page: the pages before it.
	damaged := append([]byte(nil), whole...)
	damaged[len(damaged)-1] ^= 0xff
	for what, b := range map[string][]byte{"a torn last page": whole[:len(whole)-3], "a damaged last page": damaged} {
		if err := os.WriteFile(segs[0].Path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if got, err := segs[0].WholePages(); err != nil || int64(len(got)) != ends[1] || !bytes.Equal(got, whole[:ends[1]]) {
			t.Errorf("%s: %d bytes, %v; want the first two pages' %d", what, len(got), err, ends[1])
		}
	}
	if err := os.Remove(segs[0].Path); err != nil {
		t.Fatal(err)
	}
	if _, err := segs[0].WholePages(); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a deleted segment: %v, want fs.ErrNotExist", err)
	}
}

// TestLocalBlockReadMeta: a copy reads a block's meta as the store does:
// the file's bytes unchanged with the parsed meta, or an error for a meta
// the store would refuse (not JSON, a newer format version, another
// block's id); a deleted block's error says it does not exist.
func TestLocalBlockReadMeta(t *testing.T) {
	dir := t.TempDir()
	b := LocalBlock{ID: "1795237380000-0badf00d", Dir: filepath.Join(dir, "1795237380000-0badf00d")}
	if _, _, err := b.ReadMeta(); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a deleted block: %v, want an error wrapping fs.ErrNotExist", err)
	}
	if err := os.MkdirAll(b.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	good := fmt.Sprintf(`{"version":%d,"id":%q,"level":1,"samples":7}`, FormatVersion, b.ID)
	for _, tc := range []struct{ what, meta, wantErr string }{
		{"a meta this heatscope reads", good, ""},
		{"not JSON", good[:len(good)/2], "corrupt"},
		{"a newer format version", fmt.Sprintf(`{"version":%d,"id":%q}`, FormatVersion+1, b.ID), "format version"},
		{"version 0", fmt.Sprintf(`{"id":%q}`, b.ID), "format version"},
		{"another block's id", fmt.Sprintf(`{"version":%d,"id":"1795237380000-00c0ffee"}`, FormatVersion), "names block"},
	} {
		if err := os.WriteFile(b.MetaPath(), []byte(tc.meta), 0o644); err != nil {
			t.Fatal(err)
		}
		m, raw, err := b.ReadMeta()
		if tc.wantErr == "" {
			if err != nil || m.ID != b.ID || m.Samples != 7 || string(raw) != tc.meta {
				t.Errorf("%s: %+v, %q, %v", tc.what, m, raw, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), b.ID) {
			t.Errorf("%s: %v, want an error naming the block and %q", tc.what, err, tc.wantErr)
		}
	}
}
