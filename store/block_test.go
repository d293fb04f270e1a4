package store

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/sample"
)

func synthTable(t testing.TB, cfg synth.Config) (*Table, []sample.Sample) {
	t.Helper()
	g := synth.New(cfg)
	b := NewBuilder()
	var all []sample.Sample
	var s sample.Sample
	for g.Next(&s) {
		s.Time = s.Time / 1000 * 1000 // the format keeps microseconds
		b.Append(&s)
		all = append(all, s)
	}
	return &b.T, all
}

// readAll reads every sample of a block back, sorted like want.
func readAll(t testing.TB, b *Block) []sample.Sample {
	t.Helper()
	var out []sample.Sample
	ix, err := b.readIndex()
	if err != nil {
		t.Fatal(err)
	}
	for i := range b.chunks {
		c, err := b.readChunk(ix, i)
		if err != nil {
			t.Fatal(err)
		}
		for j := range c.Len() {
			out = append(out, c.Sample(j))
		}
	}
	return out
}

func sortSamples(s []sample.Sample) {
	slices.SortStableFunc(s, func(a, b sample.Sample) int {
		if a.Time != b.Time {
			return int(a.Time - b.Time)
		}
		return int(a.CPU) - int(b.CPU)
	})
}

func equalSamples(a, b sample.Sample) bool {
	return a.Time == b.Time && a.CPU == b.CPU && a.PID == b.PID && a.TID == b.TID && a.Comm == b.Comm &&
		a.CgroupID == b.CgroupID && slices.Equal(a.Stack, b.Stack) &&
		(a.Container == nil) == (b.Container == nil) && (a.Container == nil || *a.Container == *b.Container)
}

func TestBlockRoundTrip(t *testing.T) {
	tab, want := synthTable(t, synth.Config{CPUs: 8, Hz: 99, Start: 1_700_000_000_000_000_000, Seconds: 90, Stacks: 500, Containers: true})
	dir := t.TempDir()
	meta, err := writeBlock(dir, Meta{Source: "host"}, tab)
	if err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 || entries[0].Name() != meta.ID {
		t.Fatalf("block dir holds %v, want just %s", entries, meta.ID)
	}
	b, err := openBlock(filepath.Join(dir, meta.ID))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Meta.Samples != len(want) || len(b.chunks) < 2 {
		t.Fatalf("meta says %d samples in %d chunks, want %d in several", b.Meta.Samples, len(b.chunks), len(want))
	}
	got := readAll(t, b)
	sortSamples(got)
	sortSamples(want)
	sameSamples(t, got, want)
	if b.Meta.MinTime != want[0].Time || b.Meta.MaxTime != want[len(want)-1].Time {
		t.Errorf("meta time range [%d, %d], samples [%d, %d]", b.Meta.MinTime, b.Meta.MaxTime, want[0].Time, want[len(want)-1].Time)
	}
	ix, err := b.readIndex()
	if err != nil {
		t.Fatal(err)
	}
	var total uint32
	for _, e := range ix.summary.cells {
		total += e.count
	}
	if int(total) != len(want) {
		t.Errorf("summary counts %d samples, block has %d", total, len(want))
	}
	t.Logf("%d samples, %d bytes: %.2f bytes/sample", len(want), b.Meta.Bytes, float64(b.Meta.Bytes)/float64(len(want)))
}

