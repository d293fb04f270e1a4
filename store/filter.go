package store

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/heatscope/heatscope/sample"
)

// StackPart selects which frames of each stack a query keeps.
type StackPart int

// Stack parts.
const (
	// AllFrames keeps every frame.
	AllFrames StackPart = iota
	// KernelFrames keeps kernel frames; samples without any are dropped.
	KernelFrames
	// UserFrames keeps user (and JIT) frames; samples without any are dropped.
	UserFrames
)

// Filter selects samples. The zero Filter selects every non-idle sample.
type Filter struct {
	// Sources keeps samples of these sources (all when empty).
	Sources []string
	// Nodes keeps samples of these nodes (all when empty); NodeRegex
	// keeps those of nodes whose name matches.
	Nodes     []string
	NodeRegex *regexp.Regexp
	// NodeLabels keeps samples of nodes that have every one of these
	// labels with these values.
	NodeLabels []Label
	// PIDs and TIDs keep samples of these processes and threads.
	PIDs, TIDs []uint32
	// Comm keeps samples whose command is exactly this; CommRegex keeps
	// those whose command matches.
	Comm      string
	CommRegex *regexp.Regexp
	// CPUs keeps samples taken on these CPUs.
	CPUs []uint32
	// Cgroups keeps samples of these cgroup ids, and CgroupPaths those of
	// the cgroups at these paths below the cgroup v2 mount
	// ("/system.slice/kubelet.service"): a sample passes when its cgroup
	// is in either. A path is matched against what the recording host
	// kept for the sample's cgroup (the cgroups section of its block),
	// never looked up on the host that queries: a cgroup id means nothing
	// on another node, and its path there may name another cgroup or none.
	// A sample whose cgroup's path was not kept cannot pass by path, and
	// the query says so (CgroupPathsUnknown).
	Cgroups     []uint64
	CgroupPaths []string
	// Containers keeps samples of containers with one of these names or
	// ids (an id may be shortened to a prefix, as "docker ps" shows it).
	Containers []string
	// Pods keeps samples of pods with one of these names or UIDs.
	Pods []string
	// Namespaces keeps samples of pods in these Kubernetes namespaces.
	Namespaces []string
	// QoS keeps samples of pods of these QoS classes ("guaranteed",
	// "burstable", "besteffort").
	QoS []string
	// Frame keeps samples with any frame whose function matches: its
	// name or, for a Python frame, its qualified name or the name views
	// give it, "qualname (file)" (sample.FunctionName), so that both
	// ^Trainer\.step$ and trainer\.py match Trainer.step of
	// /srv/trainer.py.
	Frame *regexp.Regexp
	// Stack keeps kernel or user frames only.
	Stack StackPart
	// IncludeIdle keeps samples of the CPU idle loop (dropped by default).
	IncludeIdle bool
}

// Label is a node label, as in a block's meta (zone=us-east-1a).
type Label struct{ Key, Value string }

// keepsSource reports whether f selects source.
func (f *Filter) keepsSource(source string) bool {
	return len(f.Sources) == 0 || slices.Contains(f.Sources, source)
}

// KeepsNode reports whether f selects the samples of a node with these
// labels.
func (f *Filter) KeepsNode(node string, labels map[string]string) bool {
	switch {
	case len(f.Nodes) > 0 && !slices.Contains(f.Nodes, node),
		f.NodeRegex != nil && !f.NodeRegex.MatchString(node):
		return false
	}
	for _, l := range f.NodeLabels {
		if v, ok := labels[l.Key]; !ok || v != l.Value {
			return false
		}
	}
	return true
}

// keepsBlock reports whether f may select samples of a block with meta m:
// its source and its node.
func (f *Filter) keepsBlock(m *Meta) bool {
	return f.keepsSource(m.Source) && f.KeepsNode(m.Node, m.NodeLabels)
}

// threadOnly reports whether the filter looks at nothing but thread
// attributes (and idleness), so per-thread summaries can answer it.
func (f *Filter) threadOnly() bool {
	return len(f.CPUs) == 0 && f.Frame == nil && f.Stack == AllFrames
}

