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
