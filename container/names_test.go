package container

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/heatscope/heatscope/sample"
)

// fakeNode lays out the kubelet's directories under a temporary root.
type fakeNode struct {
	t    *testing.T
	dirs Dirs
}

func newFakeNode(t *testing.T) *fakeNode {
	root := t.TempDir()
	n := &fakeNode{t: t, dirs: Dirs{
		LogPods:       filepath.Join(root, "var/log/pods"),
		LogContainers: filepath.Join(root, "var/log/containers"),
		KubeletPods:   filepath.Join(root, "var/lib/kubelet/pods"),
	}}
	for _, d := range []string{n.dirs.LogPods, n.dirs.LogContainers, n.dirs.KubeletPods} {
		n.mkdir(d)
	}
	return n
}

func (n *fakeNode) mkdir(path string) {
	if err := os.MkdirAll(path, 0o755); err != nil {
		n.t.Fatal(err)
	}
}

// pod adds /var/log/pods/<ns>_<pod>_<uid>/<container>/ for each container.
func (n *fakeNode) pod(ns, pod, uid string, containers ...string) {
	for _, c := range containers {
		n.mkdir(filepath.Join(n.dirs.LogPods, ns+"_"+pod+"_"+uid, c))
	}
}

// link adds /var/log/containers/<pod>_<ns>_<container>-<id>.log.
func (n *fakeNode) link(ns, pod, container, id string) {
	target := filepath.Join(n.dirs.LogPods, ns+"_"+pod+"_x", container, "0.log")
	if err := os.Symlink(target, filepath.Join(n.dirs.LogContainers, pod+"_"+ns+"_"+container+"-"+id+".log")); err != nil {
		n.t.Fatal(err)
	}
}

func TestNames(t *testing.T) {
	const (
		uidA = "11111111-2222-3333-4444-555555555555"
		uidB = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
		uidC = "99999999-8888-7777-6666-555555555555"
		uidD = "12121212-3434-5656-7878-909090909090"
	)
	node := newFakeNode(t)
	node.pod("shop", "cart-7d9f", uidA, "cart", "istio-proxy")
	node.link("shop", "cart-7d9f", "istio-proxy", id2)
	node.pod("kube-system", "coredns-5d78", uidB, "coredns")
	node.mkdir(filepath.Join(node.dirs.KubeletPods, uidC, "containers", "worker"))
	node.pod("batch", "etl-1", uidD, "extract", "load")

	n := newNames(node.dirs)
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		name string
		in   Info
		want sample.Container
	}{
		{"container named by its log link", Info{ID: id2, PodUID: uidA},
			sample.Container{Namespace: "shop", Pod: "cart-7d9f", Name: "istio-proxy"}},
		{"two containers, no link: pod names only", Info{ID: id1, PodUID: uidA},
			sample.Container{Namespace: "shop", Pod: "cart-7d9f"}},
		{"the pod's only log directory names the container", Info{ID: id1, PodUID: uidB},
			sample.Container{Namespace: "kube-system", Pod: "coredns-5d78", Name: "coredns"}},
		{"pod cgroup: no container name", Info{PodUID: uidB},
			sample.Container{Namespace: "kube-system", Pod: "coredns-5d78"}},
		{"kubelet directory names the container", Info{ID: id1, PodUID: uidC},
			sample.Container{Name: "worker"}},
		{"several containers, none linked", Info{ID: id1, PodUID: uidD},
			sample.Container{Namespace: "batch", Pod: "etl-1"}},
		{"unknown pod", Info{ID: id1, PodUID: "00000000-0000-0000-0000-000000000000"}, sample.Container{}},
		{"not a pod", Info{ID: id1}, sample.Container{}},
	} {
		var got sample.Container
		n.fill(tc.in, &got, now)
		if got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}

	// A pod that appears later is found at the first lookup a second or
	// more after the last listing, not before.
	const uidE = "eeeeeeee-0000-1111-2222-333333333333"
	node.pod("late", "newcomer", uidE, "app")
	var got sample.Container
	n.fill(Info{ID: id1, PodUID: uidE}, &got, now.Add(rescanInterval/2))
	if got.Pod != "" {
		t.Errorf("the pod directory was listed again within %v: %+v", rescanInterval, got)
	}
	n.fill(Info{ID: id1, PodUID: uidE}, &got, now.Add(rescanInterval))
	if got.Namespace != "late" || got.Pod != "newcomer" || got.Name != "app" {
		t.Errorf("a new pod was not found after %v: %+v", rescanInterval, got)
	}
}

func TestNamesIgnoresStrangers(t *testing.T) {
	node := newFakeNode(t)
	for _, d := range []string{"no-underscores", "a_b", "a_b_c_d", "_pod_" + uid, "ns__" + uid, "ns_pod_not-a-uid"} {
		node.mkdir(filepath.Join(node.dirs.LogPods, d, "c"))
	}
	for _, f := range []string{"x.log", "pod_ns_c-" + id1[:63] + ".log", "pod_ns-" + id1 + ".log", "pod_ns_c-" + id1 + ".txt"} {
		os.WriteFile(filepath.Join(node.dirs.LogContainers, f), nil, 0o644)
	}
	n := newNames(node.dirs)
	n.scanPods()
	n.scanContainers()
	if len(n.pods) != 0 || len(n.containers) != 0 {
		t.Errorf("malformed names were indexed: pods %v, containers %v", n.pods, n.containers)
	}
}
