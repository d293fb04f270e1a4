package store

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/heatscope/heatscope/sample"
)

// SourceInfo describes one source of samples in the store.
type SourceInfo struct {
	Name string `json:"name"`
	// First and Last are the times of the source's first and last samples
	// (Unix ns); Samples counts them.
	First   int64 `json:"first"`
	Last    int64 `json:"last"`
	Samples int   `json:"samples"`
	// Imported is true for data brought in by heatscope import.
	Imported bool `json:"imported"`
	// PeriodNs is the sampling period, when known.
	PeriodNs int64 `json:"periodNs,omitempty"`
	// Relative is true for an import whose times are not wall-clock
	// times but the capture's own clock (seconds since its machine
	// booted): show them relative to First.
	Relative bool `json:"relative,omitempty"`
}

// Sources lists the sources in the store, by name.
func (rd *Reader) Sources() []SourceInfo { return rd.SourcesOf(&Filter{}) }

// SourcesOf lists, by name, the sources of the nodes f keeps (its node,
// node regexp and label filters; the rest of f is not looked at), each
// with those nodes' samples only: two nodes whose recordings share a
// source name (their hostname) are one source of both in Sources, and of
// one node each here.
func (rd *Reader) SourcesOf(f *Filter) []SourceInfo {
	rd.mu.RLock()
	defer rd.mu.RUnlock()
	bySource := map[string]*SourceInfo{}
	add := func(name string, first, last int64, n int, imported bool, period int64) *SourceInfo {
		s, ok := bySource[name]
		if !ok {
			s = &SourceInfo{Name: name, First: first, Last: last, Imported: imported}
			bySource[name] = s
		}
		s.First, s.Last, s.Samples = min(s.First, first), max(s.Last, last), s.Samples+n
		s.PeriodNs = max(s.PeriodNs, period)
		return s
	}
	for _, b := range rd.blocks {
		if !f.KeepsNode(b.Meta.Node, b.Meta.NodeLabels) {
			continue
		}
		s := add(b.Meta.Source, b.Meta.MinTime, b.Meta.MaxTime, b.Meta.Samples, b.Meta.ImportedAt > 0, b.Meta.PeriodNs)
		s.Relative = s.Relative || b.Meta.Relative
	}
	if f.KeepsNode(rd.opts.Node, rd.opts.NodeLabels) {
		rd.headSpans(func(first, last int64, n int) {
			add(rd.opts.Source, first, last, n, false, rd.opts.PeriodNs)
		})
	}
	out := make([]SourceInfo, 0, len(bySource))
	for _, s := range bySource {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b SourceInfo) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// importBlockSamples is how many samples an import gathers per block.
const importBlockSamples = 4_000_000

// ImportStats reports what an import stored.
type ImportStats struct {
	Samples int
	Blocks  int
	First   int64
	Last    int64
}

// ImportOptions describes imported data.
type ImportOptions struct {
	// PeriodNs is the sampling period of the imported data, 0 when
	// unknown.
	PeriodNs int64
	// File identifies the imported file (its SHA-256, in hex), kept in
	// the blocks' meta: the same file is not imported into a source twice.
	File string
	// Replace drops what the source held once the import has succeeded;
	// without it, a File the source already holds is refused
	// (ErrAlreadyImported).
	Replace bool
	// Relative marks times that are the capture's own clock, not wall
	// time (SourceInfo.Relative).
	Relative bool
	// ClockShift is what was added to the capture's own clock to place
	// it at wall time (Meta.ClockShift).
	ClockShift int64
}

// ErrAlreadyImported is returned (wrapped) by ImportWith when the source
// already holds the file.
var ErrAlreadyImported = errors.New("already imported")

// Import stores the samples read calls fn with as source, in blocks
// written directly (imports bypass the head and WAL). It is all or nothing:
// when read or a write fails, the blocks already written are removed.
//
// periodNs is the sampling period of the imported data, 0 when unknown.
func (db *DB) Import(source string, periodNs int64, read func(fn func(*sample.Sample) error) error) (st ImportStats, err error) {
	return db.ImportWith(source, ImportOptions{PeriodNs: periodNs}, read)
}

// ImportWith is Import with options: the file's identity, which a source
// holds once, and whether the samples replace the source's.
func (db *DB) ImportWith(source string, opts ImportOptions, read func(fn func(*sample.Sample) error) error) (st ImportStats, err error) {
	if db.opts.ReadOnly {
		return st, errors.New("import: data directory opened read-only")
	}
	if source == "" {
		return st, errors.New("import: empty source name")
	}
	var replaced []string
	db.mu.RLock()
	for _, b := range db.blocks {
		if b.Meta.Source != source {
			continue
		}
		replaced = append(replaced, b.Meta.ID)
		if opts.File != "" && !opts.Replace && slices.Contains(b.Meta.Files, opts.File) {
			db.mu.RUnlock()
			return st, fmt.Errorf("import %s: %w: source %q already holds this file (SHA-256 %s, imported %s): "+
				"import it as another source, or give --replace to replace the source's samples", source, ErrAlreadyImported,
				source, opts.File[:min(12, len(opts.File))], time.UnixMilli(b.Meta.ImportedAt).UTC().Format(time.RFC3339))
		}
	}
	db.mu.RUnlock()
	var files []string
	if opts.File != "" {
		files = []string{opts.File}
	}
	periodNs := opts.PeriodNs
	importedAt := time.Now().UnixMilli()
	var written []string
	defer func() {
		if err != nil {
			db.removeBlocks(written)
			st = ImportStats{}
		}
	}()
	b := NewBuilder()
	flush := func() error {
		if b.T.Len() == 0 {
			return nil
		}
		t := &b.T
		first, last := slices.Min(t.Time), slices.Max(t.Time)
		db.writeMu.Lock()
		meta, err := writeBlock(filepath.Join(db.dir, blocksDir), Meta{Source: source, Node: db.opts.Node, NodeLabels: db.opts.NodeLabels,
			ImportedAt: importedAt, PeriodNs: periodNs, Files: files, Relative: opts.Relative, ClockShift: opts.ClockShift}, t)
		if err == nil {
			written = append(written, meta.ID)
			err = db.addBlock(meta, nil, nil)
		}
		db.writeMu.Unlock()
		if err != nil {
			return err
		}
		if st.Blocks == 0 {
			st.First, st.Last = first, last
		}
		st.First, st.Last = min(st.First, first), max(st.Last, last)
		st.Blocks++
		b = NewBuilder()
		return nil
	}
	err = read(func(s *sample.Sample) error {
		b.Append(s)
		st.Samples++
		if b.T.Len() >= importBlockSamples {
			return flush()
		}
		return nil
	})
	if err != nil {
		return st, fmt.Errorf("import %s: %w", source, err)
	}
	if err := flush(); err != nil {
		return st, fmt.Errorf("import %s: %w", source, err)
	}
	if opts.Replace && len(replaced) > 0 {
		db.writeMu.Lock() // not while a compaction merges them
		db.removeBlocks(replaced)
		db.writeMu.Unlock()
	}
	return st, nil
}

// removeBlocks deletes the blocks with these ids.
func (db *DB) removeBlocks(ids []string) {
	db.mu.Lock()
	var doomed []*Block
	db.blocks = slices.DeleteFunc(db.blocks, func(b *Block) bool {
		if slices.Contains(ids, b.Meta.ID) {
			doomed = append(doomed, b)
			return true
		}
		return false
	})
	db.mu.Unlock()
	for _, b := range doomed {
		db.retire(b)
		os.RemoveAll(b.Dir)
	}
	for _, id := range ids { // written but never added
		os.RemoveAll(filepath.Join(db.dir, blocksDir, id))
	}
}

// NodeInfo describes one node whose samples the store holds.
type NodeInfo struct {
	Name string `json:"name"`
	// Labels are the node's labels, from its newest block.
	Labels map[string]string `json:"labels"`
	// Sources are the sources of its samples, by name.
	Sources []string `json:"sources"`
	// Blocks counts its sealed blocks; First and Last are the times of
	// its first and last samples (Unix ns), Samples counts them (heads
	// included).
	Blocks  int   `json:"blocks"`
	First   int64 `json:"first"`
	Last    int64 `json:"last"`
	Samples int   `json:"samples"`
}

// Nodes lists the nodes whose samples the store holds, by name.
func (rd *Reader) Nodes() []NodeInfo {
	rd.mu.RLock()
	defer rd.mu.RUnlock()
	byNode := map[string]*NodeInfo{}
	newest := map[string]int64{}
	add := func(name, source string, labels map[string]string, first, last int64, n int) *NodeInfo {
		ni, ok := byNode[name]
		if !ok {
			ni = &NodeInfo{Name: name, First: first, Last: last}
			byNode[name] = ni
		}
		if i, found := slices.BinarySearch(ni.Sources, source); !found {
			ni.Sources = slices.Insert(ni.Sources, i, source)
		}
		if last >= newest[name] || !ok {
			ni.Labels, newest[name] = labels, last
		}
		ni.First, ni.Last, ni.Samples = min(ni.First, first), max(ni.Last, last), ni.Samples+n
		return ni
	}
	for _, b := range rd.blocks {
		add(b.Meta.Node, b.Meta.Source, b.Meta.NodeLabels, b.Meta.MinTime, b.Meta.MaxTime, b.Meta.Samples).Blocks++
	}
	rd.headSpans(func(first, last int64, n int) {
		add(rd.opts.Node, rd.opts.Source, rd.opts.NodeLabels, first, last, n)
	})
	out := make([]NodeInfo, 0, len(byNode))
	for _, ni := range byNode {
		if ni.Labels == nil {
			ni.Labels = map[string]string{}
		}
		out = append(out, *ni)
	}
	slices.SortFunc(out, func(a, b NodeInfo) int { return cmp.Compare(a.Name, b.Name) })
	return out
}
