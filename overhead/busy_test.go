package overhead

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// fakeAgent is an agent whose sampling path costs sampling (a share of
// one CPU) and whose queries, while one is served, take a whole CPU.
type fakeAgent struct {
	start     time.Time
	sampling  float64
	mu        sync.Mutex
	busy      bool
	busySince time.Time
	queryCPU  time.Duration
}

func (a *fakeAgent) meter() (time.Duration, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	q := a.queryCPU
	if a.busy {
		q += now.Sub(a.busySince)
	}
	return time.Duration(float64(now.Sub(a.start))*a.sampling) + q, nil
}

func (a *fakeAgent) serve(on bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	if on {
		a.busySince = now
	} else {
		a.queryCPU += now.Sub(a.busySince)
	}
	a.busy = on
}

// browsing is how a fakeAgent is browsed: each query takes serve, then
// the browser thinks for think.
type browsing struct{ serve, think time.Duration }

// runBrowsed runs a Guard over a fakeAgent whose sampling path costs
// sampling, browsed as b for about a dozen windows, and returns the
// frequency then and the shares it judged.
func runBrowsed(t *testing.T, accountQueries bool, sampling float64, b browsing) (hz int, shares []float64) {
	t.Helper()
	a := &fakeAgent{start: time.Now(), sampling: sampling}
	s := &fixedSampler{hz: 99}
	cfg := Config{MaxCPU: 1, Window: 100 * time.Millisecond, Warmup: time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	var busy *Busy
	if accountQueries {
		busy = NewBusy(a.meter)
		// The fake's meter is exact: a short settling (TestBusySettles
		// tests its length's use) leaves more time outside queries.
		busy.settle = func() { time.Sleep(time.Millisecond) }
		cfg.Busy = busy
	}
	g, err := New(cfg, s, a.meter)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.Run(ctx) }()
	var observed []float64
	for end := time.Now().Add(1200 * time.Millisecond); time.Now().Before(end); {
		if busy != nil {
			busy.Enter()
		}
		a.serve(true)
		time.Sleep(b.serve)
		a.serve(false)
		if busy != nil {
			busy.Leave()
		}
		time.Sleep(b.think)
		if sh := g.LastShare(); len(observed) == 0 || observed[len(observed)-1] != sh {
			observed = append(observed, sh)
		}
	}
	cancel()
	<-done
	return s.Frequency(), observed
}

// TestGuardLeavesQueriesOut serves queries that cost 40 times the
// sampling path: with Busy the Guard judges the sampling path alone and
// keeps the rate; without it, it would halve it (the check that the test
// can fail).
func TestGuardLeavesQueriesOut(t *testing.T) {
	hz, shares := runBrowsed(t, true, 0.005, browsing{8 * time.Millisecond, 12 * time.Millisecond})
	if hz != 99 {
		t.Fatalf("with queries accounted apart: %d Hz, shares %v; want 99 Hz", hz, shares)
	}
	// Queries take 40% of a CPU; the sampling path 0.5%. Timer jitter on a
	// busy machine moves a few ms between the two, never tens of %.
	for _, s := range shares[1:] {
		if s >= 1 {
			t.Fatalf("judged shares %v: queries leaked into the sampling path's cost (0.5%%)", shares)
		}
	}
	if hz, shares := runBrowsed(t, false, 0.005, browsing{8 * time.Millisecond, 12 * time.Millisecond}); hz >= 99 {
		t.Fatalf("without Busy: %d Hz, shares %v; the test's queries should have looked like agent cost", hz, shares)
	}
}

// TestBrowsingDoesNotHideAnOverload browses an agent almost all the time
// (each window has about 15 ms outside queries in 100 ms): the Guard judges the
// time outside queries once it adds up to a window, so a sampling path
// over the budget is still cut, and one under it is still left alone.
func TestBrowsingDoesNotHideAnOverload(t *testing.T) {
	heavy := browsing{16 * time.Millisecond, 4 * time.Millisecond}
	hz, shares := runBrowsed(t, true, 0.03, heavy)
	if hz >= 99 || len(shares) < 2 {
		t.Fatalf("a sampling path at 3%% of a CPU browsed 85%% of the time: %d Hz, shares %v; want a cut", hz, shares)
	}
	if hz, shares := runBrowsed(t, true, 0.005, heavy); hz != 99 || len(shares) < 2 {
		t.Fatalf("a sampling path at 0.5%% of a CPU browsed 85%% of the time: %d Hz, shares %v; want 99 Hz, judged", hz, shares)
	}
}

// fakeProcess is the CPU, wall clock and heap allocations a Busy reads,
// moved by the test.
type fakeProcess struct {
	mu        sync.Mutex
	cpu       time.Duration
	now       time.Time
	allocated uint64
}

