package store

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// instanceSep joins a node name and an instance id into the name a node's
// second recorder is shown as ("a@3f9c21d0"): '@' is never in a node name
// (FORMAT.md), so the shown name cannot be another node's.
const instanceSep = "@"

// InstanceNodeName is the node name the blocks of instance are shown
// under when they overlap in time with another instance's blocks of node
// (two recorders given one node name): node@<the instance id's first 8
// hex digits>, "unknown" for blocks written before instance ids.
func InstanceNodeName(node, instance string) string {
	short := instance
	if len(short) > 8 {
		short = short[:8]
	}
	if short == "" {
		short = "unknown"
	}
	return node + instanceSep + short
}

// InstanceNotice says that two or more recorders (instances) recorded one
// node name over the same time, and how the store shows them: the
// instance that recorded the node first keeps its name, each other one
// that overlaps another is shown as InstanceNodeName. Their samples are
// never added together (one CPU would count twice). It is an error so
// that it travels with a query's Warnings.
type InstanceNotice struct {
	Node string
	// Shown maps each instance of the node ("" for blocks without one) to
	// the node name its blocks are shown under.
	Shown map[string]string
	// From and To bound the time where instances overlap (Unix ns).
	From, To int64
}

func (n *InstanceNotice) Error() string {
	insts := make([]string, 0, len(n.Shown))
	for inst := range n.Shown {
		insts = append(insts, inst)
	}
	slices.SortFunc(insts, func(a, b string) int { return cmp.Compare(n.Shown[a], n.Shown[b]) })
	parts := make([]string, len(insts))
	for i, inst := range insts {
		name := inst
		if name == "" {
			name = "(none recorded)"
		}
		parts[i] = fmt.Sprintf("instance %s as node %s", name, n.Shown[inst])
	}
	return fmt.Sprintf("node %s was recorded by %d recorders at once from %s to %s (one node name given to two machines or data directories); "+
		"shown apart, never added together: %s", n.Node, len(insts),
		time.Unix(0, n.From).UTC().Format(time.RFC3339), time.Unix(0, n.To).UTC().Format(time.RFC3339), strings.Join(parts, ", "))
}

// InstanceNotices returns a notice for each node that two recorders
// recorded over the same time (see InstanceNotice), by node name: the
// nodes whose blocks overlap, then those whose events alone do.
func (rd *Reader) InstanceNotices() Warnings {
	rd.mu.RLock()
	defer rd.mu.RUnlock()
	out := make(Warnings, 0, len(rd.notices)+len(rd.eventNotices))
	for _, n := range rd.notices {
		out = append(out, n)
	}
	for _, n := range rd.eventNotices {
		out = append(out, n)
	}
	return out
}

// recorded is the node the block's samples were recorded as.
func (b *Block) recorded() string { return cmp.Or(b.recordedNode, b.Meta.Node) }

// separateInstancesLocked gives every block the node name it is shown
// under: its own, unless its instance overlaps in time another instance
// of the same node and is not the node's first (InstanceNodeName). A
// block whose shown name changes is replaced by a new Block (its cached
// data goes with the old one, which the caller retires). db.mu is held
// for writing.
func (rd *Reader) separateInstancesLocked() (retired []*Block) {
	type instance struct {
		id     string
		blocks []*Block
		first  int64
		spans  [][2]int64 // merged [min, max] of its blocks, by time
	}
	byNode := map[string]map[string]*instance{}
	for _, b := range rd.blocks {
		node := b.recorded()
		if byNode[node] == nil {
			byNode[node] = map[string]*instance{}
		}
		in := byNode[node][b.Meta.Instance]
		if in == nil {
			in = &instance{id: b.Meta.Instance, first: b.Meta.MinTime}
			byNode[node][b.Meta.Instance] = in
		}
		in.blocks = append(in.blocks, b)
		in.first = min(in.first, b.Meta.MinTime)
	}
	rd.notices = rd.notices[:0]
	var at map[*Block]int // rd.blocks' indexes, built at the first replacement
	nodes := make([]string, 0, len(byNode))
	for node := range byNode {
		nodes = append(nodes, node)
	}
	slices.Sort(nodes)
	for _, node := range nodes {
		insts := byNode[node]
		shown := map[string]string{}
		if len(insts) > 1 {
			list := make([]*instance, 0, len(insts))
			for _, in := range insts {
				in.spans = mergedSpans(in.blocks)
				list = append(list, in)
			}
			// The node's first recorder keeps its name.
			slices.SortFunc(list, func(a, b *instance) int { return cmp.Or(cmp.Compare(a.first, b.first), cmp.Compare(a.id, b.id)) })
			from, to, any := int64(0), int64(0), false
			overlaps := map[string]bool{}
			for i, a := range list {
				for _, b := range list[i+1:] {
					if lo, hi, ok := overlap(a.spans, b.spans); ok {
						overlaps[a.id], overlaps[b.id] = true, true
						if !any {
							from, to = lo, hi
						}
						from, to, any = min(from, lo), max(to, hi), true
					}
				}
			}
			if any {
				for i, in := range list {
					if overlaps[in.id] {
						shown[in.id] = node
						if i > 0 {
							shown[in.id] = InstanceNodeName(node, in.id)
						}
					}
				}
				rd.notices = append(rd.notices, &InstanceNotice{Node: node, Shown: shown, From: from, To: to})
			}
		}
		for _, in := range insts {
			want := node
			if s, ok := shown[in.id]; ok {
				want = s
			}
			for _, b := range in.blocks {
				if b.Meta.Node == want {
					continue
				}
				m := b.Meta
				m.Node = want
				if b.recordedSource != "" {
					m.Source = b.recordedSource
				}
				src := m.Source
				if want != node && m.ImportedAt == 0 {
					// Its recording is a source of its own too: a source
					// view never adds the two instances either.
					m.Source = InstanceNodeName(src, in.id)
				}
				nb := newBlock(b.src, b.key, m)
				nb.Dir, nb.recordedNode = b.Dir, node
				if m.Source != src {
					nb.recordedSource = src
				}
				if at == nil {
					at = make(map[*Block]int, len(rd.blocks))
					for i, x := range rd.blocks {
						at[x] = i
					}
				}
				rd.blocks[at[b]] = nb
				retired = append(retired, b)
			}
		}
	}
	return retired
}

// mergedSpans returns the time spans blocks cover, merged where they
// touch, in time order.
func mergedSpans(blocks []*Block) [][2]int64 {
	spans := make([][2]int64, len(blocks))
	for i, b := range blocks {
		spans[i] = [2]int64{b.Meta.MinTime, b.Meta.MaxTime}
	}
	slices.SortFunc(spans, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	out := spans[:0]
	for _, s := range spans {
		if n := len(out); n > 0 && s[0] <= out[n-1][1] {
			out[n-1][1] = max(out[n-1][1], s[1])
			continue
		}
		out = append(out, s)
	}
	return out
}

// overlap returns the first and last time two sets of merged spans
// share, if any.
func overlap(a, b [][2]int64) (from, to int64, ok bool) {
	for i, j := 0, 0; i < len(a) && j < len(b); {
		lo, hi := max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
		if lo <= hi {
			if !ok {
				from = lo
			}
			to, ok = hi, true
		}
		if a[i][1] < b[j][1] {
			i++
		} else {
			j++
		}
	}
	return from, to, ok
}
