package container

import (
	"strings"
	"testing"
)

const (
	id1  = "9f3ac9d2a4b1e0f7c6d5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a392817060"
	id2  = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	uid  = "5f1b3a9e-2c4d-4e6f-8a0b-1c2d3e4f5a6b"
	uid_ = "5f1b3a9e_2c4d_4e6f_8a0b_1c2d3e4f5a6b"
	// static pods have a 32 hex digit hash as UID
	staticUID = "6b4c0d3e2f1a09b8c7d6e5f4a3b2c1d0"
)

// TestParse reads cgroup paths as they appear on real nodes.
func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, path string
		want       Info
	}{
		// Kubernetes, systemd driver, cgroup v2.
		{"containerd systemd besteffort",
			"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uid_ + ".slice/cri-containerd-" + id1 + ".scope",
			Info{ID: id1, Runtime: Containerd, PodUID: uid, QoS: BestEffort}},
		{"containerd systemd burstable",
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uid_ + ".slice/cri-containerd-" + id1 + ".scope",
			Info{ID: id1, Runtime: Containerd, PodUID: uid, QoS: Burstable}},
		{"containerd systemd guaranteed",
			"/kubepods.slice/kubepods-pod" + uid_ + ".slice/cri-containerd-" + id1 + ".scope",
			Info{ID: id1, Runtime: Containerd, PodUID: uid, QoS: Guaranteed}},
		{"cri-o systemd",
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uid_ + ".slice/crio-" + id2 + ".scope",
			Info{ID: id2, Runtime: CRIO, PodUID: uid, QoS: Burstable}},
		{"cri-o systemd, nested container cgroup",
			"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uid_ + ".slice/crio-" + id2 + ".scope/container",
			Info{ID: id2, Runtime: CRIO, PodUID: uid, QoS: BestEffort}},
		{"cri-o conmon is not the container",
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uid_ + ".slice/crio-conmon-" + id2 + ".scope",
			Info{PodUID: uid, QoS: Burstable}},
		{"docker (dockershim) systemd",
			"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uid_ + ".slice/docker-" + id1 + ".scope",
			Info{ID: id1, Runtime: Docker, PodUID: uid, QoS: BestEffort}},
		{"pod slice only",
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uid_ + ".slice",
			Info{PodUID: uid, QoS: Burstable}},
		{"qos slice only", "/kubepods.slice/kubepods-besteffort.slice", Info{QoS: BestEffort}},
		{"kind: kubelet cgroup root inside a docker container",
			"/system.slice/docker-" + id2 + ".scope/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod" + uid_ + ".slice/cri-containerd-" + id1 + ".scope",
			Info{ID: id1, Runtime: Containerd, PodUID: uid, QoS: BestEffort}},
		{"static pod",
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + staticUID + ".slice/cri-containerd-" + id1 + ".scope",
			Info{ID: id1, Runtime: Containerd, PodUID: staticUID, QoS: Burstable}},

		// Kubernetes, cgroupfs driver (cgroup v1 hierarchies look the same).
		{"containerd cgroupfs burstable", "/kubepods/burstable/pod" + uid + "/" + id1,
			Info{ID: id1, PodUID: uid, QoS: Burstable}},
		{"containerd cgroupfs besteffort", "/kubepods/besteffort/pod" + uid + "/" + id1,
			Info{ID: id1, PodUID: uid, QoS: BestEffort}},
		{"containerd cgroupfs guaranteed", "/kubepods/pod" + uid + "/" + id1,
			Info{ID: id1, PodUID: uid, QoS: Guaranteed}},
		{"cri-o cgroupfs", "/kubepods/burstable/pod" + uid + "/crio-" + id2,
			Info{ID: id2, Runtime: CRIO, PodUID: uid, QoS: Burstable}},
		{"cgroup v1 line path (GKE)", "/kubepods/besteffort/pod" + uid + "/" + id2,
			Info{ID: id2, PodUID: uid, QoS: BestEffort}},
		{"pod directory only", "/kubepods/burstable/pod" + uid, Info{PodUID: uid, QoS: Burstable}},
		{"upper-case uid is lowered", "/kubepods/pod" + strings.ToUpper(uid), Info{PodUID: uid, QoS: Guaranteed}},

		// Plain Docker and Podman.
		{"docker cgroupfs (v1 and v2)", "/docker/" + id1, Info{ID: id1, Runtime: Docker}},
		{"docker systemd", "/system.slice/docker-" + id1 + ".scope", Info{ID: id1, Runtime: Docker}},
		{"docker in docker", "/docker/" + id1 + "/docker/" + id2, Info{ID: id2, Runtime: Docker}},
		{"podman systemd", "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + id2 + ".scope",
			Info{ID: id2, Runtime: Podman}},
		{"podman cgroupfs", "/libpod_parent/libpod-" + id2, Info{ID: id2, Runtime: Podman}},

		// Not containers.
		{"root", "/", Info{}},
		{"empty", "", Info{}},
		{"system service", "/system.slice/ssh.service", Info{}},
		{"user session", "/user.slice/user-0.slice/session-3.scope", Info{}},
		{"docker daemon itself", "/system.slice/docker.service", Info{}},
		{"bare id outside a pod or docker", "/" + id1, Info{}},
		{"short id", "/docker/" + id1[:12], Info{}},
		{"upper-case id", "/docker/" + strings.ToUpper(id1), Info{}},
		{"bad uid", "/kubepods/burstable/podnot-a-uid/" + id1, Info{QoS: Burstable}},
		{"kubepods as a suffix only", "/mykubepods-burstable-pod" + uid_ + ".slice", Info{}},
		{"prefixed id too long", "/system.slice/docker-" + id1 + "0.scope", Info{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Parse(tc.path); got != tc.want {
				t.Errorf("Parse(%q)\n got  %+v\n want %+v", tc.path, got, tc.want)
			}
		})
	}
}
