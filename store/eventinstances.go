package store

import (
	"cmp"
	"slices"

	"github.com/heatscope/heatscope/events"
)

// separateEventInstances gives each source event the node name its
// recorder (its InstanceLabel, "" for events shipped before instances
// named their objects) is shown under, as separateInstancesLocked does
// for blocks: two data directories that shipped events under one node
// name at the same time are never shown as one node's. Where the node's
// blocks were shown apart (blockNotices), an instance's events follow its
// blocks. Otherwise, where two instances' events overlap in time (from
// each one's first event to its last), the instance whose events begin
// first keeps the node's name, and each other one that overlaps another
// is shown as InstanceNodeName, with a notice returned for the node. A
// reinstalled machine's new data directory, whose events all come after
// the old one's, keeps the node's name. evs is in time order; an event
// renamed gets a labels map of its own (the source's are shared).
func separateEventInstances(evs []events.Event, blockNotices []*InstanceNotice) []*InstanceNotice {
	type span struct {
		id          string
		first, last int64
	}
	byNode := map[string]map[string]*span{}
	for i := range evs {
		node, ok := evs[i].Labels[NodeLabel]
		if !ok {
			continue
		}
		inst := evs[i].Labels[InstanceLabel]
		if byNode[node] == nil {
			byNode[node] = map[string]*span{}
		}
		sp := byNode[node][inst]
		if sp == nil {
			sp = &span{id: inst, first: evs[i].Time}
			byNode[node][inst] = sp
		}
		sp.last = evs[i].Time
	}
	byBlocks := map[string]map[string]string{}
	for _, n := range blockNotices {
		byBlocks[n.Node] = n.Shown
	}
	var notices []*InstanceNotice
	shownAs := map[string]map[string]string{} // node -> instance -> shown name, where it is not the node
	for node, insts := range byNode {
		if len(insts) < 2 {
			continue
		}
		shown := byBlocks[node]
		if shown == nil {
			list := make([]*span, 0, len(insts))
			for _, sp := range insts {
				list = append(list, sp)
			}
			slices.SortFunc(list, func(a, b *span) int { return cmp.Or(cmp.Compare(a.first, b.first), cmp.Compare(a.id, b.id)) })
			notice := &InstanceNotice{Node: node, Shown: map[string]string{}}
			for i, a := range list {
				for _, b := range list[i+1:] {
					lo, hi := max(a.first, b.first), min(a.last, b.last)
					if lo > hi {
						continue
					}
					if len(notice.Shown) == 0 {
						notice.From, notice.To = lo, hi
					}
					notice.From, notice.To = min(notice.From, lo), max(notice.To, hi)
					for _, sp := range []*span{a, b} {
						notice.Shown[sp.id] = node
						if sp != list[0] {
							notice.Shown[sp.id] = InstanceNodeName(node, sp.id)
						}
					}
				}
			}
			if len(notice.Shown) == 0 {
				continue
			}
			notices = append(notices, notice)
			shown = notice.Shown
		}
		for inst, name := range shown {
			if name != node {
				if shownAs[node] == nil {
					shownAs[node] = map[string]string{}
				}
				shownAs[node][inst] = name
			}
		}
	}
	for i := range evs {
		node := evs[i].Labels[NodeLabel]
		name, ok := shownAs[node][evs[i].Labels[InstanceLabel]]
		if !ok {
			continue
		}
		labels := make(map[string]string, len(evs[i].Labels))
		for k, v := range evs[i].Labels {
			labels[k] = v
		}
		labels[NodeLabel] = name
		evs[i].Labels = labels
	}
	slices.SortFunc(notices, func(a, b *InstanceNotice) int { return cmp.Compare(a.Node, b.Node) })
	return notices
}
