package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/heatscope/heatscope/profileio"
	"github.com/heatscope/heatscope/query"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

func runImport(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("import", "import --data DIR [--source NAME] FILE...", stderr)
	data := fs.String("data", "./heatscope-data", "data directory")
	source := fs.String("source", "", "source name for the imported samples (default: each file's base name)")
	span := fs.Duration("span", time.Minute, "folded stacks carry no times: spread them over this long, ending at import time")
	foldedComm := fs.Bool("folded-comm", true, "the first frame of folded stacks is the command, as heatscope export and stackcollapse-perf.pl write them")
	replace := fs.Bool("replace", false, "replace the source's samples (by default a file the source already holds is refused)")
	timeOffset := fs.String("time-offset", "", "perf script: Unix seconds to add to perf's timestamps, i.e. the capture machine's boot time, "+
		"rounded to whole seconds so that each sample keeps its offset within its second "+
		"(date -d \"$(uptime -s)\" +%s there); default: from the header's \"captured on\", else the source keeps relative times")
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
	var offset *int64
	if *timeOffset != "" {
		ns, err := query.ParseTime("time-offset", *timeOffset, time.Now())
		if err != nil {
			return usageError{fmt.Errorf("--%w", err)}
		}
		offset = &ns
	}
	db, err := store.Open(*data, store.Options{Logger: slog.Default()})
	if err != nil {
		return err
	}
	defer db.Close()
	replaced := map[string]bool{} // --replace drops a source's earlier samples once
	for _, file := range files {
		name := *source
		if name == "" {
			name = sourceName(file)
		}
		in := importInput{path: file, source: name, replace: *replace && !replaced[name], offset: offset, offsetText: *timeOffset,
			opts: profileio.AnyOptions{FoldedStart: time.Now().Add(-*span), FoldedSpan: *span,
				Folded: profileio.FoldedOptions{FirstFrameIsComm: *foldedComm}}}
		replaced[name] = true
		st, format, err := in.run(db, stderr)
		if err != nil {
			return err
		}
		from, to := query.FormatTime(st.First), query.FormatTime(st.Last)
		if in.relative {
			from, to = fmt.Sprintf("%.6f s", float64(st.First)/1e9), fmt.Sprintf("%.6f s", float64(st.Last)/1e9)
		}
		fmt.Fprintf(stderr, "imported %s (%s) as source %q: %d samples from %s to %s\n", file, format, name, st.Samples, from, to)
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

// importInput is one file to import.
type importInput struct {
	path, source string
	replace      bool
	offset       *int64 // --time-offset, for perf scripts
	offsetText   string // as given
	opts         profileio.AnyOptions
	// relative is set by run when a perf script's times stay its own.
	relative bool
}

// run imports the file: refused when the source holds it already (unless
// replace); a perf script is placed at wall time when its header or
// --time-offset says when it was taken, and its period is read from the
// header or the samples' spacing.
func (in *importInput) run(db *store.DB, stderr io.Writer) (store.ImportStats, profileio.Format, error) {
	fail := func(err error) (store.ImportStats, profileio.Format, error) {
		return store.ImportStats{}, profileio.FormatUnknown, fmt.Errorf("import %s: %w", in.path, err)
	}
	hash, head, err := hashFile(in.path)
	if err != nil {
		return fail(err)
	}
	format, err := profileio.Detect(head)
	if err != nil {
		return fail(err)
	}
	opts := store.ImportOptions{File: hash, Replace: in.replace}
	var shift int64
	if format == profileio.FormatPerfScript {
		if shift, opts.PeriodNs, err = in.perfScript(stderr); err != nil {
			return fail(err)
		}
		opts.Relative, opts.ClockShift = in.relative, shift
	}
	f, err := os.Open(in.path)
	if err != nil {
		return fail(err)
	}
	defer f.Close()
	st, err := db.ImportWith(in.source, opts, func(fn func(*sample.Sample) error) error {
		_, err := profileio.ReadAny(f, in.opts, func(s *sample.Sample) error {
			s.Time += shift
			return fn(s)
		})
		return err
	})
	if err != nil {
		return st, format, fmt.Errorf("import %s: %w", in.path, err)
	}
	if st.Samples == 0 {
		return st, format, fmt.Errorf("import %s: no samples in the file", in.path)
	}
	return st, format, nil
}

// perfScript reads a perf script's header and first samples: how far to
// shift its times to wall time (0 when they stay relative) and its period.
func (in *importInput) perfScript(stderr io.Writer) (shift, periodNs int64, err error) {
	f, err := os.Open(in.path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	h, err := profileio.ReadPerfScriptHeader(f, time.Local)
	if err != nil {
		return 0, 0, err
	}
	wall, fromHeader := h.WallClockShift()
	switch {
	case in.offset != nil:
		shift = profileio.ShiftBySeconds(*in.offset)
		if shift != *in.offset {
			fmt.Fprintf(stderr, "%s: --time-offset %s rounded to %d whole seconds, keeping each sample's offset within its second (its heatmap row, as FlameScope shows the file)\n",
				in.path, in.offsetText, shift/int64(time.Second))
		}
	case fromHeader:
		// "captured on" is when perf record finished writing: the last
		// sample, within a few seconds.
		shift = wall
		fmt.Fprintf(stderr, "%s: placed at wall time from its header, by whole seconds: the last sample within half a second of \"captured on\" %s "+
			"(read as %s time; --time-offset to correct)\n", in.path, h.CapturedOn.Format(time.RFC3339), h.CapturedOn.Location())
	default:
		in.relative = true
		fmt.Fprintf(stderr, "%s: no \"captured on\" and \"time of last sample\" header (perf script --header) nor --time-offset: "+
			"its times stay perf's own, shown as seconds from its first sample\n", in.path)
	}
	if periodNs, err = profileio.PerfScriptPeriod(f, h); err != nil {
		return 0, 0, err
	}
	return shift, periodNs, nil
}

// hashFile returns the SHA-256 of the file at path, in hex, and its first
// profileio.DetectHeadSize bytes.
func hashFile(path string) (string, []byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	h := sha256.New()
	head := make([]byte, profileio.DetectHeadSize)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return "", nil, fmt.Errorf("read: %w", err)
	}
	head = head[:n]
	h.Write(head)
	if _, err := io.Copy(h, f); err != nil {
		return "", nil, fmt.Errorf("read: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), head, nil
}
