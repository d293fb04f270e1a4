// Package benchweb holds what the browser benchmarks (bench/ui,
// bench/overview) share: a store served with package web on a loopback
// port, a headless chromium driven by chromedp, and medians of timings.
package benchweb

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"slices"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/heatscope/heatscope/internal/browsertest"
	"github.com/heatscope/heatscope/store"
	"github.com/heatscope/heatscope/web"
)

// Quiet is a logger that drops everything: the benchmarks print tables.
func Quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Serve serves db's UI and API with package web on a free loopback port
// until stop is called; base is its URL ("http://127.0.0.1:PORT").
func Serve(db *store.DB) (base string, stop func(), err error) {
	srv, err := web.New(db, web.Options{Logger: Quiet()})
	if err != nil {
		return "", nil, fmt.Errorf("serve: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("serve: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	return "http://" + ln.Addr().String(), func() { cancel(); <-served }, nil
}

// Browser starts a headless chromium (the executable named, looked up in
// PATH) with a window of width × height CSS pixels and a throwaway
// profile; its context ends after timeout. done stops the browser and
// removes the profile; exe is the executable's path.
func Browser(chromium string, width, height int, timeout time.Duration) (ctx context.Context, exe string, done func(), err error) {
	exe, err = exec.LookPath(chromium)
	if err != nil {
		return nil, "", nil, fmt.Errorf("browser: %w", err)
	}
	tmp, err := os.MkdirTemp("", "heatscope-bench-browser-")
	if err != nil {
		return nil, "", nil, fmt.Errorf("browser: %w", err)
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), browsertest.Options(exe, tmp, width, height)...)
	bctx, cancel := chromedp.NewContext(allocCtx)
	bctx, cancelTimeout := context.WithTimeout(bctx, timeout)
	return bctx, exe, func() {
		cancelTimeout()
		cancel()
		cancelAlloc()
		os.RemoveAll(tmp)
	}, nil
}

// Stat formats timings in milliseconds as "median ms (min-max)", with a
// decimal under 10 ms.
func Stat(ms []float64) string {
	s := slices.Sorted(slices.Values(ms))
	d := digits(s[0])
	return fmt.Sprintf("%.*f ms (%.*f-%.*f)", d, s[len(s)/2], d, s[0], d, s[len(s)-1])
}

// Median is the median of timings (the upper one of an even count).
func Median(ms []float64) float64 { return slices.Sorted(slices.Values(ms))[len(ms)/2] }

func digits(ms float64) int {
	if ms < 10 {
		return 1
	}
	return 0
}