// TestBlockCorruption flips and truncates bytes of a block's files: every
// damaged block must fail to open, or fail on the index or chunk it
// damaged, never panic or return wrong samples silently.
func TestBlockCorruption(t *testing.T) {
	tab, _ := synthTable(t, synth.Config{CPUs: 2, Hz: 99, Start: 1e18, Seconds: 5, Stacks: 50, Containers: true})
	dir := t.TempDir()
	meta, err := writeBlock(dir, Meta{Source: "host"}, tab)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, meta.ID, BlockDataFile)
	orig, _ := os.ReadFile(path)
	check := func(name string, data []byte) {
		os.WriteFile(path, data, 0o644)
		b, err := openBlock(filepath.Join(dir, meta.ID))
		if err != nil {
			return
		}
		defer b.Close()
		ix, err := b.readIndex()
		if err != nil {
			return
		}
		for i := range b.chunks {
			if _, err := b.readChunk(ix, i); err != nil {
				return
			}
		}
		t.Errorf("%s: block opened and read without error", name)
	}
	for _, n := range []int{0, 1, 8, 100, len(orig) / 2, len(orig) - 25, len(orig) - 1} {
		check("truncated to "+strconv.Itoa(n), orig[:n])
	}
	for off := 8; off < len(orig); off += max(1, len(orig)/97) {
		bad := slices.Clone(orig)
		bad[off] ^= 0x55
		check("flipped byte at "+strconv.Itoa(off), bad)
	}
	os.WriteFile(path, orig, 0o644)
	os.WriteFile(filepath.Join(dir, meta.ID, BlockMetaFile), []byte("{not json"), 0o644)
	if _, err := openBlock(filepath.Join(dir, meta.ID)); err == nil {
		t.Error("bad meta.json opened")
	}
}

func FuzzDecodeBlockSections(f *testing.F) {
	tab, _ := synthTable(f, synth.Config{CPUs: 2, Hz: 99, Start: 1e18, Seconds: 2, Stacks: 20})
	var raw [numSections + 1][]byte
	raw[sectionStrings] = encodeStrings(tab)
	raw[sectionFrames] = encodeFrames(tab)
	raw[sectionStacks] = encodeStacks(tab)
	raw[sectionThreads] = encodeThreads(tab)
	order := make([]int32, tab.Len())
	for i := range order {
		order[i] = int32(i)
	}
	chunk := encodeChunk(nil, tab, order, micros(tab.Time[0]))
	f.Add(raw[sectionStrings], raw[sectionFrames], raw[sectionStacks], raw[sectionThreads], chunk, encodeSummary(nil))
	// Version 5: frames marked with how they were found.
	marked, _ := synthTable(f, synth.Config{CPUs: 2, Hz: 99, Start: 1e18, Seconds: 2, Stacks: 20, Unwind: true})
	f.Add(encodeStrings(marked), encodeFrames(marked), encodeStacks(marked), encodeThreads(marked),
		encodeChunk(nil, marked, order[:marked.Len()], micros(marked.Time[0])), encodeSummary(nil))
	// Version 6: Python frames with their lines.
	py, _ := synthTable(f, synth.Config{CPUs: 2, Hz: 99, Start: 1e18, Seconds: 2, Stacks: 20, Python: true})
	f.Add(encodeStrings(py), encodeFrames(py), encodeStacks(py), encodeThreads(py),
		encodeChunk(nil, py, order[:py.Len()], micros(py.Time[0])), encodeSummary(nil))
	f.Fuzz(func(t *testing.T, strs, frames, stacks, threads, chunk, summary []byte) {
		var raw [numSections + 1][]byte
		raw[sectionStrings], raw[sectionFrames], raw[sectionStacks], raw[sectionThreads] = strs, frames, stacks, threads
		tab, err := decodeTables(raw, FormatVersion)
		// What an older version's reader takes, this version's reads
		// the same: with no frame marked before version 5, with no
		// Python frame and no lines before version 6.
		for _, v := range []int{4, 5} {
			old, errOld := decodeTables(raw, v)
			if errOld != nil {
				continue
			}
			if err != nil || !slices.Equal(old.Frames, tab.Frames) {
				t.Fatalf("version %d decodes the frames, version %d does not alike: %v", v, FormatVersion, err)
			}
			for _, fr := range old.Frames {
				if v < 5 && fr.Method != sample.MethodNotKnown {
					t.Fatalf("a version 4 frame decoded with method %d", fr.Method)
				}
				if fr.Kind == sample.KindPython || fr.Line != 0 || fr.StartLine != 0 {
					t.Fatalf("a version %d frame decoded as %+v", v, fr)
				}
			}
		}
		if err != nil {
			return
		}
		decodeSummary(summary, "summary", uint64(len(tab.Threads)))
		c := *tab
		if err := decodeChunk(&c, chunk, chunkRef{count: 1 << 12}); err != nil {
			return
		}
		// Every decoded id must be usable.
		for i := range c.Len() {
			c.Sample(i)
		}
	})
}
