package store

import (
	"cmp"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// FormatVersion is the version of the block format in FORMAT.md that
// this heatscope writes. It reads versions 1 to 5 too: version 2 only
// added the cgroups section, version 4 only the per-CPU summary (version
// 3, a development version, had a per-thread one there, which is not
// read), version 5 only the marks in a frame's kind byte of how it was
// found (older blocks' frames read as sample.MethodNotKnown), version 6
// only the Python frame kind and a frame's source lines.
const FormatVersion = 6

const (
	blockMagic   = "HSBLOCK1"
	trailerMagic = "HSBLKEND"
	trailerSize  = 24

	// chunkSamples bounds a chunk: a query decodes whole chunks, so a
	// 10 s window of 64 CPUs at 99 Hz (63k samples) costs one or two.
	chunkSamples = 1 << 16
	// summaryBucket is the width of the per-thread counts kept for
	// timelines (microseconds).
	summaryBucket = 10_000_000
)

// A block's two files in its directory, <data>/blocks/<id>/ (and, unchanged,
// in a bucket: package bucketlayout).
const (
	BlockDataFile = "data"
	BlockMetaFile = "meta.json"
)

// Section kinds, in the order they are written.
const (
	sectionStrings = iota + 1
	sectionFrames
	sectionStacks
	sectionThreads
	sectionChunks
	sectionSummary
	sectionCgroups
	sectionCPUSummary
	numSections = sectionCPUSummary
	// numSectionsV1 is the number of sections of a version 1 block (no
	// cgroups), numSectionsV2 of a version 2 block (no per-CPU summary).
	numSectionsV1 = sectionSummary
	numSectionsV2 = sectionCgroups
)

// sectionsOf is the number of sections a block of format version v has.
func sectionsOf(v int) int {
	switch v {
	case 1:
		return numSectionsV1
	case 2:
		return numSectionsV2
	}
	// Version 3 has the eight sections of version 4.
	return numSections
}

// Meta is a block's meta.json.
type Meta struct {
	Version int    `json:"version"`
	ID      string `json:"id"`
	// Source names where the samples came from: a host or an import.
	Source string `json:"source"`
	// Node is the machine whose data directory the block was written in
	// ("" in blocks written before nodes: readers take the node of the
	// directory, or of the bucket prefix, they find it in).
	Node string `json:"node,omitempty"`
	// Instance is the instance id of the data directory that recorded
	// the samples (Identity.Instance; "" in imports and in blocks written
	// before identities): two recorders sharing a node name are told
	// apart by it.
	Instance string `json:"instance,omitempty"`
	// NodeLabels describe the node (zone, cluster, instance type).
	NodeLabels map[string]string `json:"nodeLabels,omitempty"`
	// MinTime and MaxTime bound the samples' times (Unix ns, inclusive).
	MinTime int64 `json:"minTime"`
	MaxTime int64 `json:"maxTime"`
	Samples int   `json:"samples"`
	// Level is 1 for a block cut from the head or an import, and one more
	// than its highest parent for a compacted block.
	Level int `json:"level"`
	// Parents lists the blocks a compaction merged into this one: when
	// they are still on disk after a crash, they are deleted on open.
	Parents []string `json:"parents,omitempty"`
	// WALSegment is the highest WAL segment whose samples the block holds
	// (0 if none): replay skips those segments.
	WALSegment uint64 `json:"walSegment,omitempty"`
	// Created is when the block was written, and ImportedAt when its data
	// was imported (0 for recorded data): retention ages imports from it.
	Created    int64 `json:"created"`
	ImportedAt int64 `json:"importedAt,omitempty"`
	// Bytes is the size of the data file.
	Bytes int64 `json:"bytes"`
	// IndexBytes is the uncompressed size of the index sections (all but
	// the chunks and the chunk index): what a merge that takes the block
	// on holds of it (MaxMergedIndexBytes). 0 in blocks written before it
	// was recorded: IndexBytes reads it from their table of contents.
	IndexBytes int64 `json:"indexBytes,omitempty"`
	// PeriodNs is the sampling period, when known (0 otherwise).
	PeriodNs int64 `json:"periodNs,omitempty"`
	// Files lists the SHA-256s (hex) of the imported files the block
	// holds samples of.
	Files []string `json:"files,omitempty"`
	// Relative is true when the times are an import's own clock, not
	// wall time.
	Relative bool `json:"relative,omitempty"`
	// ClockShift is, for an import placed at wall time, what was added
	// to the capture's own clock (ns, a whole number of seconds): the
	// heatmap places each sample in its row on that clock, so that it is
	// FlameScope's of the file, cell for cell. Blocks of different shifts
	// do not merge.
	ClockShift int64 `json:"clockShift,omitempty"`
}

// chunkRef locates one chunk in the data file.
type chunkRef struct {
	minTime, maxTime int64 // µs
	count            int
	section
}

type section struct {
	offset           int64
	stored, raw, crc uint32
}

// summaryEntry is the samples of one thread (the per-thread summary) or
// one CPU (the per-CPU summary) in one bucket.
type summaryEntry struct {
	bucket      int64  // µs / summaryBucket
	key         uint32 // the thread's index, or the CPU
	count, idle uint32
}

func newBlockID(now time.Time) string {
	var r [4]byte
	rand.Read(r[:])
	return fmt.Sprintf("%013d-%s", now.UnixMilli(), hex.EncodeToString(r[:]))
}

// writeBlock writes t's samples as a block under dir and returns its meta.
// The block's tables are t's own, as they are (a Builder's: what its
// samples were interned into), and its samples keep their ids: interning
// them again through a new Builder doubled a head's tables in memory while
// it was written.
func writeBlock(dir string, meta Meta, t *Table) (Meta, error) {
	order := make([]int32, t.Len())
	for i := range order {
		order[i] = int32(i)
	}
	// Heads arrive almost in time order; pdqsort with the index as a tie
	// break is fast on that and deterministic.
	slices.SortFunc(order, func(a, b int32) int { return cmp.Or(cmp.Compare(t.Time[a], t.Time[b]), cmp.Compare(a, b)) })
	m := &remap{src: t} // the writer keeps t's ids: nothing to map
	return writeBlockFrom(dir, meta, t, func(w *blockWriter) error {
		for _, i := range order {
			if err := w.add(m, int(i)); err != nil {
				return err
			}
		}
		return nil
	})
}

// writeBlockFrom writes a block whose samples fill adds to a blockWriter in
// time order. The block's tables are tables, when given, and the samples
// added keep their ids in it; otherwise the writer builds them from the
// samples' own tables (a merge). The block is written into "<id>.tmp",
// synced, and renamed into place, so a crash leaves either the whole block
// or a .tmp directory that Open removes.
func writeBlockFrom(dir string, meta Meta, tables *Table, fill func(*blockWriter) error) (Meta, error) {
	now := time.Now()
	meta.Version = FormatVersion
	meta.ID = newBlockID(now)
	meta.Created = now.UnixMilli()
	if meta.Level == 0 {
		meta.Level = 1
	}
	tmp := filepath.Join(dir, meta.ID+".tmp")
	final := filepath.Join(dir, meta.ID)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return meta, fmt.Errorf("write block %s: %w", meta.ID, err)
	}
	err := func() error {
		w, err := newBlockWriter(filepath.Join(tmp, BlockDataFile), tables)
		if err != nil {
			return err
		}
		defer w.f.Close()
		if err := fill(w); err != nil {
			return err
		}
		if w.samples == 0 {
			return fmt.Errorf("no samples")
		}
		if err := w.finish(); err != nil {
			return err
		}
		meta.Bytes, meta.MinTime, meta.MaxTime, meta.Samples = w.d.off, w.minTime, w.maxTime, w.samples
		meta.IndexBytes = w.indexBytes
		b, _ := json.MarshalIndent(meta, "", "  ")
		if err := writeFileSync(filepath.Join(tmp, BlockMetaFile), b); err != nil {
			return err
		}
		if err := syncDir(tmp); err != nil {
			return err
		}
		if err := os.Rename(tmp, final); err != nil {
			return err
		}
		return syncDir(dir)
	}()
	if err != nil {
		os.RemoveAll(tmp)
		return meta, fmt.Errorf("write block %s: %w", meta.ID, err)
	}
	return meta, nil
}

