package container

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/heatscope/heatscope/sample"
)

// Dirs are where a Kubernetes node keeps pod and container names. Empty
// fields are not read.
type Dirs struct {
	// LogPods holds "<namespace>_<pod>_<uid>/<container>/" (the kubelet's
	// pod log directories).
	LogPods string
	// LogContainers holds "<pod>_<namespace>_<container>-<id>.log" (the
	// kubelet's links to the container logs).
	LogContainers string
	// KubeletPods holds "<uid>/containers/<container>/" (the kubelet's pod
	// directories).
	KubeletPods string
}

// DefaultDirs are the kubelet's standard directories.
func DefaultDirs() Dirs {
	return Dirs{LogPods: "/var/log/pods", LogContainers: "/var/log/containers", KubeletPods: "/var/lib/kubelet/pods"}
}

// rescanInterval is the least time between two listings of one directory:
// a container the kubelet has not named yet costs at most one listing a
// second, however many samples it has.
const rescanInterval = time.Second

// podName is a pod's namespace and name, and its log directory.
type podName struct{ namespace, pod, logDir string }

// containerName is what a container's log link names.
type containerName struct{ namespace, pod, name string }

// names finds Kubernetes names in the kubelet's directories. Listings are
// indexed and kept; a miss lists the directory again, at most once per
// rescanInterval, and the new listing replaces the index, so it holds at
// most the node's current pods. Not safe for concurrent use.
type names struct {
	dirs           Dirs
	pods           map[string]podName       // by pod UID
	containers     map[string]containerName // by container id
	podsScan       time.Time
	containersScan time.Time
}

func newNames(dirs Dirs) *names {
	return &names{dirs: dirs, pods: map[string]podName{}, containers: map[string]containerName{}}
}

// fill adds the namespace, pod and container names of in's container or
// pod to c, where the directories know them.
func (n *names) fill(in Info, c *sample.Container, now time.Time) {
	if in.ID != "" {
		cn, ok := n.containers[in.ID]
		if !ok && n.dirs.LogContainers != "" && now.Sub(n.containersScan) >= rescanInterval {
			n.containersScan = now
			n.scanContainers()
			cn, ok = n.containers[in.ID]
		}
		if ok {
			c.Namespace, c.Pod, c.Name = cn.namespace, cn.pod, cn.name
		}
	}
	if in.PodUID == "" || c.Namespace != "" && (c.Name != "" || in.ID == "") {
		return
	}
	pn, ok := n.pods[in.PodUID]
	if !ok && n.dirs.LogPods != "" && now.Sub(n.podsScan) >= rescanInterval {
		n.podsScan = now
		n.scanPods()
		pn, ok = n.pods[in.PodUID]
	}
	if ok && c.Namespace == "" {
		c.Namespace, c.Pod = pn.namespace, pn.pod
	}
	if in.ID == "" || c.Name != "" {
		return
	}
	// Without a log link naming the container, a pod with a single
	// container names it.
	if ok {
		c.Name = onlySubdir(pn.logDir)
	}
	if c.Name == "" && n.dirs.KubeletPods != "" {
		c.Name = onlySubdir(filepath.Join(n.dirs.KubeletPods, in.PodUID, "containers"))
	}
}

// scanPods indexes LogPods: "<namespace>_<pod>_<uid>" directories. The
// index is rebuilt, so pods deleted since the last listing leave it.
func (n *names) scanPods() {
	entries, err := os.ReadDir(n.dirs.LogPods)
	if err != nil {
		return
	}
	n.pods = make(map[string]podName, len(entries))
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		ns, pod, uid, ok := split3(e.Name())
		if !ok {
			continue
		}
		if uid, ok = podUID(uid); ok {
			n.pods[uid] = podName{namespace: ns, pod: pod, logDir: filepath.Join(n.dirs.LogPods, e.Name())}
		}
	}
}

// scanContainers indexes LogContainers:
// "<pod>_<namespace>_<container>-<id>.log" links, rebuilding the index.
func (n *names) scanContainers() {
	entries, err := os.ReadDir(n.dirs.LogContainers)
	if err != nil {
		return
	}
	n.containers = make(map[string]containerName, len(entries))
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".log")
		if !ok || len(name) < 66 || name[len(name)-65] != '-' {
			continue
		}
		id := name[len(name)-64:]
		pod, ns, cname, ok := split3(name[:len(name)-65])
		if ok && isContainerID(id) {
			n.containers[id] = containerName{namespace: ns, pod: pod, name: cname}
		}
	}
}

// split3 splits "a_b_c" into three non-empty parts (Kubernetes names never
// hold "_").
func split3(s string) (a, b, c string, ok bool) {
	parts := strings.Split(s, "_")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}

// onlySubdir returns the name of dir's one subdirectory, "" when it has
// none or several.
func onlySubdir(dir string) string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	name := ""
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if name != "" {
			return ""
		}
		name = e.Name()
	}
	return name
}
