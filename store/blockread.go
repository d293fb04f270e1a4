package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Block is an open, immutable block from a BlockSource. Only its meta and
// chunk index stay in memory; its index (tables, summary: blockIndex) is
// read when a query first needs it and kept in the DB's bounded index
// cache, and its chunks are read when a query needs them. A block of the
// local directory reads its table of contents and chunk index when it is
// opened; a block of another source (a bucket) when a query first needs it.
type Block struct {
	// Dir is the block's directory when it is in the DB's own data
	// directory, "" otherwise.
	Dir  string
	Meta Meta

	src BlockSource
	key string
	// recordedNode is the node the samples were recorded as when Meta.Node
	// shows them under another name (an instance shown apart:
	// instances.go); "" otherwise.
	recordedNode string
	// recordedSource is, likewise, the source of a recording shown apart.
	recordedSource string

	// opened is set once data, tocOffset, sections and chunks are read
	// (under loading); they never change after.
	opened atomic.Bool
	data   BlockData
	// openErr, guarded by loading, is why the block's header could not be
	// read, kept unless the storage was unavailable.
	openErr   error
	tocOffset int64
	// sections locates the index sections (strings to the per-CPU
	// summary); a section an older block lacks is zero.
	sections [numSections + 1]section
	chunks   []chunkRef
	// loading serialises reads of the header and the index, so that
	// queries that need them at once read them once; indexErr, guarded by
	// it, is why the index could not be read, kept since the block never
	// changes (unless the storage was unavailable).
	loading  sync.Mutex
	indexErr error

	// totals is the block's summary summed over threads, kept once a
	// timeline read it: small (16 bytes a 10 s bucket), it answers the
	// overview of everything retained without the blocks' indexes.
	totals atomic.Pointer[[]bucketTotal]

	// refs counts the DB's reference plus one for every query part that
	// will read a chunk; the data is closed with the last, so a block
	// compacted away or expired while a query runs is still read whole.
	refs atomic.Int32
	// retired is set when the block leaves the DB, before its cached
	// index and chunks are dropped, so that a query finishing late does
	// not cache them again.
	retired atomic.Bool
}

// Retired reports whether the block has left its Reader (compacted away,
// expired, gone from its source): what a cache of its reads drops.
func (b *Block) Retired() bool { return b.retired.Load() }

// String names the block in warnings: its key in its source.
func (b *Block) String() string {
	if b.Dir != "" {
		return b.Meta.ID
	}
	return b.key
}

// bucketTotal is the samples of one summary bucket, all threads together,
// and how many of them were idle.
type bucketTotal struct {
	bucket      int64 // µs / summaryBucket
	count, idle uint32
}

// sumBuckets sums a summary (in bucket order) over threads.
func sumBuckets(sum summary) []bucketTotal {
	var out []bucketTotal
	for _, e := range sum.cells {
		b := sum.base + int64(e.bucket)
		if n := len(out); n > 0 && out[n-1].bucket == b {
			out[n-1].count += e.count
			out[n-1].idle += e.idle
			continue
		}
		out = append(out, bucketTotal{b, e.count, e.idle})
	}
	return slices.Clip(out)
}

// blockIndex is what queries need of a block besides its chunks: the
// string, frame, stack, thread and cgroup tables, the per-thread 10 s
// summary and the idle masks.
//
// Why not kept for the block's life: the tables grow with the distinct
// threads a block saw, so under process churn (every process a thread of
// its own) a 12 h block's index is hundreds of MB, and with a week
// retained every block's index in memory was neither bounded nor cheap to
// read at start. Now memory is bounded by the cache, and a start opens
// only the small chunk indexes.
type blockIndex struct {
	tables  *Table
	summary summary
	idle    idleMasks
	bytes   int64 // approximate memory held
}

// idleMasks marks idle stacks and idle threads of a table.
type idleMasks struct{ stacks, threads []bool }

// openBlock opens the block in the data directory dir, checking its meta,
// trailer, table of contents, and the CRC of every section it reads.
func openBlock(dir string) (*Block, error) {
	src := dirSource{root: filepath.Dir(dir)}
	key := filepath.Base(dir)
	m, err := src.Meta(context.Background(), key)
	if err != nil {
		return nil, fmt.Errorf("open block %s: %w", dir, err)
	}
	b := newBlock(src, key, m)
	b.Dir = dir
	if err := b.header(); err != nil {
		return nil, err
	}
	return b, nil
}

