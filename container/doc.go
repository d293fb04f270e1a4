// Package container labels samples with the container they ran in: from a
// sample's cgroup id it finds the cgroup's path, and from the path the
// container id, its runtime (containerd, CRI-O, Docker, Podman) and, for
// Kubernetes pods, the pod UID and QoS class, for the cgroupfs and systemd
// drivers and cgroup v1 and v2 paths alike (Parse). Where the kubelet's
// directories exist (/var/log/pods, /var/log/containers,
// /var/lib/kubelet/pods) it adds the namespace, pod and container names.
//
// A Resolver caches its answers by cgroup id, so a sample costs one map
// lookup; a cgroup is resolved at its first sample, while it exists, and
// keeps its labels after it is gone.
package container
