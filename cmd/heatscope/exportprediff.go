package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/google/pprof/profile"

	"github.com/heatscope/heatscope/prediff"
	"github.com/heatscope/heatscope/profileio"
	"github.com/heatscope/heatscope/store"
)

// prediffFlags are export's flags for the pre-event diff across the
// fleet: the windows before every event of a kind as one pprof profile,
// and the windows before those as another.
type prediffFlags struct {
	kind, window, baseline *string
}

func addPrediffFlags(fs *flag.FlagSet) prediffFlags {
	return prediffFlags{
		kind: fs.String("before-events", "", "write the windows before every event of this kind (ena-reset, cpu-saturation) on every selected node "+
			"as one pprof profile (-o), and the windows before those as another (--baseline-output), for go tool pprof -diff_base"),
		window:   fs.String("window", "", "with --before-events: each window's length, a duration like 5s or seconds"),
		baseline: fs.String("baseline-output", "", "with --before-events: the file for the windows before the windows (B)"),
	}
}

// exportPrediff writes the two profiles of the pre-event diff: --from and
// --to bound the events' times (default: all), the filter flags choose
// the nodes (whose events count) and the samples.
func exportPrediff(pf prediffFlags, qf queryFlags, filters map[string]*string, from, to, format, output string, stderr io.Writer) error {
	switch {
	case *pf.kind == "":
		return usageError{errors.New("--before-events: name the kind of event (--window and --baseline-output go with it)")}
	case *pf.baseline == "":
		return usageError{errors.New("--baseline-output: name the file for the windows before the windows (B)")}
	case format != "pprof":
		return usageError{fmt.Errorf("--format %q: --before-events writes pprof only", format)}
	case output == "" || output == "-" || *pf.baseline == "-":
		return usageError{errors.New("-o and --baseline-output: name two files (not standard output)")}
	case output == *pf.baseline:
		return usageError{errors.New("-o and --baseline-output name the same file")}
	}
	kind, err := prediff.ParseKind("before-events", *pf.kind)
	if err != nil {
		return usageError{fmt.Errorf("--%w", err)}
	}
	window, err := prediff.ParseWindow("window", *pf.window)
	if err != nil {
		return usageError{fmt.Errorf("--%w", err)}
	}
	f, err := parseFilterFlags(filters)
	if err != nil {
		return err
	}
	r, err := timeFlags(from, to, store.Range{From: 0, To: math.MaxInt64})
	if err != nil {
		return err
	}
	db, _, closeBucket, err := qf.open("export", false)
	if err != nil {
		return err
	}
	defer closeBucket()
	defer db.Close()
	a, b, res, warnings, err := prediff.Profiles(context.Background(), db, prediff.Options{Kind: kind, Window: window, Range: r, Filter: f, MaxEvents: prediff.MaxEvents})
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	printWarnings(stderr, warnings)
	if len(res.Events) == 0 {
		var kinds []string
		for k, n := range res.Kinds {
			kinds = append(kinds, fmt.Sprintf("%s (%d)", k, n))
		}
		slices.Sort(kinds)
		if len(kinds) == 0 {
			return fmt.Errorf("no %s event on the selected nodes: no event at all there", kind)
		}
		return fmt.Errorf("no %s event on the selected nodes; their events are of kinds %s", kind, strings.Join(kinds, ", "))
	}
	if res.WithSamples == 0 {
		return fmt.Errorf("none of the %d %s events has a sample (passing the filters) in the %v before it or the %v before that",
			len(res.Events), kind, time.Duration(window), time.Duration(window))
	}
	for file, p := range map[string]*profile.Profile{output: a, *pf.baseline: b} {
		if err := writeProfile(file, p); err != nil {
			return err
		}
	}
	if res.More {
		fmt.Fprintf(stderr, "note: only the first %d %s events were taken\n", len(res.Events), kind)
	}
	nodes := fmt.Sprintf("%d nodes", len(res.Nodes))
	if len(res.Nodes) == 1 {
		nodes = "1 node"
	}
	fmt.Fprintf(stderr, "the %v before each of %d %s events on %s: %.3f cpu-seconds in %s (A); the %v before those: %.3f cpu-seconds in %s (B)\n"+
		"compare them: go tool pprof -diff_base %s %s\n",
		time.Duration(window), len(res.Events), kind, nodes, float64(res.A)/1e9, output, time.Duration(window), float64(res.B)/1e9, *pf.baseline,
		*pf.baseline, output)
	return nil
}

func writeProfile(path string, p *profile.Profile) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create output: %w", err)
	}
	if err := profileio.WritePprof(f, p); err != nil {
		f.Close()
		os.Remove(path)
		return fmt.Errorf("export %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("export %s: %w", path, err)
	}
	return nil
}