// allThreads reports whether the filter keeps every thread: it has no
// process, thread, command, cgroup or container condition.
func (f *Filter) allThreads() bool {
	return len(f.PIDs)+len(f.TIDs)+len(f.Cgroups)+len(f.CgroupPaths)+len(f.Containers)+len(f.Pods)+len(f.Namespaces)+len(f.QoS) == 0 &&
		f.Comm == "" && f.CommRegex == nil
}

// compiled is a filter evaluated against one table's entries.
type compiled struct {
	f          *Filter
	threadOK   []bool
	stackOK    []bool // frame regex and stack part
	idleThread []bool
	idleStack  []bool
	cpuOK      []bool
	keepFrame  []bool // per frame, for the stack part (nil: keep all)
	// pathless counts the threads whose cgroup's path the table does not
	// keep, when the filter names cgroup paths and keeps them out for that
	// alone: their samples could not be judged.
	pathless int
}

// compile evaluates f against t's threads, stacks and frames. idle holds
// t's idle masks when already known.
func compile(f *Filter, t *Table, idle *idleMasks) *compiled {
	c := &compiled{f: f}
	c.threadOK = make([]bool, len(t.Threads))
	// A thread of a known cgroup whose path is not kept, and that nothing
	// but its cgroup keeps out, is one the filter could not judge (a
	// thread of no known cgroup, id 0, passes no cgroup filter).
	var byOthers *Filter
	if len(f.CgroupPaths) > 0 {
		o := *f
		o.Cgroups, o.CgroupPaths = nil, nil
		byOthers = &o
	}
	for i, th := range t.Threads {
		c.threadOK[i] = f.keepsThread(th, t)
		if byOthers != nil && !c.threadOK[i] && th.Cgroup != 0 && cgroupPath(th, t) == "" && byOthers.keepsThread(th, t) {
			c.pathless++
		}
	}
	if idle != nil {
		c.idleThread, c.idleStack = idle.threads, idle.stacks
	} else {
		c.idleThread, c.idleStack = idleThreads(t), idleStacks(t)
	}
	if len(f.CPUs) > 0 {
		c.cpuOK = make([]bool, slices.Max(f.CPUs)+1)
		for _, cpu := range f.CPUs {
			c.cpuOK[cpu] = true
		}
	}
	if f.Stack != AllFrames {
		c.keepFrame = make([]bool, len(t.Frames))
		for i, fr := range t.Frames {
			kernel := fr.Kind == sample.KindKernel
			c.keepFrame[i] = kernel == (f.Stack == KernelFrames)
		}
	}
	var funcMatch map[uint32]bool
	var pyMatch map[[2]uint32]bool // by function and module
	if f.Frame != nil {
		funcMatch, pyMatch = map[uint32]bool{}, map[[2]uint32]bool{}
	}
	c.stackOK = make([]bool, t.NumStacks())
	for i := range c.stackOK {
		ok := true
		if c.keepFrame != nil {
			ok = slices.ContainsFunc(t.StackOf(uint32(i)), func(id uint32) bool { return c.keepFrame[id] })
		}
		if ok && f.Frame != nil {
			ok = slices.ContainsFunc(t.StackOf(uint32(i)), func(id uint32) bool {
				if c.keepFrame != nil && !c.keepFrame[id] {
					return false
				}
				fr := &t.Frames[id]
				if fr.Kind == sample.KindPython {
					k := [2]uint32{fr.Function, fr.Module}
					m, seen := pyMatch[k]
					if !seen {
						name := t.Strings[fr.Function]
						m = f.Frame.MatchString(name) || f.Frame.MatchString(sample.FunctionName(name, t.Strings[fr.Module], fr.Kind))
						pyMatch[k] = m
					}
					return m
				}
				m, seen := funcMatch[fr.Function]
				if !seen {
					m = f.Frame.MatchString(t.Strings[fr.Function])
					funcMatch[fr.Function] = m
				}
				return m
			})
		}
		c.stackOK[i] = ok
	}
	return c
}