// newFakeBusy returns a Busy reading a fakeProcess.
func newFakeBusy() (*Busy, *fakeProcess) {
	f := &fakeProcess{now: time.Unix(1000, 0)}
	b := NewBusy(func() (time.Duration, error) { f.mu.Lock(); defer f.mu.Unlock(); return f.cpu, nil })
	b.now = f.clock
	b.allocated = func() uint64 { f.mu.Lock(); defer f.mu.Unlock(); return f.allocated }
	return b, f
}

func (f *fakeProcess) clock() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now }

// step moves the process on by cpu of CPU time, wall of wall time and
// alloc bytes allocated.
func (f *fakeProcess) step(cpu, wall time.Duration, alloc uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cpu += cpu
	f.now = f.now.Add(wall)
	f.allocated += alloc
}

// open reports whether a busy interval is under way.
func (b *Busy) open() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.n > 0 }

// TestBusyCollectsQueryGarbage checks that a busy interval whose requests
// allocated MinGarbage or more goes on until its garbage is collected, so
// that the collection's CPU counts as the queries', not the sampling
// path's; that requests arriving meanwhile join it; and that a light
// interval ends with its last request, without a collection.
func TestBusyCollectsQueryGarbage(t *testing.T) {
	b, f := newFakeBusy()
	b.settle = nil // TestBusySettles covers it
	release := make(chan struct{})
	collecting := make(chan struct{}, 1)
	b.collect = func() {
		collecting <- struct{}{}
		<-release
		f.step(30*time.Millisecond, 40*time.Millisecond, 0) // the collection's CPU
	}
	step, open := f.step, b.open

	// A light request: no collection, the interval ends with it.
	b.Enter()
	step(5*time.Millisecond, 10*time.Millisecond, MinGarbage/2)
	b.Leave()
	if open() || b.Collections() != 0 {
		t.Fatalf("a request allocating %d bytes: interval open %v, %d collections; want closed, none", MinGarbage/2, open(), b.Collections())
	}
	// Sampling between requests allocates too: it is not the queries'.
	step(time.Millisecond, time.Second, 4*MinGarbage)

	// A heavy request: the interval stays open through the collection.
	b.Enter()
	step(50*time.Millisecond, 60*time.Millisecond, 2*MinGarbage)
	b.Leave()
	<-collecting
	if !open() {
		t.Fatal("the interval closed before its garbage was collected")
	}
	b.Enter() // a request during the collection joins the interval
	close(release)
	step(5*time.Millisecond, 5*time.Millisecond, MinGarbage/4)
	b.Leave()
	for deadline := time.Now().Add(10 * time.Second); open() || b.Collections() != 1; {
		if time.Now().After(deadline) {
			t.Fatalf("interval open %v, %d collections: want it closed after one", open(), b.Collections())
		}
		time.Sleep(time.Millisecond)
	}
	wall, busyCPU := b.totals(f.clock(), f.cpu)
	// 10 ms, then 60 + 40 (the collection) + 5 ms; 5 ms, then 50 + 30 + 5 ms.
	if wall != 115*time.Millisecond || busyCPU != 90*time.Millisecond {
		t.Fatalf("busy %v wall, %v CPU; want 115ms and 90ms, the collection's included", wall, busyCPU)
	}
	// The request that joined allocated little since the collection: no
	// second one.
	if b.Collections() != 1 {
		t.Fatalf("%d collections, want 1", b.Collections())
	}
}

// TestBusySettles checks that an interval ends Settle after its last
// request, so that CPU its threads used but the kernel had not yet
// accounted (it shows in the meter during the settling) is the queries',
// and that a request arriving while it settles joins the interval and
// settles again.
func TestBusySettles(t *testing.T) {
	b, f := newFakeBusy() // light requests: no collection
	settling := make(chan chan struct{})
	b.settle = func() {
		done := make(chan struct{})
		settling <- done
		<-done
	}
	step := func(c, wall time.Duration) { f.step(c, wall, 0) }
	open := b.open

	b.Enter()
	step(3*time.Millisecond, 5*time.Millisecond)
	b.Leave()
	done := <-settling
	if !open() {
		t.Fatal("the interval ended with its last request, before settling")
	}
	// The kernel accounts the query thread's last tick.
	step(4*time.Millisecond, 10*time.Millisecond)
	b.Enter() // joins the interval
	close(done)
	step(2*time.Millisecond, 2*time.Millisecond)
	b.Leave()
	done = <-settling // the joined request settles too
	step(time.Millisecond, 10*time.Millisecond)
	close(done)
	for deadline := time.Now().Add(10 * time.Second); open(); {
		if time.Now().After(deadline) {
			t.Fatal("the interval never ended")
		}
		time.Sleep(time.Millisecond)
	}
	wall, busyCPU := b.totals(f.clock(), f.cpu)
	if wall != 27*time.Millisecond || busyCPU != 10*time.Millisecond {
		t.Fatalf("busy %v wall, %v CPU; want 27ms and 10ms, the settling included", wall, busyCPU)
	}
	if b.Collections() != 0 {
		t.Fatalf("%d collections of light requests, want none", b.Collections())
	}
}
