package store

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOpenReadOnlyAFile opens a file as a data directory, read-only (as
// serve and export do): one error saying it is a file, and nothing
// logged about the directory's parts it has not (serve --data FILE
// warned that identity.json was "not a directory", then failed listing
// blocks/).
func TestOpenReadOnlyAFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "profile.pb.gz")
	if err := os.WriteFile(file, []byte("not a data directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	db, err := Open(file, Options{ReadOnly: true, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err == nil {
		db.Close()
		t.Fatal("a file opened as a data directory")
	}
	if want := file + " is a file, not a data directory"; !strings.Contains(err.Error(), want) || log.Len() != 0 {
		t.Fatalf("error %q, log %q; want %q and nothing logged", err, log.String(), want)
	}
}

// TestOpenReadOnlyNoRecording opens, read-only, a directory nothing was
// recorded into (a mistyped --data that exists): it opens, empty, and the
// log says the directory holds no recording; a recorder's directory,
// read the same way, logs nothing of the kind.
func TestOpenReadOnlyNoRecording(t *testing.T) {
	open := func(dir string) string {
		t.Helper()
		var log strings.Builder
		db, err := Open(dir, Options{ReadOnly: true, Logger: slog.New(slog.NewTextHandler(&log, nil))})
		if err != nil {
			t.Fatal(err)
		}
		db.Close()
		return log.String()
	}
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "notes.txt"), []byte("not heatscope's"), 0o644); err != nil {
		t.Fatal(err)
	}
	if log := open(other); !strings.Contains(log, "the data directory holds no recording") || !strings.Contains(log, other) {
		t.Errorf("a directory without a recording, read: log %q", log)
	}
	recorded := t.TempDir()
	db, err := Open(recorded, Options{Source: "host", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	if log := open(recorded); log != "" {
		t.Errorf("a recorder's directory, read: log %q", log)
	}
}
