package main

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/bpftest"
	"github.com/heatscope/heatscope/profiler"
)

// TestCgroupPathFilterOnAnotherHost records a fixture in a cgroup made
// for the test, then queries its samples by that cgroup's path from a
// "query host" that lacks the cgroup: first removed, then another cgroup
// made at the same path (another id), as a fleet's query service holds
// none of its nodes' cgroups, or others under the same names. The path
// (below the mount, relative, or as mounted here) selects exactly the
// fixture's samples, from the path the recorder kept; a path no cgroup had
// selects none. A recording made with --containers=false keeps no paths:
// the same filter on it answers none of its samples and a Warning that
// says why.
//
// Before, serve stat'ed the path on its own host: a 400 once the cgroup
// was gone, and no samples at all (silently) once another cgroup took its
// path.
func TestCgroupPathFilterOnAnotherHost(t *testing.T) {
	bpftest.Require(t)
	root, err := profiler.CgroupV2Root()
	if err != nil {
		t.Skipf("no cgroup v2 hierarchy to create a cgroup in: %v", err)
	}
	base, err := os.MkdirTemp(root, "heatscope-test-")
	if err != nil {
		t.Fatalf("create a cgroup under %s: %v", root, err)
	}
	t.Cleanup(func() { removeCgroupTree(t, base) })
	cgroup := filepath.Join(base, "work.scope")
	if err := os.Mkdir(cgroup, 0o755); err != nil {
		t.Fatal(err)
	}
	below := strings.TrimPrefix(cgroup, root) // as /proc/PID/cgroup names it

	dir := t.TempDir()
	bin := buildHeatscope(t, dir)
	hotc, _ := buildFixtures(t, dir)
	inside := startInCgroup(t, cgroup, hotc)
	outside := start(t, hotc)
	time.Sleep(200 * time.Millisecond)
	began := time.Now()
	data, bare := filepath.Join(dir, "data"), filepath.Join(dir, "bare")
	for _, run := range []struct{ data, containers string }{{data, "true"}, {bare, "false"}} {
		if _, stderr, err := runHeatscope(bin, "record", "--duration", "3s", "--data", run.data, "--containers="+run.containers); err != nil {
			t.Fatalf("heatscope record --containers=%s: %v\n%s", run.containers, err, stderr)
		}
	}
	span := fmt.Sprintf("from=%d&to=%d", began.Add(-time.Minute).Unix(), time.Now().Add(time.Minute).Unix())

	// The query host: the cgroup is gone.
	inside.Process.Kill()
	inside.Wait()
	removeCgroupTree(t, base)
	if _, err := os.Stat(cgroup); !os.IsNotExist(err) {
		t.Fatalf("the cgroup %s is still here: %v", cgroup, err)
	}
	addr := "127.0.0.1:" + freePort(t)
	d := startDaemon(t, bin, "serve", "--data", data, "--listen", addr)
	api := "http://" + addr
	waitServing(t, d, api+"/api/sources")
	top := func(api, filter string) (int64, []string) {
		t.Helper()
		var v struct{ Samples int64 }
		resp := getJSON(t, api+"/api/top?"+span+"&"+filter, &v)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/api/top?%s: status %d", filter, resp.StatusCode)
		}
		return v.Samples, resp.Header.Values("Warning")
	}
	want, _ := top(api, fmt.Sprintf("pid=%d", inside.Process.Pid))
	if want < 10 {
		t.Fatalf("%d samples of the fixture in the cgroup: not a test", want)
	}
	if n, _ := top(api, fmt.Sprintf("pid=%d", outside.Process.Pid)); n < 10 {
		t.Fatalf("%d samples of the fixture outside the cgroup: not a test", n)
	}
	forms := []string{below, strings.TrimPrefix(below, "/"), cgroup}
	check := func(when string) {
		t.Helper()
		for _, path := range forms {
			got, warnings := top(api, "cgroup="+url.QueryEscape(path))
			if got != want {
				t.Errorf("%s: cgroup=%s: %d samples, want the fixture's %d (warnings %q)", when, path, got, want, warnings)
			}
			both, _ := top(api, fmt.Sprintf("cgroup=%s&pid=%d", url.QueryEscape(path), inside.Process.Pid))
			if both != want {
				t.Errorf("%s: cgroup=%s and the fixture's pid: %d samples, want %d: the path selects others", when, path, both, want)
			}
		}
		if got, _ := top(api, "cgroup="+url.QueryEscape(below+"-none")); got != 0 {
			t.Errorf("%s: a path no cgroup had selects %d samples", when, got)
		}
	}
	check("the cgroup removed")

	// Another cgroup at the same path: another id, and none of the samples.
	if err := os.MkdirAll(cgroup, 0o755); err != nil {
		t.Fatal(err)
	}
	check("another cgroup at its path")
	d.stop(t)

	// Without kept paths: none selected, and a Warning saying why.
	addr = "127.0.0.1:" + freePort(t)
	d = startDaemon(t, bin, "serve", "--data", bare, "--listen", addr)
	api = "http://" + addr
	waitServing(t, d, api+"/api/sources")
	if n, _ := top(api, fmt.Sprintf("pid=%d", inside.Process.Pid)); n < 10 {
		t.Fatalf("%d samples of the fixture in the recording without paths: not a test", n)
	}
	got, warnings := top(api, "cgroup="+url.QueryEscape(below))
	if got != 0 || len(warnings) == 0 {
		t.Fatalf("cgroup=%s over a recording without paths: %d samples, warnings %q; want none and a Warning", below, got, warnings)
	}
	for _, w := range warnings {
		if !strings.Contains(w, "no recorded cgroup path") || !strings.Contains(w, "--containers=false") {
			t.Errorf("warning %q does not say the cgroup paths were not recorded", w)
		}
	}
	d.stop(t)
}
