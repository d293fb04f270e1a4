// Package browsertest starts headless Chromium, as this project's machines
// allow it, for the browser tests of the web UI and the UI benchmark.
package browsertest

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
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
		if os.Getenv("HEATSCOPE_REQUIRE_BPF") == "1" {
			t.Fatal("chromium is not installed (apt-get install chromium) and HEATSCOPE_REQUIRE_BPF=1 requires the browser tests")
		}
		t.Skip("chromium is not installed (apt-get install chromium): skipping the browser test")
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