func writeFileSync(path string, b []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// dataWriter appends sections to a data file.
type dataWriter struct {
	w   io.Writer
	off int64
	err error
}

func (d *dataWriter) write(b []byte) {
	if d.err != nil {
		return
	}
	n, err := d.w.Write(b)
	d.off += int64(n)
	d.err = err
}

func (d *dataWriter) section(raw []byte) section {
	stored := compress(raw)
	s := section{offset: d.off, stored: uint32(len(stored)), raw: uint32(len(raw)), crc: crc32.Checksum(stored, castagnoli)}
	d.write(stored)
	return s
}

// blockWriter streams samples, in time order, into a block's data file:
// chunks are written as they fill, and the tables, which grow as samples
// arrive, are written after them. Memory holds the tables and one chunk.
type blockWriter struct {
	f        *os.File
	d        *dataWriter
	tables   *Builder // builds the block's tables from the samples' (a merge)
	given    *Table   // or the block's tables, given whole (a head, an import)
	chunk    Table    // sample columns of the chunk being filled
	rows     []int32
	buf      []byte
	chunks   []chunkRef
	summary  bucketCounts // per thread
	perCPU   bucketCounts
	idle     lazyIdle
	samples  int
	minTime  int64
	maxTime  int64
	lastTime int64
	// indexBytes is the written index sections' size (Meta.IndexBytes).
	indexBytes int64
}

// bucketCounts counts samples per key (a thread, or a CPU) in the summary's
// 10 s buckets. Samples come in time order, so a bucket is complete once a
// later one starts: its entries are then sorted by key and appended to the
// finished ones, and only the current bucket's keys are in a map. A merge
// of many blocks under churn (a thread per process) so holds 24 bytes per
// entry, not a map entry and a pointer each.
type bucketCounts struct {
	done    []summaryEntry // in bucket, then key order
	current []summaryEntry // the current bucket's, in the order first seen
	index   map[uint32]int // key -> index in current
}

func (c *bucketCounts) add(bucket int64, key uint32, idle bool) {
	if len(c.current) > 0 && c.current[0].bucket != bucket {
		c.flush()
	}
	i, ok := c.index[key]
	if !ok {
		if c.index == nil {
			c.index = map[uint32]int{}
		}
		i = len(c.current)
		c.current = append(c.current, summaryEntry{bucket: bucket, key: key})
		c.index[key] = i
	}
	e := &c.current[i]
	e.count++
	if idle {
		e.idle++
	}
}

// flush moves the current bucket's entries, sorted, to the finished ones.
func (c *bucketCounts) flush() {
	slices.SortFunc(c.current, func(a, b summaryEntry) int { return cmp.Compare(a.key, b.key) })
	c.done = append(c.done, c.current...)
	c.current = c.current[:0]
	clear(c.index)
}

// entries returns every entry, in bucket, then key order.
func (c *bucketCounts) entries() []summaryEntry {
	c.flush()
	return c.done
}

// newBlockWriter creates a block's data file at path. The block's tables
// are tables when given (see writeBlockFrom), else built as samples come.
func newBlockWriter(path string, tables *Table) (*blockWriter, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	w := &blockWriter{f: f, d: &dataWriter{w: f}, given: tables}
	if tables == nil {
		w.tables = NewBuilder()
		tables = &w.tables.T
	}
	w.idle.t = tables
	w.d.write([]byte(blockMagic))
	return w, nil
}

// add appends sample i of m's table. Samples must come in time order.
func (w *blockWriter) add(m *remap, i int) error {
	t := m.src
	time := t.Time[i]
	if w.samples > 0 && time < w.lastTime {
		return fmt.Errorf("samples out of time order: %d after %d", time, w.lastTime)
	}
	if w.samples == 0 {
		w.minTime = time
	}
	w.lastTime, w.maxTime = time, time
	w.samples++
	thread, stack := t.Thread[i], t.Stack[i]
	if w.given == nil {
		thread, stack = w.tables.mapThread(m, thread), w.tables.mapStack(m, stack)
	}
	w.chunk.Time = append(w.chunk.Time, time)
	w.chunk.CPU = append(w.chunk.CPU, t.CPU[i])
	w.chunk.Thread = append(w.chunk.Thread, thread)
	w.chunk.Stack = append(w.chunk.Stack, stack)

	bucket := floorDiv(micros(time), summaryBucket)
	idle := w.idle.isIdle(thread, stack)
	w.summary.add(bucket, thread, idle)
	w.perCPU.add(bucket, t.CPU[i], idle)
	if len(w.chunk.Time) == chunkSamples {
		w.flushChunk()
	}
	return w.d.err
}

// flushChunk encodes the pending samples, grouped by CPU, as one chunk.
func (w *blockWriter) flushChunk() {
	c := &w.chunk
	if c.Len() == 0 {
		return
	}
	ref := chunkRef{minTime: micros(c.Time[0]), maxTime: micros(c.Time[c.Len()-1]), count: c.Len()}
	rows := groupByCPU(w.rows[:0], c.CPU)
	w.rows = rows
	w.buf = encodeChunk(w.buf[:0], c, rows, ref.minTime)
	ref.section = w.d.section(w.buf)
	w.chunks = append(w.chunks, ref)
	c.Time, c.CPU, c.Thread, c.Stack = c.Time[:0], c.CPU[:0], c.Thread[:0], c.Stack[:0]
}

// groupByCPU returns the row indices of cpus grouped by CPU, ascending,
// each group in row order: a counting sort, since CPUs are few.
func groupByCPU(rows []int32, cpus []uint32) []int32 {
	var counts map[uint32]int32 = map[uint32]int32{}
	for _, c := range cpus {
		counts[c]++
	}
	keys := make([]uint32, 0, len(counts))
	for c := range counts {
		keys = append(keys, c)
	}
	slices.Sort(keys)
	next := make(map[uint32]int32, len(keys))
	pos := int32(0)
	for _, c := range keys {
		next[c] = pos
		pos += counts[c]
	}
	rows = slices.Grow(rows[:0], len(cpus))[:len(cpus)]
	for i, c := range cpus {
		rows[next[c]] = int32(i)
		next[c]++
	}
	return rows
}

// finish writes the last chunk, the tables, the table of contents and the
// trailer, and syncs the file.
func (w *blockWriter) finish() error {
	w.flushChunk()
	// Only the tables are left to write: the collector may take the
	// interning maps, as large as the tables, while they are encoded.
	t := w.given
	if t == nil {
		tables := w.tables.T
		t = &tables
	}
	w.tables, w.idle = nil, lazyIdle{}
	var sections [numSections + 1]section
	sections[sectionStrings] = w.d.section(encodeStrings(t))
	sections[sectionFrames] = w.d.section(encodeFrames(t))
	sections[sectionStacks] = w.d.section(encodeStacks(t))
	sections[sectionThreads] = w.d.section(encodeThreads(t))
	sections[sectionChunks] = w.d.section(encodeChunkIndex(w.chunks))
	sections[sectionSummary] = w.d.section(encodeSummary(w.summary.entries()))
	sections[sectionCgroups] = w.d.section(encodeCgroups(t))
	sections[sectionCPUSummary] = w.d.section(encodeSummary(w.perCPU.entries()))
	w.indexBytes = indexBytesOf(sections)

	toc := make([]byte, 0, numSections*21)
	for kind := 1; kind <= numSections; kind++ {
		s := sections[kind]
		toc = append(toc, byte(kind))
		toc = binary.LittleEndian.AppendUint64(toc, uint64(s.offset))
		toc = binary.LittleEndian.AppendUint32(toc, s.stored)
		toc = binary.LittleEndian.AppendUint32(toc, s.raw)
		toc = binary.LittleEndian.AppendUint32(toc, s.crc)
	}
	tocOffset := w.d.off
	w.d.write(toc)
	trailer := binary.LittleEndian.AppendUint64(nil, uint64(tocOffset))
	trailer = binary.LittleEndian.AppendUint32(trailer, uint32(len(toc)))
	trailer = binary.LittleEndian.AppendUint32(trailer, crc32.Checksum(toc, castagnoli))
	w.d.write(append(trailer, trailerMagic...))
	if w.d.err != nil {
		return w.d.err
	}
	if err := w.f.Sync(); err != nil {
		return err
	}
	return w.f.Close()
}

// micros converts Unix ns to the µs the format stores.
func micros(ns int64) int64 {
	if ns < 0 {
		return (ns - 999) / 1000
	}
	return ns / 1000
}

func encodeChunk(buf []byte, t *Table, rows []int32, minTime int64) []byte {
	var groups [][]int32
	for lo := 0; lo < len(rows); {
		hi := lo + 1
		for hi < len(rows) && t.CPU[rows[hi]] == t.CPU[rows[lo]] {
			hi++
		}
		groups = append(groups, rows[lo:hi])
		lo = hi
	}
	buf = binary.AppendUvarint(buf, uint64(len(groups)))
	for _, g := range groups {
		buf = binary.AppendUvarint(buf, uint64(t.CPU[g[0]]))
		buf = binary.AppendUvarint(buf, uint64(len(g)))
		prev, prevDelta := minTime, int64(0)
		for _, r := range g {
			us := micros(t.Time[r])
			delta := us - prev
			buf = binary.AppendVarint(buf, delta-prevDelta)
			prev, prevDelta = us, delta
		}
		for _, r := range g {
			buf = binary.AppendUvarint(buf, uint64(t.Thread[r]))
		}
		for _, r := range g {
			buf = binary.AppendUvarint(buf, uint64(t.Stack[r]))
		}
	}
	return buf
}

func encodeStrings(t *Table) []byte {
	b := binary.AppendUvarint(nil, uint64(len(t.Strings)))
	for _, s := range t.Strings {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

func encodeFrames(t *Table) []byte {
	b := binary.AppendUvarint(nil, uint64(len(t.Frames)))
	for _, f := range t.Frames {
		b = binary.AppendUvarint(b, uint64(f.Function))
		b = binary.AppendUvarint(b, uint64(f.Module))
		b = binary.AppendUvarint(b, uint64(f.BuildID))
		b = appendFrameTail(b, &f)
	}
	return b
}

func encodeStacks(t *Table) []byte {
	b := binary.AppendUvarint(nil, uint64(t.NumStacks()))
	for i := range t.NumStacks() {
		ids := t.StackOf(uint32(i))
		b = binary.AppendUvarint(b, uint64(len(ids)))
		for _, id := range ids {
			b = binary.AppendUvarint(b, uint64(id))
		}
	}
	return b
}

func encodeThreads(t *Table) []byte {
	b := binary.AppendUvarint(nil, uint64(len(t.Threads)))
	for _, th := range t.Threads {
		b = binary.AppendUvarint(b, uint64(th.PID))
		b = binary.AppendUvarint(b, uint64(th.TID))
		b = binary.AppendUvarint(b, uint64(th.Comm))
		b = binary.AppendUvarint(b, th.Cgroup)
	}
	return b
}

func encodeCgroups(t *Table) []byte {
	b := binary.AppendUvarint(nil, uint64(len(t.Cgroups)))
	for _, c := range t.Cgroups {
		b = binary.AppendUvarint(b, c.ID)
		for _, s := range []uint32{c.Path, c.ContainerID, c.Runtime, c.PodUID, c.QoS, c.Namespace, c.Pod, c.Container} {
			b = binary.AppendUvarint(b, uint64(s))
		}
	}
	return b
}

func encodeChunkIndex(chunks []chunkRef) []byte {
	b := binary.AppendUvarint(nil, uint64(len(chunks)))
	for _, c := range chunks {
		b = binary.AppendVarint(b, c.minTime)
		b = binary.AppendUvarint(b, uint64(c.maxTime-c.minTime))
		b = binary.AppendUvarint(b, uint64(c.count))
		b = binary.AppendUvarint(b, uint64(c.offset))
		b = binary.AppendUvarint(b, uint64(c.stored))
		b = binary.AppendUvarint(b, uint64(c.raw))
		b = binary.AppendUvarint(b, uint64(c.crc))
	}
	return b
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// encodeSummary encodes a summary's entries, sorted.
func encodeSummary(entries []summaryEntry) []byte {
	b := binary.AppendUvarint(nil, uint64(len(entries)))
	prev := int64(0)
	for _, e := range entries {
		b = binary.AppendVarint(b, e.bucket-prev)
		prev = e.bucket
		b = binary.AppendUvarint(b, uint64(e.key))
		b = binary.AppendUvarint(b, uint64(e.count))
		b = binary.AppendUvarint(b, uint64(e.idle))
	}
	return b
}
