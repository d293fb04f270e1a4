package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/heatscope/heatscope/internal/buildinfo"
	"github.com/heatscope/heatscope/otlpprofile"
	"github.com/heatscope/heatscope/profileio"
	"github.com/heatscope/heatscope/query"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

func runExport(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("export", "export [--data DIR] [--objstore-config FILE] [--from T] [--to T] [filter flags] --format pprof|folded|perf-script|otlp -o FILE\n"+
		"       export [--data DIR] [--objstore-config FILE] [filter flags] --before-events KIND --window DUR -o A.pb.gz --baseline-output B.pb.gz", stderr)
	qf := addQueryFlags(fs, "data directory")
	from := fs.String("from", "", "start: RFC 3339, Unix seconds, or a duration ago like -5m (default: the first sample)")
	to := fs.String("to", "", "end, as --from (default: just after the last sample)")
	format := fs.String("format", "pprof", "output format: pprof, folded, perf-script or otlp (the protobuf of an OTLP ExportProfilesServiceRequest)")
	output := fs.String("o", "", "file to write (- for standard output)")
	fs.StringVar(output, "output", "", "same as -o")
	nodeFrames := fs.Bool("node-frame", false, "folded: start each line with the sample's node as a frame (default: when the filter selects more than one node)")
	addresses := fs.Bool("addresses", false, "folded: keep each unresolved frame's address ([gzip+0x4ce8]) instead of one frame per module ([gzip]); pprof and perf-script always keep them")
	filters := filterFlags(fs)
	pre := addPrediffFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *pre.kind != "" || *pre.window != "" || *pre.baseline != "" {
		return exportPrediff(pre, qf, filters, *from, *to, *format, *output, stderr)
	}
	nodeFramesSet := false
	fs.Visit(func(fl *flag.Flag) { nodeFramesSet = nodeFramesSet || fl.Name == "node-frame" })
	if *output == "" {
		return usageError{errors.New("-o: name the file to write (- for standard output)")}
	}
	if *format != "pprof" && *format != "folded" && *format != "perf-script" && *format != "otlp" {
		return usageError{fmt.Errorf("--format %q: want pprof, folded, perf-script or otlp", *format)}
	}
	f, err := parseFilterFlags(filters)
	if err != nil {
		return err
	}
	db, _, closeBucket, err := qf.open("export", false)
	if err != nil {
		return err
	}
	defer closeBucket()
	defer db.Close()
	if err := query.UnknownSources(db.Sources(), f.Sources); err != nil {
		return usageError{fmt.Errorf("--source: %w", err)}
	}
	if err := query.UnknownNodes(db.Nodes(), f.Nodes); err != nil {
		return usageError{fmt.Errorf("--node: %w", err)}
	}
	r, err := exportRange(db, &f, *from, *to)
	if err != nil {
		return err
	}
	// A source on its capture's own clock is written in seconds on it,
	// never as a date in 1970.
	relative := query.Relative(db.Sources(), f.Sources)

	if !nodeFramesSet {
		*nodeFrames = len(selectedNodes(db, &f)) > 1
	}
	n, warnings, err := writeOutput(*output, stdout, func(w io.Writer) (int, store.Warnings, error) {
		return exportSamples(db, r, &f, *format, foldedOptions{nodeFrames: *nodeFrames, addresses: *addresses}, w, stderr)
	})
	if err != nil {
		return err
	}
	printWarnings(stderr, warnings) // first: they may say why nothing was selected
	if n == 0 {
		// Why: the window holds no data, or none of its N samples passes
		// the filter, as the API's message says it.
		why, _, err := query.Explain(context.Background(), db, r, &f, query.DescribeFilter(func(name string) string { return *filters[name] }), warnings)
		if err != nil {
			return fmt.Errorf("export: %w", err)
		}
		return why
	}
	reportExport(stderr, n, r, relative, *format, db.InstanceNotices())
	return nil
}

