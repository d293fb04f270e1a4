package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/heatscope/heatscope/profileio"
	"github.com/heatscope/heatscope/query"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

func runExport(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("export", "export [--data DIR] [--objstore-config FILE] [--from T] [--to T] [filter flags] --format pprof|folded|perf-script -o FILE", stderr)
	qf := addQueryFlags(fs, "data directory")
	from := fs.String("from", "", "start: RFC 3339, Unix seconds, or a duration ago like -5m (default: the first sample)")
	to := fs.String("to", "", "end, as --from (default: just after the last sample)")
	format := fs.String("format", "pprof", "output format: pprof, folded or perf-script")
	output := fs.String("o", "", "file to write (- for standard output)")
	fs.StringVar(output, "output", "", "same as -o")
	nodeFrames := fs.Bool("node-frame", false, "folded: start each line with the sample's node as a frame (default: when the filter selects more than one node)")
	addresses := fs.Bool("addresses", false, "folded: keep each unresolved frame's address ([gzip+0x4ce8]) instead of one frame per module ([gzip]); pprof and perf-script always keep them")
	filters := filterFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	nodeFramesSet := false
	fs.Visit(func(fl *flag.Flag) { nodeFramesSet = nodeFramesSet || fl.Name == "node-frame" })
	if *output == "" {
		return usageError{errors.New("-o: name the file to write (- for standard output)")}
	}
	if *format != "pprof" && *format != "folded" && *format != "perf-script" {
		return usageError{fmt.Errorf("--format %q: want pprof, folded or perf-script", *format)}
	}
	f, err := parseFilterFlags(filters)
	if err != nil {
		return err
	}
	db, _, closeBucket, err := qf.open("export")
	if err != nil {
		return err
	}
	defer closeBucket()
	defer db.Close()
	r, period, err := exportRange(db, &f, *from, *to)
	if err != nil {
		return err
	}

	var w io.Writer = stdout
	var file *os.File
	if *output != "-" {
		if file, err = os.Create(*output); err != nil {
			return fmt.Errorf("create output: %w", err)
		}
		defer file.Close()
		w = file
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	ctx := context.Background()
	var n int
	var warnings store.Warnings
	switch *format {
	case "pprof":
		var p = profileio.NewPprofBuilder(period)
		p.KeepTimestamps(true)
		warnings, err = query.Samples(ctx, db, r, &f, func(s *sample.Sample) error { n++; p.Add(s); return nil })
		if err == nil {
			err = profileio.WritePprof(bw, p.Profile())
		}
	case "folded":
		fb := profileio.NewFoldedBuilder()
		if !nodeFramesSet {
			*nodeFrames = len(selectedNodes(db, &f)) > 1
		}
		fb.NodeFrames(*nodeFrames)
		frames := query.GroupAddresses
		if *addresses {
			frames = query.KeepAddresses
		}
		warnings, err = query.Samples(ctx, db, r, &f, func(s *sample.Sample) error { n++; fb.Add(frames.Sample(s)); return nil })
		if err == nil {
			_, err = fb.WriteTo(bw)
		}
	case "perf-script":
		pw := profileio.NewPerfScriptWriter(bw)
		pw.SetPeriod(period)
		warnings, err = query.Samples(ctx, db, r, &f, func(s *sample.Sample) error { n++; return pw.Add(s) })
		if err == nil {
			err = pw.Flush()
		}
	}
	if err == nil {
		err = bw.Flush()
	}
	if err == nil && file != nil {
		err = file.Close()
	}
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	for _, w := range warnings {
		fmt.Fprintf(stderr, "warning: skipped: %v\n", w)
	}
	fmt.Fprintf(stderr, "exported %d samples from %s to %s (%s)\n", n,
		time.Unix(0, r.From).UTC().Format(time.RFC3339Nano), time.Unix(0, r.To).UTC().Format(time.RFC3339Nano), *format)
	return nil
}

// exportRange resolves --from and --to, defaulting to the selected sources'
// whole span, and picks the sampling period to report.
func exportRange(db *store.DB, f *store.Filter, from, to string) (store.Range, int64, error) {
	period := int64(time.Second / 99)
	var r store.Range
	first, last, found := int64(0), int64(0), false
	for _, s := range db.Sources() {
		if len(f.Sources) > 0 && !contains(f.Sources, s.Name) {
			continue
		}
		if !found {
			first, last, found = s.First, s.Last, true
		}
		first, last = min(first, s.First), max(last, s.Last)
		if s.PeriodNs > 0 {
			period = s.PeriodNs
		}
	}
	now := time.Now()
	var err error
	switch {
	case from != "":
		if r.From, err = query.ParseTime("from", from, now); err != nil {
			return r, 0, usageError{fmt.Errorf("--%w", err)}
		}
	case found:
		r.From = first
	default:
		return r, 0, errors.New("the data directory holds no samples for this filter's sources")
	}
	switch {
	case to != "":
		if r.To, err = query.ParseTime("to", to, now); err != nil {
			return r, 0, usageError{fmt.Errorf("--%w", err)}
		}
	case found:
		r.To = last + 1
	default:
		r.To = now.UnixNano()
	}
	if r.To <= r.From {
		return r, 0, usageError{errors.New("--to must be after --from")}
	}
	return r, period, nil
}

// selectedNodes lists the nodes f selects of those db holds.
func selectedNodes(db *store.DB, f *store.Filter) []string {
	var names []string
	for _, n := range db.Nodes() {
		if f.KeepsNode(n.Name, n.Labels) {
			names = append(names, n.Name)
		}
	}
	return names
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