func (f *Filter) keepsThread(th Thread, t *Table) bool {
	comm := t.Strings[th.Comm]
	switch {
	case len(f.PIDs) > 0 && !slices.Contains(f.PIDs, th.PID),
		len(f.TIDs) > 0 && !slices.Contains(f.TIDs, th.TID),
		f.Comm != "" && comm != f.Comm,
		f.CommRegex != nil && !f.CommRegex.MatchString(comm),
		len(f.Cgroups)+len(f.CgroupPaths) > 0 && !slices.Contains(f.Cgroups, th.Cgroup) &&
			!slices.Contains(f.CgroupPaths, cgroupPath(th, t)):
		return false
	}
	if len(f.Containers)+len(f.Pods)+len(f.Namespaces)+len(f.QoS) == 0 {
		return true
	}
	if th.Meta == 0 {
		return false
	}
	c := &t.Cgroups[th.Meta-1]
	s := func(id uint32) string { return t.Strings[id] }
	id, name := s(c.ContainerID), s(c.Container)
	pod, uid := s(c.Pod), s(c.PodUID)
	switch {
	case len(f.Containers) > 0 && !slices.ContainsFunc(f.Containers, func(v string) bool {
		return v == name || id != "" && strings.HasPrefix(id, v)
	}),
		len(f.Pods) > 0 && !slices.ContainsFunc(f.Pods, func(v string) bool { return v == pod || v == uid }),
		len(f.Namespaces) > 0 && !slices.Contains(f.Namespaces, s(c.Namespace)),
		len(f.QoS) > 0 && !slices.Contains(f.QoS, s(c.QoS)):
		return false
	}
	return true
}

// cgroupPath returns the path below the cgroup v2 mount that t keeps for
// th's cgroup, "" when it keeps none.
func cgroupPath(th Thread, t *Table) string {
	if th.Meta == 0 {
		return ""
	}
	return t.Strings[t.Cgroups[th.Meta-1].Path]
}

// CgroupPathsUnknown is a query's warning: a filter by cgroup path met
// samples whose cgroup's path their recorder did not keep (a block written
// before version 2, or by "record --containers=false"; an import without
// cgroup paths; a cgroup gone before the recorder read its path). Those
// samples are left out of the answer; a filter by cgroup id can still
// select them.
type CgroupPathsUnknown struct {
	// Node is the samples' node; Block names their block, "" for samples
	// not yet cut into one (a head).
	Node, Block string
	// Threads is how many of the table's Of threads have no cgroup path.
	Threads, Of int
}

func (e *CgroupPathsUnknown) Error() string {
	where := "the samples not yet in a block"
	if e.Block != "" {
		where = "block " + e.Block
	}
	return fmt.Sprintf("node %s, %s: %d of its %d threads have no recorded cgroup path (a block before version 2, record --containers=false, an import, or a cgroup gone before it was read): a cgroup path filter cannot select their samples, a cgroup id filter can",
		e.Node, where, e.Threads, e.Of)
}

// pathWarning is the warning for the threads whose cgroup path c could
// not judge, nil when there are none.
func (c *compiled) pathWarning(node, block string) error {
	if c.pathless == 0 {
		return nil
	}
	return &CgroupPathsUnknown{Node: node, Block: block, Threads: c.pathless, Of: len(c.threadOK)}
}

// keeps reports whether sample i of t passes.
func (c *compiled) keeps(t *Table, i int) bool {
	th, st := t.Thread[i], t.Stack[i]
	if !c.threadOK[th] || !c.stackOK[st] {
		return false
	}
	if !c.f.IncludeIdle && c.idleThread[th] && c.idleStack[st] {
		return false
	}
	if c.cpuOK != nil {
		cpu := t.CPU[i]
		if int(cpu) >= len(c.cpuOK) || !c.cpuOK[cpu] {
			return false
		}
	}
	return true
}
