package web

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/overview"
	"github.com/heatscope/heatscope/profileio"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// base is the fixtures' time origin, Unix seconds: a multiple of 10 s.
const base = 1795237380

// synthStart is when the synthetic recording starts: 300 ms after base,
// so that nothing is aligned by chance.
const synthStart = base*int64(time.Second) + 300*int64(time.Millisecond)

// capturePerfScript is the hand-written perf script imported as source
// "capture": 600 samples 5 ms apart from base+70 s, two commands, a frame
// whose name needs JSON escaping, and idle samples of the swapper.
func capturePerfScript() string {
	var b strings.Builder
	for i := range 600 {
		comm, pid := "Web Content", 4242
		switch i % 4 {
		case 0:
			comm, pid = "java", 777
		case 3:
			comm, pid = "swapper", 0
		}
		fmt.Fprintf(&b, "%s %d/%d [%03d] %.6f: 10101010 cpu-clock:\n", comm, pid, pid+i%2, i%2, float64(base+70)+float64(i)*0.005)
		if comm == "swapper" {
			b.WriteString("\tffffffff81f00000 default_idle+0x1 ([kernel.kallsyms])\n\tffffffff81f00040 do_idle+0x2 ([kernel.kallsyms])\n\n")
			continue
		}
		b.WriteString("\tffffffff8123abcd vfs_read+0x1d ([kernel.kallsyms])\n")
		fmt.Fprintf(&b, "\t    7f0012345678 ns::Work<T&, \"q\">::naïve_%d (/usr/lib/libwork.so)\n", i%5)
		b.WriteString("\t    55aa00001111 main (/usr/bin/app)\n\n")
	}
	return b.String()
}

// hostPeriod is the recording's sampling period (not the default 99 Hz,
// so that pprof downloads show which period they took); the capture has
// none.
const hostPeriod = int64(time.Second) / 49

// testStore opens a store holding 65 s of a synthetic 4-CPU recording
// (source "host", in blocks and in the head) and the imported capture.
func testStore(t testing.TB) *store.DB {
	t.Helper()
	// CallerTicks: no background tick cuts the head while a test compares
	// an answer with the store's own (the last seconds would move from the
	// head into a block between the two reads).
	db, err := store.Open(t.TempDir(), store.Options{Source: "host", PeriodNs: hostPeriod,
		BlockDuration: 20 * time.Second, Logger: discard(), CallerTicks: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	g := synth.New(synth.Config{CPUs: 4, Hz: 99, Start: synthStart, Seconds: 65, Stacks: 300, Containers: true})
	var s sample.Sample
	for g.Next(&s) {
		s.Time = s.Time / 1000 * 1000 // blocks keep microseconds
		if err := db.Append(&s); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Import("capture", 0, func(fn func(*sample.Sample) error) error {
		return profileio.ReadPerfScript(strings.NewReader(capturePerfScript()), fn)
	}); err != nil {
		t.Fatal(err)
	}
	// The heads cut while appending are written as blocks in the
	// background; tests that compare an answer with the store's own must
	// read the same parts both times (a sealing head is scanned, a block's
	// timeline read from its 10 s summaries).
	for deadline := time.Now().Add(10 * time.Second); db.Stats().Sealing > 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the test store's cut heads were not written as blocks within 10 s")
		}
	}
	return db
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// fixture is a real HTTP server over a test store.
type fixture struct {
	db  fixtureStore
	srv *Server
	url string
}

// fixtureStore is what the tests read of a store beside the API: a
// *store.DB or a *store.Reader.
type fixtureStore interface {
	Reader
	Stats() store.Stats
	overview.WarmStore
}

func newFixture(t testing.TB, db fixtureStore, opts Options) *fixture {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = discard()
	}
	srv, err := New(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return &fixture{db: db, srv: srv, url: ts.URL}
}

// get sends a GET with the headers given as name, value pairs and returns
// the response with its body read.
func (fx *fixture) get(t testing.TB, target string, headers ...string) (*http.Response, []byte) {
	t.Helper()
	return fx.do(t, http.MethodGet, target, headers...)
}

func (fx *fixture) do(t testing.TB, method, target string, headers ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, fx.url+target, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}
