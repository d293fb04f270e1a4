package container

import (
	"strings"
)

// Info is what a cgroup path alone says about a container.
type Info struct {
	// ID is the container id (64 hex digits), "" when the path names none.
	ID string
	// Runtime is "containerd", "cri-o", "docker" or "podman" when the path
	// names it ("" when it does not: the cgroupfs driver of containerd
	// names a container by its bare id).
	Runtime string
	// PodUID is the Kubernetes pod UID, with dashes.
	PodUID string
	// QoS is "guaranteed", "burstable" or "besteffort" for pods.
	QoS string
}

// Runtime names.
const (
	Containerd = "containerd"
	CRIO       = "cri-o"
	Docker     = "docker"
	Podman     = "podman"
)

// QoS classes.
const (
	Guaranteed = "guaranteed"
	Burstable  = "burstable"
	BestEffort = "besteffort"
)

// Levels of the cgroupfs driver's Kubernetes hierarchy:
// kubepods/[burstable|besteffort/]pod<uid>/<container>.
const (
	other = iota
	kubepodsLevel
	qosLevel
	podLevel
)

// scopePrefixes are the systemd scope (and cgroupfs leaf) prefixes before
// a container id, and the runtime each names.
var scopePrefixes = []struct{ prefix, runtime string }{
	{"cri-containerd-", Containerd},
	{"crio-", CRIO},
	{"docker-", Docker},
	{"libpod-", Podman},
}

// Parse reads a cgroup path, cgroup v1 or v2, cgroupfs or systemd driver,
// for a container id, its runtime, and the Kubernetes pod UID and QoS
// class. The deepest container in the path wins, so a container nested in
// another (Docker in Docker) is the inner one.
//
// Recognised shapes, for example:
//
//	/kubepods/burstable/pod<uid>/<id>                              (cgroupfs)
//	/kubepods/pod<uid>/crio-<id>                                   (cgroupfs, CRI-O, guaranteed)
//	/kubepods.slice/kubepods-besteffort.slice/
//	    kubepods-besteffort-pod<uid_>.slice/cri-containerd-<id>.scope  (systemd)
//	/docker/<id>, /system.slice/docker-<id>.scope                  (plain Docker)
func Parse(path string) Info {
	var in Info
	parent := ""
	level := other // what parent is in the cgroupfs driver's hierarchy
	for seg := range strings.SplitSeq(path, "/") {
		if seg == "" {
			continue
		}
		next := other
		switch {
		case strings.HasSuffix(seg, ".slice"):
			if parseSlice(strings.TrimSuffix(seg, ".slice"), &in) {
				next = podLevel
			}
		case seg == "kubepods":
			next = kubepodsLevel
		case level == kubepodsLevel && (seg == Burstable || seg == BestEffort):
			in.QoS, next = seg, qosLevel
		case (level == kubepodsLevel || level == qosLevel) && strings.HasPrefix(seg, "pod"):
			if uid, ok := podUID(seg[len("pod"):]); ok {
				in.PodUID, next = uid, podLevel
				if level == kubepodsLevel {
					in.QoS = Guaranteed
				}
			}
		default:
			if id, runtime, ok := containerID(seg, parent, level == podLevel); ok {
				in.ID, in.Runtime = id, runtime
			}
		}
		parent, level = seg, next
	}
	return in
}

// parseSlice reads a systemd slice name (without ".slice") of the
// Kubernetes hierarchy: "kubepods-burstable-pod<uid_>" and its parents,
// with any prefix a custom cgroup root adds ("kubelet-kubepods-..."). It
// reports whether the slice is a pod's.
func parseSlice(name string, in *Info) bool {
	i := strings.Index(name, "kubepods")
	if i < 0 || i > 0 && name[i-1] != '-' {
		return false
	}
	rest := name[i+len("kubepods"):]
	if rest == "" || rest[0] != '-' {
		return false
	}
	rest = rest[1:]
	qos := Guaranteed
	for _, q := range []string{Burstable, BestEffort} {
		if rest == q {
			in.QoS = q
			return false
		}
		if strings.HasPrefix(rest, q+"-") {
			qos, rest = q, rest[len(q)+1:]
			break
		}
	}
	if !strings.HasPrefix(rest, "pod") {
		return false
	}
	// systemd escapes the UID's dashes as underscores.
	uid, ok := podUID(strings.ReplaceAll(rest[len("pod"):], "_", "-"))
	if ok {
		in.PodUID, in.QoS = uid, qos
	}
	return ok
}

// podUID checks a pod UID: a UUID (8-4-4-4-12 hex digits), or the 32 hex
// digits the kubelet gives static pods.
func podUID(s string) (string, bool) {
	switch len(s) {
	case 32:
		return strings.ToLower(s), isHex(s)
	case 36:
		for i, c := range []byte(s) {
			if i == 8 || i == 13 || i == 18 || i == 23 {
				if c != '-' {
					return "", false
				}
			} else if !isHexDigit(c) {
				return "", false
			}
		}
		return strings.ToLower(s), true
	}
	return "", false
}

// containerID reads one path segment as a container: "<prefix><id>.scope"
// (systemd), "<prefix><id>" or a bare id (cgroupfs). A bare id is only
// taken where runtimes put one: under a pod (inPod), or under "docker"
// (Docker's cgroupfs parent).
func containerID(seg, parent string, inPod bool) (id, runtime string, ok bool) {
	name := strings.TrimSuffix(seg, ".scope")
	for _, p := range scopePrefixes {
		if strings.HasPrefix(name, p.prefix) {
			id = name[len(p.prefix):]
			if isContainerID(id) {
				return id, p.runtime, true
			}
			return "", "", false
		}
	}
	if name != seg || !isContainerID(name) {
		return "", "", false
	}
	switch {
	case parent == "docker":
		return name, Docker, true
	case inPod:
		return name, "", true
	}
	return "", "", false
}

// isContainerID reports whether s is 64 lower-case hex digits, the ids
// containerd, CRI-O, Docker and Podman give containers.
func isContainerID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func isHex(s string) bool {
	for _, c := range []byte(s) {
		if !isHexDigit(c) {
			return false
		}
	}
	return true
}

func isHexDigit(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