// writeOutput runs write into the file named output (- for stdout),
// buffered, and returns what it returned, its error and the flush's
// wrapped as export's. A write that exported nothing leaves no file.
func writeOutput(output string, stdout io.Writer, write func(io.Writer) (int, store.Warnings, error)) (int, store.Warnings, error) {
	var w io.Writer = stdout
	var file *os.File
	if output != "-" {
		var err error
		if file, err = os.Create(output); err != nil {
			return 0, nil, fmt.Errorf("create output: %w", err)
		}
		defer file.Close()
		w = file
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	n, warnings, err := write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil && file != nil {
		err = file.Close()
	}
	if err != nil {
		return n, warnings, fmt.Errorf("export: %w", err)
	}
	if n == 0 && file != nil {
		os.Remove(output)
	}
	return n, warnings, nil
}

// reportExport says what export wrote: the instances of a node shown
// apart, the range in wall time or, for a capture on its own clock, in
// seconds on it.
func reportExport(stderr io.Writer, n int, r store.Range, relative bool, format string, notices store.Warnings) {
	for _, w := range notices {
		fmt.Fprintf(stderr, "warning: %v\n", w)
	}
	clock := ""
	if relative {
		clock = " on the capture's own clock"
	}
	fmt.Fprintf(stderr, "exported %d samples %s%s (%s)\n", n, query.Window(r, relative), clock, format)
}

// exportRange resolves --from and --to, an end not given defaulting to the
// selected sources' first or last sample. A range that cannot hold a
// sample says where the data is.
func exportRange(db queryStore, f *store.Filter, from, to string) (store.Range, error) {
	data, found := query.Span(db.SourcesOf(f), f.Sources)
	open, err := timeFlags(from, to, store.Range{From: math.MinInt64, To: math.MaxInt64})
	if err != nil || from != "" && to != "" {
		return open, err
	}
	r := open
	if !found {
		return r, &query.NoSamplesError{Range: open}
	}
	relative := query.Relative(db.Sources(), f.Sources)
	if from == "" {
		r.From = data.From
	}
	if to == "" {
		r.To = data.To
	}
	if r.To <= r.From {
		// The end given lies before the data starts, or after it ends.
		return r, &query.NoSamplesError{Range: open, Data: data, HasData: true, Relative: relative}
	}
	return r, nil
}

// timeFlags parses --from and --to, an end not given left at dflt's, and
// checks that the range is not empty.
func timeFlags(from, to string, dflt store.Range) (store.Range, error) {
	r, now := dflt, time.Now()
	var err error
	if from != "" {
		if r.From, err = query.ParseTime("from", from, now); err != nil {
			return r, usageError{fmt.Errorf("--%w", err)}
		}
	}
	if to != "" {
		if r.To, err = query.ParseTime("to", to, now); err != nil {
			return r, usageError{fmt.Errorf("--%w", err)}
		}
	}
	if r.To <= r.From {
		return r, usageError{errors.New("--to must be after --from")}
	}
	return r, nil
}

// foldedOptions are export's options of the folded format.
type foldedOptions struct {
	nodeFrames bool // each line starts with the sample's node
	addresses  bool // unresolved frames keep their address
}

// exportSamples writes the samples of r that f selects to w in format,
// each weighing its own period (the overhead guard may have changed the
// rate within the range), and returns how many it wrote and what it had
// to skip.
func exportSamples(db queryStore, r store.Range, f *store.Filter, format string, fo foldedOptions, w io.Writer, stderr io.Writer) (n int, warnings store.Warnings, err error) {
	ctx := context.Background()
	switch format {
	case "pprof":
		var p *profileio.PprofBuilder
		warnings, err = query.Samples(ctx, db, r, f, func(s *sample.Sample, period int64) error {
			if p == nil {
				p = profileio.NewPprofBuilder(period)
				p.KeepTimestamps(true)
			}
			n++
			p.SetPeriod(period)
			p.Add(s)
			return nil
		})
		if err == nil && p != nil {
			err = profileio.WritePprof(w, p.Profile())
		}
	case "folded":
		fb := profileio.NewFoldedBuilder()
		fb.NodeFrames(fo.nodeFrames)
		frames := query.GroupAddresses
		if fo.addresses {
			frames = query.KeepAddresses
		}
		warnings, err = query.Samples(ctx, db, r, f, func(s *sample.Sample, period int64) error {
			n++
			fb.SetPeriod(period)
			fb.Add(frames.Sample(s))
			return nil
		})
		if err == nil {
			_, err = fb.WriteTo(w)
		}
		if short, long, mixed := fb.MixedPeriods(); mixed {
			fmt.Fprintf(stderr, "note: the samples were taken at %s to %s: each weighs its own period, and the counts are samples at %s\n",
				hz(long), hz(short), hz(short))
		}
	case "otlp":
		// One request, a resource per node (the sample's own).
		e := otlpprofile.NewEncoder(buildinfo.Read().Version, "", 0)
		warnings, err = query.Samples(ctx, db, r, f, func(s *sample.Sample, period int64) error {
			n++
			e.SetPeriod(period)
			e.Add(s)
			return nil
		})
		if err == nil && n > 0 {
			var b []byte
			if b, err = otlpprofile.MarshalRequest(e.Profiles()); err == nil {
				_, err = w.Write(b)
			}
		}
	case "perf-script":
		pw := profileio.NewPerfScriptWriter(w)
		warnings, err = query.Samples(ctx, db, r, f, func(s *sample.Sample, period int64) error {
			n++
			pw.SetPeriod(period)
			return pw.Add(s)
		})
		if err == nil {
			err = pw.Flush()
		}
	}
	return n, warnings, err
}

// selectedNodes lists the nodes f selects of those db holds.
func selectedNodes(db queryStore, f *store.Filter) []string {
	var names []string
	for _, n := range db.Nodes() {
		if f.KeepsNode(n.Name, n.Labels) {
			names = append(names, n.Name)
		}
	}
	return names
}

// hz writes a sampling period as a frequency.
func hz(periodNs int64) string { return fmt.Sprintf("%.4g Hz", sample.FrequencyOf(periodNs)) }

// printWarnings writes a query's warnings: data skipped as unreadable, and
// samples its filter could not judge.
func printWarnings(w io.Writer, warnings store.Warnings) {
	for _, warning := range warnings {
		if unknown := (*store.CgroupPathsUnknown)(nil); errors.As(warning, &unknown) {
			fmt.Fprintf(w, "warning: %v\n", warning)
			continue
		}
		fmt.Fprintf(w, "warning: skipped: %v\n", warning)
	}
}
