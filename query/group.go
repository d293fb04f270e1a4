package query

import (
	"github.com/heatscope/heatscope/store"
)

// Group is what flame graphs put between the root and the commands:
// nothing, or one node per container, pod, namespace, QoS class or cgroup.
type Group string

// Groupings.
const (
	GroupNone      Group = ""
	GroupContainer Group = "container"
	GroupPod       Group = "pod"
	GroupNamespace Group = "namespace"
	GroupQoS       Group = "qos"
	GroupCgroup    Group = "cgroup"
)

// ParseGroup reads the group parameter: "" (none), container, pod,
// namespace, qos or cgroup.
func ParseGroup(v string) (Group, error) {
	switch g := Group(v); g {
	case GroupNone, GroupContainer, GroupPod, GroupNamespace, GroupQoS, GroupCgroup:
		return g, nil
	}
	return "", paramErr("group", "%q: want container, pod, namespace, qos or cgroup", v)
}

// label names the group of a thread whose Meta is meta: "namespace/pod/container" for a named
// Kubernetes container, "runtime 0123456789ab" (a short id) for others,
// "namespace/pod" for pods; a bracketed "[no container]" and the like
// for samples without.
func (g Group) label(t *store.Table, meta uint32) string {
	var c store.Cgroup
	if meta > 0 {
		c = t.Cgroups[meta-1]
	}
	s := func(id uint32) string { return t.Strings[id] }
	switch g {
	case GroupContainer:
		switch id := s(c.ContainerID); {
		case s(c.Container) != "" && s(c.Pod) != "":
			return s(c.Namespace) + "/" + s(c.Pod) + "/" + s(c.Container)
		case id != "" && s(c.Runtime) != "":
			return s(c.Runtime) + " " + id[:min(12, len(id))]
		case id != "":
			return id[:min(12, len(id))]
		}
		return "[no container]"
	case GroupPod:
		switch {
		case s(c.Pod) != "":
			return s(c.Namespace) + "/" + s(c.Pod)
		case s(c.PodUID) != "":
			return "pod " + s(c.PodUID)
		}
		return "[no pod]"
	case GroupNamespace:
		if ns := s(c.Namespace); ns != "" {
			return ns
		}
		return "[no namespace]"
	case GroupQoS:
		if q := s(c.QoS); q != "" {
			return q
		}
		return "[no pod]"
	case GroupCgroup:
		if p := s(c.Path); p != "" {
			return p
		}
		return "[unknown cgroup]"
	}
	return ""
}