// newBlock returns a block of src whose data is opened when first needed.
func newBlock(src BlockSource, key string, m Meta) *Block {
	b := &Block{Meta: m, src: src, key: key}
	b.refs.Store(1)
	return b
}

// header opens the block's data and reads its table of contents and chunk
// index, once. The caller holds a reference.
func (b *Block) header() error {
	if b.opened.Load() {
		return nil
	}
	b.loading.Lock()
	defer b.loading.Unlock()
	if b.opened.Load() {
		return nil
	}
	if b.openErr != nil {
		return b.openErr
	}
	err := func() error {
		d, err := b.src.Open(context.Background(), b.key, b.Meta)
		if err != nil {
			return err
		}
		if err := b.load(d); err != nil {
			d.Close()
			return fmt.Errorf("%s: %w", BlockDataFile, err)
		}
		b.data = d
		return nil
	}()
	if err != nil {
		err = fmt.Errorf("block %s: %w", b, err)
		if !errors.Is(err, ErrUnavailable) {
			b.openErr = err
		}
		return err
	}
	b.opened.Store(true)
	return nil
}

func (b *Block) load(f BlockData) error {
	if err := b.readTOC(f); err != nil {
		return err
	}
	raw, err := readSection(f, b.sections[sectionChunks], b.tocOffset)
	if err != nil {
		return fmt.Errorf("section %d: %w", sectionChunks, err)
	}
	if b.chunks, err = decodeChunkIndex(raw, b.tocOffset); err != nil {
		return err
	}
	return nil
}

// readTOC checks the block's magic and trailer and reads its table of
// contents into tocOffset and sections.
func (b *Block) readTOC(f BlockData) error {
	size := f.Size()
	if size < int64(len(blockMagic))+trailerSize {
		return fmt.Errorf("%w: %d bytes is too short for a block", errCorrupt, size)
	}
	head := make([]byte, len(blockMagic))
	trailer := make([]byte, trailerSize)
	if _, err := f.ReadAt(head, 0); err != nil {
		return err
	}
	if _, err := f.ReadAt(trailer, size-trailerSize); err != nil {
		return err
	}
	if string(head) != blockMagic || string(trailer[16:]) != trailerMagic {
		return fmt.Errorf("%w: bad magic (truncated?)", errCorrupt)
	}
	sections := sectionsOf(b.Meta.Version)
	tocOffset := int64(binary.LittleEndian.Uint64(trailer))
	tocLen := int64(binary.LittleEndian.Uint32(trailer[8:]))
	if tocOffset < 0 || tocLen != int64(sections)*21 || tocOffset+tocLen != size-trailerSize {
		return fmt.Errorf("%w: bad table of contents position", errCorrupt)
	}
	toc := make([]byte, tocLen)
	if _, err := f.ReadAt(toc, tocOffset); err != nil {
		return err
	}
	if crc32.Checksum(toc, castagnoli) != binary.LittleEndian.Uint32(trailer[12:]) {
		return fmt.Errorf("%w: table of contents CRC mismatch", errCorrupt)
	}
	for i := range sections {
		e := toc[i*21:]
		kind := int(e[0])
		s := section{offset: int64(binary.LittleEndian.Uint64(e[1:])), stored: binary.LittleEndian.Uint32(e[9:]),
			raw: binary.LittleEndian.Uint32(e[13:]), crc: binary.LittleEndian.Uint32(e[17:])}
		if kind != i+1 {
			return fmt.Errorf("%w: section %d has kind %d", errCorrupt, i+1, kind)
		}
		if !s.within(tocOffset) {
			return fmt.Errorf("section %d: %w: at %d+%d outside the file", kind, errCorrupt, s.offset, s.stored)
		}
		b.sections[kind] = s
	}
	b.tocOffset = tocOffset
	return nil
}

