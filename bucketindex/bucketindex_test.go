package bucketindex

import (
	"bytes"
	"compress/gzip"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/store"
)

func TestRoundTrip(t *testing.T) {
	in := Index{UpdatedAt: 1700000000000,
		Blocks:        []store.Meta{{Version: 2, ID: "0001700000000000-0a0b0c0d", Node: "node-a", Source: "node-a", MinTime: 1, MaxTime: 2, Samples: 3, Level: 2, Parents: []string{"p1", "p2"}, Bytes: 99}},
		DeletionMarks: []DeletionMark{{Version: 1, Node: "node-a", ID: "p1", DeletionTime: 1700000000000, Reason: "compacted", ReplacedBy: "0001700000000000-0a0b0c0d"}},
		Corrupt: []CorruptBlock{{Node: "node-a", ID: "c1", Reason: "crc mismatch", Meta: &store.Meta{Version: 5, ID: "c1", Node: "node-a", Samples: 7}},
			{Node: "node-b", ID: "c2", Reason: "meta.json: not JSON"}},
		Segments: []Segment{{Node: "node-a", Name: "node-a/events/0000000001.seg", Modified: 1700000000000}}}
	raw, err := Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if out.Version != Version || len(out.Blocks) != 1 || out.Blocks[0].Parents[1] != "p2" || out.DeletionMarks[0].ReplacedBy != in.Blocks[0].ID ||
		len(out.Segments) != 1 || out.Segments[0] != in.Segments[0] ||
		len(out.Corrupt) != 2 || out.Corrupt[0].Meta == nil || out.Corrupt[0].Meta.Samples != 7 || out.Corrupt[0].Reason != "crc mismatch" || out.Corrupt[1].Meta != nil {
		t.Fatalf("round trip: %+v", out)
	}
	if !out.Stale(time.UnixMilli(in.UpdatedAt).Add(time.Hour), 30*time.Minute) || out.Stale(time.UnixMilli(in.UpdatedAt).Add(time.Minute), 30*time.Minute) {
		t.Fatal("Stale: wrong at 1 h and 1 min old with a 30 min limit")
	}
	// The listing's start, when known, is what ages: a pass that listed,
	// then merged for 20 minutes, wrote an index 20 minutes stale.
	out.ListedAt = out.UpdatedAt - (20 * time.Minute).Milliseconds()
	if !out.Stale(time.UnixMilli(in.UpdatedAt).Add(15*time.Minute), 30*time.Minute) {
		t.Fatal("Stale: an index whose listing is 35 min old is fresh with a 30 min limit")
	}
}

func gz(s string) []byte {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	w.Write([]byte(s))
	w.Close()
	return b.Bytes()
}

func TestDecodeRejects(t *testing.T) {
	for _, c := range []struct {
		in   []byte
		want string
	}{
		{[]byte("not gzip"), "bucket index"},
		{gz("{"), "unexpected end"},
		{gz(`{"version":7}`), "version 7"},
		// Version 1 has no list of corrupt blocks: a reader lists instead.
		{gz(`{"version":1}`), "version 1, this heatscope reads 2"},
		{gz(`{"version":2,"blocks":[{"id":"x"}]}`), "block 0 names no node"},
		{gz(`{"version":2,"corrupt":[{"node":"a"}]}`), "corrupt block 0"},
		{gz(`{"version":2,"deletionMarks":[{"node":"a"}]}`), "deletion mark 0"},
		{gz(`{"version":2,"segments":[{"node":"a","name":"b/events/1"}]}`), "segment 0"},
	} {
		_, err := Decode(bytes.NewReader(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Decode(%q): %v, want an error with %q", c.in, err, c.want)
		}
	}
	ix, err := Decode(bytes.NewReader(gz(`{"version":2}`)))
	if err != nil || ix.Blocks == nil || ix.Corrupt == nil || ix.DeletionMarks == nil || ix.Segments == nil {
		t.Fatalf("empty index: %+v, %v; lists must be [] not null", ix, err)
	}
}

// FuzzDecode: any bytes decode to an index or an error, never a panic;
// a decoded index encodes and decodes to the same blocks.
func FuzzDecode(f *testing.F) {
	f.Add(gz(`{"version":2,"updatedAt":5,"blocks":[{"version":2,"id":"b","node":"n","minTime":1,"maxTime":2}],"deletionMarks":[{"node":"n","id":"b","deletionTime":3}]}`))
	f.Add(gz(`{"version":2}`))
	f.Add(gz(`{"version":2,"corrupt":[{"node":"n","id":"c","reason":"r","meta":{"version":5,"id":"c","node":"n"}},{"node":"n","id":"d"}]}`))
	f.Add(gz(`{"version":2,"listedAt":4,"segments":[{"node":"n","name":"n/events/0000000001.seg","modified":3}]}`))
	f.Add([]byte{0x1f, 0x8b})
	f.Fuzz(func(t *testing.T, b []byte) {
		ix, err := Decode(bytes.NewReader(b))
		if err != nil {
			return
		}
		raw, err := Encode(ix)
		if err != nil {
			t.Fatal(err)
		}
		again, err := Decode(bytes.NewReader(raw))
		if err != nil || len(again.Blocks) != len(ix.Blocks) || len(again.DeletionMarks) != len(ix.DeletionMarks) || len(again.Corrupt) != len(ix.Corrupt) || len(again.Segments) != len(ix.Segments) {
			t.Fatalf("re-decode: %v", err)
		}
	})
}
