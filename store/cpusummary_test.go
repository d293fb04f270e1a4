package store

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/synth"
)

// TestCPUSummaryOfSynthBlocks: the per-CPU summary of a block, summed
// over CPUs, is its per-thread summary summed over threads.
func TestCPUSummaryOfSynthBlocks(t *testing.T) {
	dir, _ := nodeDir(t, "n", nil, synth.Config{CPUs: 4, Hz: 99, Start: 1e18, Seconds: 30, Seed: 3, Containers: true})
	db, err := Open(dir, Options{Source: "n", ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, b := range db.blocks {
		ix, err := db.blockIndex(b)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := readSection(b.data, b.sections[sectionCPUSummary], b.tocOffset)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := decodeSummary(raw, "cpu summary", maxSummaryCPU)
		if err != nil || len(cs.cells) == 0 {
			t.Fatalf("block %s: per-CPU summary %+v: %v", b, cs, err)
		}
		perCPU, perThread := map[int64][2]uint32{}, map[int64][2]uint32{}
		for _, c := range cs.cells {
			v := perCPU[cs.base+int64(c.bucket)]
			perCPU[cs.base+int64(c.bucket)] = [2]uint32{v[0] + c.count, v[1] + c.idle}
		}
		for _, c := range ix.summary.cells {
			v := perThread[ix.summary.base+int64(c.bucket)]
			perThread[ix.summary.base+int64(c.bucket)] = [2]uint32{v[0] + c.count, v[1] + c.idle}
		}
		if len(perCPU) != len(perThread) {
			t.Fatalf("%d buckets per CPU, %d per thread", len(perCPU), len(perThread))
		}
		for k, v := range perThread {
			if perCPU[k] != v {
				t.Errorf("bucket %d: per CPU %v, per thread %v", k, perCPU[k], v)
			}
		}
	}
}

func FuzzDecodeCPUSummary(f *testing.F) {
	f.Add(encodeSummary([]summaryEntry{{bucket: 170_000_000, key: 3, count: 990, idle: 10}, {bucket: 170_000_001, key: 0, count: 5, idle: 5}}))
	f.Add(encodeSummary(nil))
	f.Add(encodeSummary([]summaryEntry{{bucket: 0, key: 0, count: 1}, {bucket: 5, key: 0, count: 1}, {bucket: 3, key: 1, count: 1}}))
	f.Fuzz(func(t *testing.T, raw []byte) {
		s, err := decodeSummary(raw, "cpu summary", maxSummaryCPU)
		if err != nil {
			return
		}
		for i, c := range s.cells {
			if c.key >= maxSummaryCPU || c.idle > c.count {
				t.Fatalf("decoded an out-of-range cell %+v", c)
			}
			if i > 0 && c.bucket < s.cells[i-1].bucket {
				t.Fatalf("decoded cell %d's bucket %d before the previous one's %d", i, c.bucket, s.cells[i-1].bucket)
			}
		}
	})
}

// TestDecodeSummaryRejectsBucketsGoingBack: a summary whose buckets rise
// then fall (0, 5, 3) is a corrupt block, not entries that readers such as
// ReadCPUSteps, which take the first and last entries for the lowest and
// highest buckets, would index past their counts with.
func TestDecodeSummaryRejectsBucketsGoingBack(t *testing.T) {
	back := encodeSummary([]summaryEntry{{bucket: 100, key: 0, count: 1}, {bucket: 105, key: 1, count: 2}, {bucket: 103, key: 0, count: 3}})
	for _, what := range []string{"cpu summary", "summary"} {
		_, err := decodeSummary(back, what, maxSummaryCPU)
		if !errors.Is(err, errCorrupt) || !strings.Contains(err.Error(), what+" entry 2's bucket is before the previous entry's") {
			t.Errorf("%s with buckets 100, 105, 103: %v, want a corrupt-block error naming entry 2", what, err)
		}
	}
	// Equal buckets (several keys in one 10 s) are fine.
	same := encodeSummary([]summaryEntry{{bucket: 100, key: 0, count: 1}, {bucket: 100, key: 1, count: 2}, {bucket: 101, key: 0, count: 3}})
	if s, err := decodeSummary(same, "cpu summary", maxSummaryCPU); err != nil || len(s.cells) != 3 || s.cells[2].bucket != 1 {
		t.Errorf("buckets 100, 100, 101: %+v, %v", s, err)
	}
}

// TestReadCPUStepsRefusesOlderBlocks: a store of version 2 blocks (no
// per-CPU summary) lists none with one, and ReadCPUSteps refuses its
// block.
func TestReadCPUStepsRefusesOlderBlocks(t *testing.T) {
	old := t.TempDir()
	copyDir(t, "testdata/v2", old)
	v2, err := Open(old, Options{Source: "host", ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer v2.Close()
	if bs := v2.CPUSummaryBlocks(); len(bs) != 0 {
		t.Errorf("a store of version 2 blocks lists %d with a per-CPU summary", len(bs))
	}
	b := v2.blocks[0]
	if _, err := v2.ReadCPUSteps(b, int64(10*time.Second), 0, false, Range{From: math.MinInt64, To: math.MaxInt64}); err == nil {
		t.Error("ReadCPUSteps of a version 2 block: no error")
	}
}