// readIndex reads and checks the block's index sections.
func (b *Block) readIndex() (*blockIndex, error) {
	var raw [numSections + 1][]byte
	for kind, s := range b.sections {
		if kind == sectionChunks || kind == sectionCPUSummary || s == (section{}) {
			continue
		}
		var err error
		if raw[kind], err = readSection(b.data, s, b.tocOffset); err != nil {
			return nil, fmt.Errorf("block %s section %d: %w", b, kind, err)
		}
	}
	t, err := decodeTables(raw, b.Meta.Version)
	if err != nil {
		return nil, fmt.Errorf("block %s: %w", b, err)
	}
	ix := &blockIndex{tables: t, idle: idleMasks{stacks: idleStacks(t), threads: idleThreads(t)}}
	if ix.summary, err = decodeSummary(raw[sectionSummary], "summary", uint64(len(t.Threads))); err != nil {
		return nil, fmt.Errorf("block %s: %w", b, err)
	}

	ix.bytes = ix.size()
	return ix, nil
}

// size approximates the memory the index holds.
func (ix *blockIndex) size() int64 {
	t := ix.tables
	n := int64(len(t.Strings))*int64(unsafe.Sizeof("")) +
		int64(len(t.Frames))*int64(unsafe.Sizeof(Frame{})) +
		int64(len(t.StackStart)+len(t.StackFrames))*4 +
		int64(len(t.Threads))*int64(unsafe.Sizeof(Thread{})) +
		int64(len(t.Cgroups))*int64(unsafe.Sizeof(Cgroup{})) +
		int64(len(ix.summary.cells))*int64(unsafe.Sizeof(summaryCell{})) +
		int64(len(ix.idle.stacks)+len(ix.idle.threads))
	for _, s := range t.Strings {
		n += int64(len(s))
	}
	return n
}

// readSection reads, checks and decompresses one section that must end
// before limit.
func readSection(f io.ReaderAt, s section, limit int64) ([]byte, error) {
	if !s.within(limit) {
		return nil, fmt.Errorf("%w: section at %d+%d outside the file", errCorrupt, s.offset, s.stored)
	}
	stored := make([]byte, s.stored)
	if _, err := f.ReadAt(stored, s.offset); err != nil {
		return nil, err
	}
	if crc32.Checksum(stored, castagnoli) != s.crc {
		return nil, fmt.Errorf("%w: CRC mismatch at offset %d", errCorrupt, s.offset)
	}
	return decompress(stored, int(s.raw))
}

// decodeTables decodes a block's tables; version is the block's format
// version (frames say how they were found from version 5, their lines
// from version 6).
func decodeTables(raw [numSections + 1][]byte, version int) (*Table, error) {
	t := &Table{}
	r := &reader{b: raw[sectionStrings]}
	n := r.count("strings", 1)
	t.Strings = make([]string, n)
	for i := range t.Strings {
		t.Strings[i] = string(r.bytes("string"))
	}
	if r.err != nil {
		return nil, fmt.Errorf("strings: %w", r.err)
	}
	ns := uint64(len(t.Strings))

	r = &reader{b: raw[sectionFrames]}
	t.Frames = make([]Frame, r.count("frames", 5))
	for i := range t.Frames {
		f := &t.Frames[i]
		f.Function = r.u32("frame function", ns)
		f.Module = r.u32("frame module", ns)
		f.BuildID = r.u32("frame build id", ns)
		r.frameTail(f, version)
	}
	if r.err != nil {
		return nil, fmt.Errorf("frames: %w", r.err)
	}

	r = &reader{b: raw[sectionStacks]}
	nstacks := r.count("stacks", 1)
	t.StackStart = make([]uint32, 1, nstacks+1)
	for range nstacks {
		nf := r.count("stack frames", 1)
		for range nf {
			t.StackFrames = append(t.StackFrames, r.u32("stack frame", uint64(len(t.Frames))))
		}
		t.StackStart = append(t.StackStart, uint32(len(t.StackFrames)))
	}
	if r.err != nil {
		return nil, fmt.Errorf("stacks: %w", r.err)
	}

	r = &reader{b: raw[sectionThreads]}
	t.Threads = make([]Thread, r.count("threads", 4))
	for i := range t.Threads {
		th := &t.Threads[i]
		th.PID = r.u32("thread pid", 1<<32)
		th.TID = r.u32("thread tid", 1<<32)
		th.Comm = r.u32("thread comm", ns)
		th.Cgroup = r.uvarint("thread cgroup")
	}
	if r.err != nil {
		return nil, fmt.Errorf("threads: %w", r.err)
	}
	if err := decodeCgroups(raw[sectionCgroups], t); err != nil {
		return nil, err
	}
	return t, nil
}

