// Package browsertest starts headless Chromium, as this project's machines
// allow it, for the browser tests of the web UI and the UI benchmarks, and
// waits for what a page shows.
package browsertest

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/heatscope/heatscope/internal/needs"
)

// names are the executables tried, in order.
var names = []string{"chromium", "chromium-browser", "google-chrome"}

// Find returns the path of an installed Chromium.
func Find() (string, error) {
	var err error
	for _, name := range names {
		var path string
		if path, err = exec.LookPath(name); err == nil {
			return path, nil
		}
	}
	return "", err
}

// Options are the allocator options for a headless Chromium at exe with
// its profile in userDataDir and a window of width x height: no sandbox
// (tests run as root), no GPU, and none of the background connections
// that a closed network refuses.
func Options(exe, userDataDir string, width, height int) []chromedp.ExecAllocatorOption {
	return append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]),
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(userDataDir), chromedp.WindowSize(width, height))
}

// Start starts Chromium for the rest of test t with a width x height
// window and returns its context, which ends after timeout. Without
// Chromium the test skips, or fails where HEATSCOPE_REQUIRE_BPF=1 (CI),
// which requires the browser tests too.
func Start(t testing.TB, width, height int, timeout time.Duration) context.Context {
	t.Helper()
	exe, err := Find()
	if err != nil {
		needs.Missing(t, "HEATSCOPE_REQUIRE_BPF", "the browser tests need chromium, which is not installed (apt-get install chromium)")
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), Options(exe, t.TempDir(), width, height)...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(cancel)
	ctx, cancelTimeout := context.WithTimeout(ctx, timeout)
	t.Cleanup(cancelTimeout)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// Until is an action that waits, up to timeout, until the JavaScript
// expression is true in the document the page shows now, testing it on
// every animation frame. Use it, not chromedp.Poll, after anything that
// loads a new document (Navigate, Reload, a followed link).
//
// chromedp.Poll runs in the execution context chromedp last recorded for
// the page, and chromedp records a new document's context on a goroutine
// of its own that can lag behind the load event Navigate waits for: under
// load Poll then names the previous document's context, which is gone,
// and fails with "Cannot find context with specified id". Until sends
// its wait with no context, so the browser runs it in the current
// document's.
func Until(expression string, timeout time.Duration) chromedp.Action[chromedp.Void] {
	wait := fmt.Sprintf(`new Promise((resolve, reject) => {
		const deadline = performance.now() + %d;
		const test = () => {
			try {
				if (%s) { resolve(true); return; }
			} catch (e) { reject(e); return; }
			if (performance.now() >= deadline) { resolve(false); return; }
			requestAnimationFrame(test);
		};
		test();
	})`, timeout.Milliseconds(), expression)
	evaluate := chromedp.Evaluate[bool](wait, chromedp.EvalAwaitPromise)
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		switch met, err := evaluate(ctx, t); {
		case err != nil:
			return chromedp.Void{}, fmt.Errorf("wait until %s: %w", expression, err)
		case !met:
			return chromedp.Void{}, fmt.Errorf("wait until %s: still false after %v", expression, timeout)
		}
		return chromedp.Void{}, nil
	}
}
