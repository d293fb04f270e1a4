package recorder

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/heatscope/heatscope/internal/bpftest"
	"github.com/heatscope/heatscope/internal/fixture"
	"github.com/heatscope/heatscope/profileio"
	"github.com/heatscope/heatscope/profiler"
	"github.com/heatscope/heatscope/query"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
	"github.com/heatscope/heatscope/symbolize"
)

// mixedPeriodNs is recordMixed's sampling period: 99 Hz.
const mixedPeriodNs = int64(time.Second) / 99

// recordMixed records the mixed fixture (mixedSource: user frames found
// with tables and with frame pointers) at 99 Hz with the table walk for d,
// passing each sample to sink.
func recordMixed(t *testing.T, d time.Duration, sink func(*sample.Sample)) {
	t.Helper()
	// -O0: gcc 12 at -O2 leaves the frame pointer out of leaf functions
	// even with -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer.
	bin := fixture.BuildC(t, "", "gcc", "fixture", mixedSource, "-O0", "-fno-omit-frame-pointer",
		"-fno-asynchronous-unwind-tables", "-fno-unwind-tables")
	pid := start(t, bin)
	time.Sleep(50 * time.Millisecond)
	cfg := profiler.Config{Frequency: 99, PIDs: []uint32{uint32(pid)}, Stacks: profiler.StacksUser,
		Unwind: profiler.UnwindDWARF, UnwindCacheDir: t.TempDir()}
	rec, err := Open(cfg, symbolize.Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("open recorder: %v", err)
	}
	defer rec.Close()
	if rec.PeriodNs() != mixedPeriodNs {
		t.Fatalf("period %d ns, want %d", rec.PeriodNs(), mixedPeriodNs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := rec.Run(ctx, sink); err != nil {
		t.Fatal(err)
	}
}

// TestUnwindMethodKeptInStore records the mixed fixture (user frames found
// both ways) with the table walk into a data directory and into the
// profile record --output writes. Every user frame above the sampled pc
// is marked as Sample.Unwind says, no other frame is; the store gives the
// marks back, and the profile the API serves from it (query.PprofOf) has
// the same unwind and unwind_fp labels as record's, as the real go tool
// pprof -tags reads them.
func TestUnwindMethodKeptInStore(t *testing.T) {
	bpftest.Require(t)
	goTool := fixture.Tool(t, "go")
	db, err := store.Open(t.TempDir(), store.Options{Source: "host", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	out := profileio.NewPprofBuilder(mixedPeriodNs)
	var samples, fp int
	recordMixed(t, 5*time.Second, func(s *sample.Sample) {
		samples++
		n := s.Unwind.UserFrames
		for i, f := range s.Stack {
			want := sample.MethodNotKnown
			if u := i - (len(s.Stack) - n); u >= 1 {
				want = sample.MethodFP
				if s.Unwind.WithTable(u) {
					want = sample.MethodTable
				}
			}
			if f.Method != want {
				t.Errorf("frame %d of %d (%s, %d user frames): method %d, want %d", i, len(s.Stack), f.Function, n, f.Method, want)
			}
			if f.Method == sample.MethodFP {
				fp++
			}
		}
		out.Add(s)
		if err := db.Append(s); err != nil {
			t.Fatal(err)
		}
	})
	if samples == 0 || fp == 0 {
		t.Fatalf("%d samples, %d frames found with frame pointers: the fixture was not walked both ways", samples, fp)
	}
	// What keeping the methods costs the store: the frames reached both
	// ways are two frames of its table.
	type at struct {
		module, function string
		address          uint64
	}
	frames, addresses := map[*store.Frame]bool{}, map[at]bool{}
	if _, err := db.Select(context.Background(), store.Range{From: 0, To: time.Now().Add(time.Hour).UnixNano()}, &store.Filter{IncludeIdle: true},
		func(b *store.Batch) error {
			for _, i := range b.Rows {
				for _, id := range b.T.StackOf(b.T.Stack[i]) {
					f := &b.T.Frames[id]
					frames[f] = true
					addresses[at{b.T.Strings[f.Module], b.T.Strings[f.Function], f.Address}] = true
				}
			}
			return nil
		}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d samples, %d frames found with frame pointers; the store's table holds %d frames for %d addresses", samples, fp, len(frames), len(addresses))
	stored, _, err := query.PprofOf(context.Background(), db, store.Range{From: 0, To: time.Now().Add(time.Hour).UnixNano()},
		&store.Filter{IncludeIdle: true})
	if err != nil {
		t.Fatal(err)
	}
	tags := func(name string, p *profile.Profile) string {
		path := filepath.Join(t.TempDir(), name+".pb.gz")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := profileio.WritePprof(f, p); err != nil {
			t.Fatal(err)
		}
		f.Close()
		got, err := exec.Command(goTool, "tool", "pprof", "-tags", "-tagshow", "^unwind", path).CombinedOutput()
		if err != nil {
			t.Fatalf("go tool pprof -tags %s: %v\n%s", name, err, got)
		}
		return string(got)
	}
	recorded, served := tags("record", out.Profile()), tags("store", stored)
	t.Logf("record --output, go tool pprof -tags -tagshow ^unwind:\n%s", recorded)
	if !strings.Contains(recorded, "unwind_fp:") || !strings.Contains(recorded, ": main\n") || strings.Contains(recorded, "comm:") {
		t.Errorf("record's profile names no frame found with frame pointers, or not main, or -tagshow showed other tags")
	}
	if served != recorded {
		t.Errorf("the stored samples' profile says\n%s\nrecord's\n%s", served, recorded)
	}
}