// decodeCgroups reads the cgroups section (absent, nil, in version 1) and
// sets each thread's Meta from its cgroup id.
func decodeCgroups(raw []byte, t *Table) error {
	if raw == nil {
		return nil
	}
	r := &reader{b: raw}
	ns := uint64(len(t.Strings))
	t.Cgroups = make([]Cgroup, r.count("cgroups", 9))
	index := make(map[uint64]uint32, len(t.Cgroups))
	for i := range t.Cgroups {
		c := &t.Cgroups[i]
		c.ID = r.uvarint("cgroup id")
		for _, s := range []*uint32{&c.Path, &c.ContainerID, &c.Runtime, &c.PodUID, &c.QoS, &c.Namespace, &c.Pod, &c.Container} {
			*s = r.u32("cgroup string", ns)
		}
		if r.err != nil {
			break
		}
		if _, dup := index[c.ID]; dup {
			return fmt.Errorf("cgroups: %w: cgroup %d listed twice", errCorrupt, c.ID)
		}
		index[c.ID] = uint32(i + 1)
	}
	if r.err != nil {
		return fmt.Errorf("cgroups: %w", r.err)
	}
	for i := range t.Threads {
		t.Threads[i].Meta = index[t.Threads[i].Cgroup]
	}
	return nil
}

