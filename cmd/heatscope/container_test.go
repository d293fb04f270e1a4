package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/heatscope/heatscope/internal/bpftest"
	"github.com/heatscope/heatscope/profiler"
)

// TestContainerLabels runs a fixture in a cgroup named as the kubelet's
// systemd driver names a containerd container, with the kubelet's log
// directories faked under --host-root, records, and finds the container's
// labels on its samples: in the recorded pprof, through the API's filters
// and groups, and in the pprof the API exports.
func TestContainerLabels(t *testing.T) {
	bpftest.Require(t)
	root, err := profiler.CgroupV2Root()
	if err != nil {
		t.Skipf("no cgroup v2 hierarchy to create a container cgroup in: %v", err)
	}
	const (
		uid       = "3c0a5d7e-91b2-4f6c-8d3e-2a1b0c9d8e7f"
		id        = "4a1e0c9b8d7f6e5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a"
		ns, pod   = "shop", "cart-6f8d9c-x2x4q"
		container = "cart"
	)
	base, err := os.MkdirTemp(root, "heatscope-test-")
	if err != nil {
		t.Fatalf("create a cgroup under %s: %v", root, err)
	}
	t.Cleanup(func() { removeCgroupTree(t, base) })
	scope := filepath.Join(base, "kubepods.slice", "kubepods-besteffort.slice",
		"kubepods-besteffort-pod"+strings.ReplaceAll(uid, "-", "_")+".slice", "cri-containerd-"+id+".scope")
	if err := os.MkdirAll(scope, 0o755); err != nil {
		t.Fatal(err)
	}
	host := t.TempDir()
	for _, d := range []string{"var/log/pods/" + ns + "_" + pod + "_" + uid + "/" + container, "var/log/containers", "var/lib/kubelet/pods"} {
		if err := os.MkdirAll(filepath.Join(host, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(host, "var/log/containers", pod+"_"+ns+"_"+container+"-"+id+".log")
	if err := os.Symlink(filepath.Join(host, "var/log/pods", ns+"_"+pod+"_"+uid, container, "0.log"), link); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	bin := buildHeatscope(t, dir)
	hotc, _ := buildFixtures(t, dir)
	inside := startInCgroup(t, scope, hotc)
	outside := start(t, hotc)
	time.Sleep(200 * time.Millisecond)

	began := time.Now()
	out := filepath.Join(dir, "profile.pb.gz")
	data := filepath.Join(dir, "data")
	if _, stderr, err := runHeatscope(bin, "record", "--duration", "4s", "--data", data, "--output", out, "--host-root", host); err != nil {
		t.Fatalf("heatscope record: %v\n%s", err, stderr)
	}
	want := map[string]string{"container_id": id, "container_runtime": "containerd", "container": container, "pod": pod,
		"pod_uid": uid, "namespace": ns, "qos": "besteffort",
		"cgroup": strings.TrimPrefix(scope, root)}

	// The recorded pprof.
	p := readProfile(t, out)
	checkLabels(t, "recorded pprof", p, inside.Process.Pid, outside.Process.Pid, want)

	// The API over the data directory.
	addr := "127.0.0.1:" + freePort(t)
	d := startDaemon(t, bin, "serve", "--data", data, "--listen", addr)
	api := "http://" + addr
	waitServing(t, d, api+"/api/sources")
	span := fmt.Sprintf("from=%d&to=%d", began.Add(-time.Minute).Unix(), time.Now().Add(time.Minute).Unix())
	get := func(path, filter string) *http.Response {
		resp, err := http.Get(api + path + "?" + span + "&" + filter)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			t.Fatalf("%s?%s: status %d", path, filter, resp.StatusCode)
		}
		return resp
	}
	for _, filter := range []string{"container=" + container, "container=" + id[:12], "pod=" + pod, "pod=" + uid,
		"namespace=" + ns, "qos=besteffort", "namespace=" + ns + "&container=" + container} {
		resp := get("/api/pprof", filter)
		p, err := profile.Parse(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("/api/pprof?%s: %v", filter, err)
		}
		if len(p.Sample) == 0 {
			t.Fatalf("/api/pprof?%s: no samples", filter)
		}
		for _, s := range p.Sample {
			if s.Label["pid"][0] != fmt.Sprint(inside.Process.Pid) {
				t.Fatalf("/api/pprof?%s: a sample of pid %s, not of the container's fixture %d", filter, s.Label["pid"][0], inside.Process.Pid)
			}
		}
		checkLabels(t, "/api/pprof?"+filter, p, inside.Process.Pid, -1, want)
	}
	for _, filter := range []string{"qos=guaranteed", "namespace=kube-system", "container=" + strings.Repeat("0", 12)} {
		var top struct{ Samples int64 }
		if resp := getJSON(t, api+"/api/top?"+span+"&"+filter, &top); resp.StatusCode != http.StatusOK || top.Samples != 0 {
			t.Errorf("/api/top?%s: status %d, %d samples, want none", filter, resp.StatusCode, top.Samples)
		}
	}
	type node struct {
		Name, Kind string
		Value      int64
		Children   []*node
	}
	var fg node
	getJSON(t, api+"/api/flamegraph?"+span+"&group=container", &fg)
	label := ns + "/" + pod + "/" + container
	i := slices.IndexFunc(fg.Children, func(n *node) bool { return n.Name == label })
	if i < 0 {
		t.Fatalf("no group %q under the flame graph's root: %+v", label, fg.Children)
	}
	g := fg.Children[i]
	if g.Kind != "group" || len(g.Children) != 1 || g.Children[0].Name != "hotc" {
		t.Fatalf("group %q: kind %q, commands %+v, want only hotc", label, g.Kind, g.Children)
	}
	d.stop(t)
}

// checkLabels checks the container labels of pid's samples, and that
// other's samples (other >= 0) have none.
func checkLabels(t *testing.T, what string, p *profile.Profile, pid, other int, want map[string]string) {
	t.Helper()
	samples := samplesOf(p, pid)
	if len(samples) == 0 {
		t.Fatalf("%s: no samples of the fixture in the container (pid %d)", what, pid)
	}
	hot, total := count(samples, func(s *profile.Sample) bool { return stackNames(s)[0] == "hot_c_function" })
	if total < 50 || hot*100 < total*80 {
		t.Errorf("%s: hot_c_function is the leaf of %d of %d samples", what, hot, total)
	}
	for _, s := range samples {
		for k, v := range want {
			if got := s.Label[k]; len(got) != 1 || got[0] != v {
				t.Fatalf("%s: label %s = %v, want %q (labels %v)", what, k, got, v, s.Label)
			}
		}
	}
	if other < 0 {
		return
	}
	outside := samplesOf(p, other)
	if len(outside) == 0 {
		t.Fatalf("%s: no samples of the fixture outside the container", what)
	}
	for _, s := range outside {
		if _, ok := s.Label["container_id"]; ok {
			t.Fatalf("%s: a process outside the container has labels %v", what, s.Label)
		}
	}
}

// startInCgroup starts name in the cgroup v2 directory cgroup
// (CLONE_INTO_CGROUP), killing it when the test ends.
func startInCgroup(t *testing.T, cgroup, name string, args ...string) *exec.Cmd {
	t.Helper()
	fd, err := syscall.Open(cgroup, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s in cgroup %s: %v", name, cgroup, err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// removeCgroupTree removes the cgroups under base, deepest first; their
// processes must be gone (test cleanups run last-registered first, so the
// fixtures started after the cgroups were made are killed before this).
func removeCgroupTree(t *testing.T, base string) {
	var dirs []string
	filepath.WalkDir(base, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		var err error
		for try := 0; try < 50; try++ { // a killed process leaves its cgroup shortly after
			if err = os.Remove(dirs[i]); err == nil || os.IsNotExist(err) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil && !os.IsNotExist(err) {
			t.Errorf("remove cgroup %s: %v", dirs[i], err)
		}
	}
}
