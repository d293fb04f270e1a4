package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/internal/tmpfstest"
	"github.com/heatscope/heatscope/metrics"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// samples is a Source of samples from a generator, with a function
// called before each one (the recorder's polls, a disk filling up).
type samples struct {
	cfg    synth.Config
	before func(i int, s *sample.Sample)
}

func (src samples) Run(ctx context.Context, sink func(*sample.Sample)) error {
	g := synth.New(src.cfg)
	var s sample.Sample
	for i := 0; g.Next(&s); i++ {
		src.before(i, &s)
		sink(&s)
	}
	return nil
}

// TestStoreWeighsEachSamplesPeriod: the store sink cuts the store's head
// where the samples' period changes, so that each sample is stored at the
// period it carries, and the counter sink sums the same periods.
func TestStoreWeighsEachSamplesPeriod(t *testing.T) {
	p99, p24 := sample.PeriodOf(99), sample.PeriodOf(24)
	db, err := store.Open(t.TempDir(), store.Options{Source: "node", PeriodNs: p99, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// 10 s of two CPUs at 99 Hz, the second half at 24 Hz's period.
	var n, want int64
	src := samples{cfg: synth.Config{CPUs: 2, Hz: 99, Start: time.Now().Add(-time.Minute).UnixNano(), Seconds: 10}, before: func(i int, s *sample.Sample) {
		s.PeriodNs = p99
		if i >= 990 {
			s.PeriodNs = p24
		}
		n++
		want += s.PeriodNs
	}}
	var counter Counter
	if err := New(NewStore(db, p99, slog.New(slog.DiscardHandler)), &counter).Run(context.Background(), src); err != nil {
		t.Fatal(err)
	}
	var stored, storedNs int64
	if _, err := db.Select(context.Background(), store.Range{From: 0, To: time.Now().UnixNano()}, &store.Filter{IncludeIdle: true}, func(b *store.Batch) error {
		stored += int64(len(b.Rows))
		storedNs += int64(len(b.Rows)) * b.Weight()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n < 1900 || want <= n*p99 {
		t.Fatalf("the source gave %d samples weighing %v: not two periods", n, time.Duration(want))
	}
	if stored != n || storedNs != want {
		t.Errorf("store: %d samples weighing %v, want %d weighing %v", stored, time.Duration(storedNs), n, time.Duration(want))
	}
	if counter.Samples() != uint64(n) || counter.SampledCPU() != time.Duration(want) {
		t.Errorf("counter: %d samples weighing %v, want %d weighing %v", counter.Samples(), counter.SampledCPU(), n, time.Duration(want))
	}
}

// TestFailingAppends records into a small tmpfs that fills up: the
// recording goes on, each failed append is counted and shown in /metrics,
// and the episode is logged once as it begins and once as it ends, when
// space returns.
func TestFailingAppends(t *testing.T) {
	dir := tmpfstest.Mount(t, "1m")
	db, err := store.Open(filepath.Join(dir, "data"), store.Options{Source: "node", BlockDuration: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var free func()
	// About 4000 samples: flushed (as the recorder's polls do) every 500;
	// the disk full from the 1000th, space back from the 3000th.
	n := 0
	src := samples{cfg: synth.Config{CPUs: 4, Hz: 99, Start: time.Now().Add(-time.Minute).UnixNano(), Seconds: 10}, before: func(i int, s *sample.Sample) {
		n++
		s.PeriodNs = sample.PeriodOf(99)
		switch {
		case i == 1000:
			free = tmpfstest.Fill(t, filepath.Join(dir, "filler"))
		case i == 3000:
			free()
		}
		if i%500 == 0 {
			db.Flush()
		}
	}}
	var logs bytes.Buffer
	st := NewStore(db, sample.PeriodOf(99), slog.New(slog.NewTextHandler(&logs, nil)))
	var counter Counter
	m := metrics.New()
	if err := m.RegisterPipeline(&counter, st); err != nil {
		t.Fatal(err)
	}
	if err := New(st, &counter).Run(context.Background(), src); err != nil {
		t.Fatal(err)
	}
	// The WAL write fails at the flush of the 1000th sample; the 3000th's
	// succeeds: appends 1000 to 2999 report it.
	if got := st.AppendErrors(); got != 2000 {
		t.Errorf("%d failed appends counted, want 2000 (while the disk was full)", got)
	}
	if n < 3500 || counter.Samples() != uint64(n) {
		t.Errorf("the recording did not go on: %d samples reached the sinks of %d", counter.Samples(), n)
	}
	if n := strings.Count(logs.String(), "store appends fail"); n != 1 {
		t.Errorf("the episode of failed appends was logged %d times, want once:\n%s", n, logs.String())
	}
	if !regexp.MustCompile(`store appends work again.*"failed appends"=2000`).MatchString(logs.String()) {
		t.Errorf("the end of the episode was not logged with its count:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "no space left on device") {
		t.Errorf("the log does not say why appends failed:\n%s", logs.String())
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{"heatscope_store_append_errors_total 2000", fmt.Sprint("heatscope_recorded_samples_total ", n)} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if stats := db.Stats(); stats.HeadSamples != n {
		t.Errorf("the store's head holds %d samples, want all %d (kept in memory while the disk was full)", stats.HeadSamples, n)
	}
}
