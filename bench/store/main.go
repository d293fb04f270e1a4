// Command store benchmarks heatscope's store and queries.
//
//	store gen -dir D [-hours 24] [-cpus 64] [-hz 99]   build a synthetic store
//	store query -dir D                                  time the queries on it
//	store perfscript-make -in F -out G [-copies 10]     replicate a perf script, shifting times
//	store perfscript -dir D -file G                     time import, heatmap and flame graph
//
// Timings are medians of several runs (and the first, cold, run); the query
// process reports its own peak RSS. Run from the repository root, e.g.
// go run ./bench/store query -dir /var/tmp/heatscope-bench-store.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"regexp"
	"runtime/pprof"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/profileio"
	"github.com/heatscope/heatscope/query"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

func main() {
	log.SetFlags(0)
	if len(os.Args) < 2 {
		log.Fatal("usage: store gen|query|perfscript-make|perfscript [flags]")
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	dir := fs.String("dir", "/var/tmp/heatscope-bench-store", "data directory")
	hours := fs.Float64("hours", 24, "hours of data to generate")
	cpus := fs.Int("cpus", 64, "CPUs to simulate")
	hz := fs.Int("hz", 99, "sampling frequency")
	runs := fs.Int("runs", 7, "runs per query")
	in := fs.String("in", "", "perf script to replicate")
	out := fs.String("out", "", "replicated perf script to write")
	copies := fs.Int("copies", 10, "copies of the perf script")
	file := fs.String("file", "", "perf script to import")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	fs.Parse(os.Args[2:])
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			log.Fatal(err)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	var err error
	switch os.Args[1] {
	case "gen":
		err = gen(*dir, *hours, *cpus, *hz)
	case "query":
		err = queries(*dir, *runs)
	case "perfscript-make":
		err = replicate(*in, *out, *copies)
	case "perfscript":
		err = perfScript(*dir, *file, *runs)
	default:
		err = fmt.Errorf("unknown subcommand %q", os.Args[1])
	}
	if err != nil {
		pprof.StopCPUProfile()
		log.Fatal(err)
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// gen imports a synthetic recording ending now, an hour at a time.
func gen(dir string, hours float64, cpus, hz int) error {
	db, err := store.Open(dir, store.Options{Source: "bench", Logger: quiet()})
	if err != nil {
		return err
	}
	defer db.Close()
	end := time.Now().Truncate(time.Hour)
	start := end.Add(-time.Duration(hours * float64(time.Hour)))
	began := time.Now()
	var total store.ImportStats
	for h := start; h.Before(end); h = h.Add(time.Hour) {
		g := synth.New(synth.Config{CPUs: cpus, Hz: hz, Start: h.UnixNano(), Seconds: 3600, Seed: uint64(h.Unix())})
		st, err := db.Import("synthetic", sample.PeriodOf(int64(hz)), g.Feed)
		if err != nil {
			return err
		}
		total.Samples += st.Samples
		total.Blocks += st.Blocks
		fmt.Fprintf(os.Stderr, "generated %v\n", h)
	}
	db.Maintain()
	s := db.Stats()
	fmt.Printf("generated %d samples (%v of %d CPUs at %d Hz) in %v: %d blocks, %.1f MB, %.2f bytes/sample\n",
		total.Samples, end.Sub(start), cpus, hz, time.Since(began).Round(time.Second), s.Blocks,
		float64(s.BlockBytes)/1e6, float64(s.BlockBytes)/float64(total.Samples))
	return nil
}

// timeIt runs f n times and returns the first (cold) and the median time.
func timeIt(n int, f func() error) (cold, median time.Duration, err error) {
	var ds []time.Duration
	for range n {
		t := time.Now()
		if err := f(); err != nil {
			return 0, 0, err
		}
		ds = append(ds, time.Since(t))
	}
	cold = ds[0]
	slices.Sort(ds)
	return cold, ds[len(ds)/2], nil
}

func peakRSS() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Maxrss) / 1024
}

func queries(dir string, runs int) error {
	db, err := store.Open(dir, store.Options{ReadOnly: true, Logger: quiet()})
	if err != nil {
		return err
	}
	defer db.Close()
	src := db.Sources()
	if len(src) == 0 {
		return fmt.Errorf("%s holds no data: run 'store gen' first", dir)
	}
	s := src[0]
	ctx := context.Background()
	mid := s.First + (s.Last-s.First)/2
	tenMin := store.Range{From: mid, To: mid + int64(10*time.Minute)}
	tenSec := store.Range{From: mid, To: mid + int64(10*time.Second)}
	day := store.Range{From: (s.Last - int64(24*time.Hour)) / 10e9 * 10e9, To: (s.Last/10e9 + 1) * 10e9}
	all := &store.Filter{}
	kubelet := &store.Filter{Comm: "kubelet"}
	var nHeat, nFlame int64
	fmt.Printf("## Queries on %s: %d samples, %v\n\n| query | first run | median of %d | target |\n|---|---|---|---|\n",
		s.Name, s.Samples, time.Duration(s.Last-s.First).Round(time.Minute), runs)
	report := func(name, target string, f func() error) error {
		cold, med, err := timeIt(runs, f)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		fmt.Printf("| %s | %.1f ms | %.1f ms | %s |\n", name, ms(cold), ms(med), target)
		return nil
	}
	steps := []struct {
		name, target string
		f            func() error
	}{
		{"heatmap, 10 min, 50 rows", "<= 150 ms", func() error {
			h, _, err := query.HeatmapOf(ctx, db, tenMin, all, 50)
			nHeat = 0
			for _, col := range h.Values {
				for _, v := range col {
					nHeat += int64(v)
				}
			}
			return err
		}},
		{"heatmap, 10 min, comm=kubelet", "", func() error { _, _, err := query.HeatmapOf(ctx, db, tenMin, kubelet, 50); return err }},
		{"flame graph, 10 s", "<= 30 ms", func() error {
			root, _, err := query.FlameGraphOf(ctx, db, tenSec, all)
			nFlame = root.Value
			return err
		}},
		{"top functions, 10 s", "", func() error {
			_, _, err := query.TopOf(ctx, db, tenSec, all, query.GroupNone, query.GroupAddresses)
			return err
		}},
		{"timeline, 24 h, 60 s steps", "<= 200 ms", func() error {
			_, _, err := db.Timeline(ctx, day, int64(time.Minute), all)
			return err
		}},
		{"timeline, 24 h, comm=kubelet", "", func() error {
			_, _, err := db.Timeline(ctx, day, int64(time.Minute), kubelet)
			return err
		}},
	}
	for _, st := range steps {
		if err := report(st.name, st.target, st.f); err != nil {
			return err
		}
	}
	fmt.Printf("\nThe 10-minute heatmap counted %d non-idle samples; the 10 s flame graph %d.\n", nHeat, nFlame)
	fmt.Printf("Peak RSS of the query process: %.0f MB (target <= 200 MB).\n", peakRSS())
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

var eventTime = regexp.MustCompile(` +([0-9]+)\.([0-9]+): `)

// replicate writes copies of a perf script, each shifted by the capture's
// length rounded up to a second, as if recorded back to back.
func replicate(in, out string, copies int) error {
	data, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	var first, last int64 = -1, 0
	for _, m := range eventTime.FindAllSubmatch(data, -1) {
		sec, _ := strconv.ParseInt(string(m[1]), 10, 64)
		if first < 0 {
			first = sec
		}
		last = max(last, sec)
	}
	shift := last - first + 1
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	for c := range copies {
		off := int64(c) * shift
		w.Write(eventTime.ReplaceAllFunc(data, func(b []byte) []byte {
			m := eventTime.FindSubmatch(b)
			sec, _ := strconv.ParseInt(string(m[1]), 10, 64)
			return []byte(fmt.Sprintf(" %d.%s: ", sec+off, m[2]))
		}))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Close()
}

// perfScript times importing a perf script, then its whole-range heatmap
// and flame graph, as FlameScope is timed on the same file.
func perfScript(dir, file string, runs int) error {
	os.RemoveAll(dir)
	db, err := store.Open(dir, store.Options{Logger: quiet()})
	if err != nil {
		return err
	}
	defer db.Close()
	began := time.Now()
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := db.Import("capture", 0, func(fn func(*sample.Sample) error) error {
		_, err := profileio.ReadAny(f, profileio.AnyOptions{}, fn)
		return err
	})
	if err != nil {
		return err
	}
	importTime := time.Since(began)
	ctx := context.Background()
	r := store.Range{From: st.First, To: st.Last + 1}
	f2 := &store.Filter{}
	fmt.Printf("## perf script: %d samples\n\n| step | first run | median of %d | FlameScope |\n|---|---|---|---|\n", st.Samples, runs)
	fmt.Printf("| import | %.0f ms | | (parses on every request) |\n", ms(importTime))
	heatCold, med, err := timeIt(runs, func() error { _, _, err := query.HeatmapOf(ctx, db, r, f2, 50); return err })
	if err != nil {
		return err
	}
	fmt.Printf("| heatmap, whole range | %.1f ms | %.1f ms | 5.7 s |\n", ms(heatCold), ms(med))
	flameCold, med, err := timeIt(runs, func() error { _, _, err := query.FlameGraphOf(ctx, db, r, f2); return err })
	if err != nil {
		return err
	}
	fmt.Printf("| flame graph, whole range | %.1f ms | %.1f ms | 7.1 s |\n", ms(flameCold), ms(med))
	fmt.Printf("| import + first heatmap + first flame graph | %.0f ms | | 12.8 s |\n", ms(importTime)+ms(heatCold)+ms(flameCold))
	return nil
}
