package web

import (
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/heatscope/heatscope/internal/synth"
)

// TestCgroupPathFilterNotOnThisHost filters the test store by the path of
// a cgroup its samples were recorded in (synth's cart container) that this
// host does not have, as a fleet's query service does not have its nodes'
// cgroups. The path, relative, below the mount or under /sys/fs/cgroup,
// selects exactly the container's samples, from what the recording kept;
// the samples of the cgroup whose path was not kept are named in a
// Warning; a path no cgroup had answers an empty table. Before, the path
// was looked up on the serving host and refused (400) when missing there.
func TestCgroupPathFilterNotOnThisHost(t *testing.T) {
	cart := synth.Containers()[0]
	if _, err := os.Stat("/sys/fs/cgroup" + cart.Cgroup); !os.IsNotExist(err) {
		t.Fatalf("this host has the cgroup %s (%v): not a test", cart.Cgroup, err)
	}
	fx := newFixture(t, testStore(t), Options{})
	top := func(filter string) (int64, http.Header) {
		t.Helper()
		resp, body := fx.get(t, "/api/top?"+queryA+"&"+filter)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/api/top?%s: %d %s", filter, resp.StatusCode, body)
		}
		var v struct {
			Samples   int64
			Functions []any
		}
		if err := json.Unmarshal(body, &v); err != nil || v.Functions == nil {
			t.Fatalf("/api/top?%s: %v, functions %v", filter, err, v.Functions)
		}
		return v.Samples, resp.Header
	}
	want, header := top("container=" + cart.Name)
	if want == 0 {
		t.Fatal("the cart container has no samples in range: not a test")
	}
	if w := header.Values("Warning"); len(w) != 0 {
		t.Fatalf("a container filter warns %q", w)
	}
	for _, path := range []string{cart.Cgroup, strings.TrimPrefix(cart.Cgroup, "/"), "/sys/fs/cgroup" + cart.Cgroup} {
		got, header := top("cgroup=" + url.QueryEscape(path))
		if got != want {
			t.Errorf("cgroup=%s: %d samples, want the cart container's %d", path, got, want)
		}
		// One for each block and head: each holds threads of cgroup 5006.
		warnings := header.Values("Warning")
		if len(warnings) == 0 {
			t.Errorf("cgroup=%s: no Warning, want the threads without a recorded cgroup path named", path)
		}
		for _, w := range warnings {
			if !strings.Contains(w, "threads have no recorded cgroup path") || strings.Contains(w, "unreadable") {
				t.Errorf("cgroup=%s: warning %q, want one naming the threads without a recorded cgroup path (synth's cgroup 5006)", path, w)
			}
		}
	}
	if got, _ := top("cgroup=" + url.QueryEscape("/kubepods.slice/no-such-pod.slice")); got != 0 {
		t.Errorf("a path no cgroup had selects %d samples", got)
	}
}
