package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/heatscope/heatscope/profileio"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

func runImport(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("import", "import --data DIR [--source NAME] FILE...", stderr)
	data := fs.String("data", "./heatscope-data", "data directory")
	source := fs.String("source", "", "source name for the imported samples (default: each file's base name)")
	span := fs.Duration("span", time.Minute, "folded stacks carry no times: spread them over this long, ending at import time")
	foldedComm := fs.Bool("folded-comm", true, "the first frame of folded stacks is the command, as heatscope export and stackcollapse-perf.pl write them")
	if err := parseQuietly(fs, args); err != nil {
		return err
	}
	files := fs.Args()
	if len(files) == 0 {
		return usageError{errors.New("name at least one file to import")}
	}
	if *span <= 0 {
		return usageError{fmt.Errorf("--span %v: must be positive", *span)}
	}
	db, err := store.Open(*data, store.Options{Logger: slog.Default()})
	if err != nil {
		return err
	}
	defer db.Close()
	for _, file := range files {
		name := *source
		if name == "" {
			name = sourceName(file)
		}
		opts := profileio.AnyOptions{FoldedStart: time.Now().Add(-*span), FoldedSpan: *span,
			Folded: profileio.FoldedOptions{FirstFrameIsComm: *foldedComm}}
		st, format, err := importFile(db, file, name, opts)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "imported %s (%s) as source %q: %d samples from %s to %s\n", file, format, name, st.Samples,
			time.Unix(0, st.First).UTC().Format(time.RFC3339Nano), time.Unix(0, st.Last).UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// sourceName is a file's base name without its extensions.
func sourceName(path string) string {
	base := filepath.Base(path)
	if i := strings.IndexByte(base, '.'); i > 0 {
		base = base[:i]
	}
	return base
}

func importFile(db *store.DB, path, source string, opts profileio.AnyOptions) (store.ImportStats, profileio.Format, error) {
	f, err := os.Open(path)
	if err != nil {
		return store.ImportStats{}, profileio.FormatUnknown, fmt.Errorf("import: %w", err)
	}
	defer f.Close()
	var format profileio.Format
	st, err := db.Import(source, 0, func(fn func(*sample.Sample) error) error {
		var err error
		format, err = profileio.ReadAny(f, opts, fn)
		return err
	})
	if err != nil {
		return st, format, fmt.Errorf("import %s: %w", path, err)
	}
	if st.Samples == 0 {
		return st, format, fmt.Errorf("import %s: no samples in the file", path)
	}
	return st, format, nil
}