func (r *reader) bytes1() byte {
	if len(r.b) == 0 {
		r.fail("byte")
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func decodeChunkIndex(raw []byte, limit int64) ([]chunkRef, error) {
	r := &reader{b: raw}
	chunks := make([]chunkRef, r.count("chunks", 7))
	for i := range chunks {
		c := &chunks[i]
		c.minTime = r.varint("chunk time")
		c.maxTime = c.minTime + int64(r.uvarint("chunk span"))
		c.count = int(r.u32("chunk count", chunkSamples+1))
		c.offset = int64(r.uvarint("chunk offset"))
		c.stored = r.u32("chunk length", uint64(limit))
		c.raw = r.u32("chunk raw length", 1<<31)
		c.crc = r.u32("chunk crc", 1<<32)
	}
	if r.err != nil {
		return nil, fmt.Errorf("chunk index: %w", r.err)
	}
	return chunks, nil
}

// summary is a block's per-thread or per-CPU 10 s counts as held in
// memory: 16 bytes an entry, buckets counted from base, in bucket then key
// order. The per-thread one is most of a block index's memory (an entry
// per thread per 10 s).
type summary struct {
	base  int64 // bucket of the first entry, in µs / summaryBucket
	cells []summaryCell
}

type summaryCell struct {
	bucket      uint32 // after base
	key         uint32 // the thread's index, or the CPU
	count, idle uint32
}

// maxSummaryCPU bounds the CPU numbers of a per-CPU summary (Linux's
// NR_CPUS is at most 8192).
const maxSummaryCPU = 1 << 16

// decodeSummary decodes the summary section named what, whose keys are
// below maxKey (the thread count, or maxSummaryCPU). It reads the entries
// with a local cursor, not the reader: a day's per-CPU summary has 69 120
// entries of four varints, and the reader's stores through its pointer
// (with a GC write barrier each while a collection runs) and its error
// names made most of the cold fleet overview's CPU.
func decodeSummary(raw []byte, what string, maxKey uint64) (summary, error) {
	r := &reader{b: raw}
	n := r.count(what, 4)
	if r.err != nil {
		return summary{}, fmt.Errorf("%s: %w", what, r.err)
	}
	bad := func(field string) error {
		return fmt.Errorf("%s: %w: truncated or bad %s %s", what, errCorrupt, what, field)
	}
	b := r.b
	uvarint := func(limit uint64) (uint64, bool) {
		v, k := binary.Uvarint(b)
		if k <= 0 || v >= limit {
			return 0, false
		}
		b = b[k:]
		return v, true
	}
	cells := make([]summaryCell, n)
	var base, prev int64
	for i := range cells {
		d, k := binary.Varint(b)
		if k <= 0 {
			return summary{}, bad("bucket")
		}
		b = b[k:]
		if i > 0 && d < 0 {
			// Readers take the first and last entries for the lowest
			// and highest buckets.
			return summary{}, fmt.Errorf("%s: %w: %s entry %d's bucket is before the previous entry's", what, errCorrupt, what, i)
		}
		prev += d
		if i == 0 {
			base = prev
		}
		off := prev - base
		if off < 0 || off >= 1<<32 {
			return summary{}, bad("bucket")
		}
		key, ok := uvarint(maxKey)
		if !ok {
			return summary{}, bad("key")
		}
		count, ok := uvarint(1 << 32)
		if !ok {
			return summary{}, bad("count")
		}
		idle, ok := uvarint(count + 1)
		if !ok {
			return summary{}, bad("idle")
		}
		cells[i] = summaryCell{bucket: uint32(off), key: uint32(key), count: uint32(count), idle: uint32(idle)}
	}
	return summary{base: base, cells: cells}, nil
}

// within reports whether the section lies between the block's magic and
// limit.
func (s section) within(limit int64) bool {
	return s.offset >= int64(len(blockMagic)) && s.offset+int64(s.stored) <= limit
}

// readChunk reads chunk i into a Table that shares the tables of ix, the
// block's index.
func (b *Block) readChunk(ix *blockIndex, i int) (*Table, error) {
	c := b.chunks[i]
	raw, err := readSection(b.data, c.section, b.tocOffset)
	if err != nil {
		return nil, fmt.Errorf("block %s chunk %d: %w", b, i, err)
	}
	t := *ix.tables
	if err := decodeChunk(&t, raw, c); err != nil {
		return nil, fmt.Errorf("block %s chunk %d: %w", b, i, err)
	}
	return &t, nil
}

// decodeChunk fills t's sample columns from a chunk's bytes. It works on
// local slices and a local cursor: appending through t on every sample
// cost a GC write barrier each, a quarter of the decode time.
func decodeChunk(t *Table, raw []byte, c chunkRef) error {
	times := make([]int64, c.count)
	cpus := make([]uint32, c.count)
	threads := make([]uint32, c.count)
	stacks := make([]uint32, c.count)
	nthreads, nstacks := uint64(len(t.Threads)), uint64(t.NumStacks())
	b := raw
	bad := func(what string) error { return fmt.Errorf("%w: truncated or bad %s", errCorrupt, what) }
	uvarint := func() (uint64, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	groups, ok := uvarint()
	if !ok || groups > uint64(c.count) {
		return bad("cpu groups")
	}
	pos := 0
	for range groups {
		cpu, ok1 := uvarint()
		n, ok2 := uvarint()
		if !ok1 || !ok2 || cpu >= 1<<32 {
			return bad("cpu group")
		}
		if n > uint64(c.count-pos) {
			return fmt.Errorf("%w: more samples than the index says (%d)", errCorrupt, c.count)
		}
		end := pos + int(n)
		prev, delta := c.minTime, int64(0)
		for i := pos; i < end; i++ {
			dd, m := binary.Varint(b)
			if m <= 0 {
				return bad("time")
			}
			b = b[m:]
			delta += dd
			prev += delta
			times[i] = prev * 1000
			cpus[i] = uint32(cpu)
		}
		for i := pos; i < end; i++ {
			v, ok := uvarint()
			if !ok || v >= nthreads {
				return bad("thread id")
			}
			threads[i] = uint32(v)
		}
		for i := pos; i < end; i++ {
			v, ok := uvarint()
			if !ok || v >= nstacks {
				return bad("stack id")
			}
			stacks[i] = uint32(v)
		}
		pos = end
	}
	if pos != c.count {
		return fmt.Errorf("%w: %d samples, the index says %d", errCorrupt, pos, c.count)
	}
	t.Time, t.CPU, t.Thread, t.Stack = times, cpus, threads, stacks
	return nil
}

// acquire takes a reference for a reader; Close drops it.
func (b *Block) acquire() { b.refs.Add(1) }

// Close drops a reference to the block: the DB's own, or a reader's taken
// by acquire. The data is closed with the last reference.
func (b *Block) Close() error {
	if b.refs.Add(-1) == 0 && b.opened.Load() {
		return b.data.Close()
	}
	return nil
}
