package bucketlayout_test

import (
	"strings"
	"testing"

	"github.com/heatscope/heatscope/bucketlayout"
	"github.com/heatscope/heatscope/store"
)

const inst = "3f9c21d04e5b6a78"

// TestNamesRoundTrip: every kind of object is named as FORMAT.md says, and
// parses back to what named it.
func TestNamesRoundTrip(t *testing.T) {
	b := bucketlayout.Block{Node: "node-a", ID: "1795237380000-0badf00d"}
	seg, err := bucketlayout.ShippedSegment("node-a", inst, store.EventSegmentName(7))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		want bucketlayout.Object
	}{
		{"node-a/blocks/1795237380000-0badf00d/data", bucketlayout.Object{Kind: bucketlayout.KindBlockFile, Node: "node-a", Block: b, File: bucketlayout.DataFile}},
		{"node-a/blocks/1795237380000-0badf00d/meta.json", bucketlayout.Object{Kind: bucketlayout.KindBlockFile, Node: "node-a", Block: b, File: bucketlayout.MetaFile}},
		{"node-a/blocks/1795237380000-0badf00d/deletion-mark.json", bucketlayout.Object{Kind: bucketlayout.KindBlockFile, Node: "node-a", Block: b, File: bucketlayout.DeletionMarkFile}},
		{seg, bucketlayout.Object{Kind: bucketlayout.KindEventSegment, Node: "node-a", Segment: bucketlayout.EventSegment{Node: "node-a", Instance: inst, Seq: 7}}},
		{"node-a/events/0000000000000012", bucketlayout.Object{Kind: bucketlayout.KindEventSegment, Node: "node-a", Segment: bucketlayout.EventSegment{Node: "node-a", Seq: 12}}},
		{"node-a/lease.json", bucketlayout.Object{Kind: bucketlayout.KindLease, Node: "node-a"}},
		{"bucket-index.json.gz", bucketlayout.Object{Kind: bucketlayout.KindIndex}},
		{"compactor-lock.json", bucketlayout.Object{Kind: bucketlayout.KindCompactorLock}},
	} {
		got, err := bucketlayout.Parse(c.name)
		if err != nil || got != c.want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", c.name, got, err, c.want)
			continue
		}
		if got.Key() != c.name {
			t.Errorf("%q parsed to %+v, whose key is %q", c.name, got, got.Key())
		}
	}
	if want := "node-a/events/" + inst + "-0000000000000007"; seg != want {
		t.Errorf("shipped segment %q, want %q", seg, want)
	}
	if got := b.Object(bucketlayout.MetaFile); got != "node-a/blocks/1795237380000-0badf00d/meta.json" {
		t.Errorf("meta object %q", got)
	}
	if got := bucketlayout.LeaseKey("node-a"); got != "node-a/lease.json" {
		t.Errorf("lease %q", got)
	}
	if got := bucketlayout.NodePrefix("node-a"); got != "node-a/" {
		t.Errorf("node prefix %q", got)
	}
	if got := bucketlayout.EventsPrefix("node-a"); got != "node-a/events/" {
		t.Errorf("events prefix %q", got)
	}
	if k, err := bucketlayout.ParseBlockKey(b.Key()); err != nil || k != b {
		t.Errorf("block key %q parsed to %+v, %v", b.Key(), k, err)
	}
}

// TestBadNamesRefused: names outside the layout are refused, each with an
// error that names the object and what is wrong.
func TestBadNamesRefused(t *testing.T) {
	for name, says := range map[string]string{
		"":                                   "no <node>/",
		"node-a":                             "no <node>/",
		"../blocks/x/data":                   "node name",
		"node a/lease.json":                  "node name",
		"/events/0000000000000001":           "node name",
		"node-a/events/":                     "segment number",
		"node-a/events/1":                    "segment number",
		"node-a/events/" + inst + "-1":       "segment number",
		"node-a/events/XYZ-0000000000000001": "instance id",
		"node-a/events/3F9C21D04E5B6A78-0000000000000001": "instance id",
		"node-a/events/" + inst + "-0000000000000001/x":   "segment number",
		"node-a/blocks/0000000000000001":                  "block id",
		"node-a/blocks/../data":                           "block id",
		"node-a/blocks/b1/index":                          "a block holds",
		"node-a/blocks/b1/data/x":                         "a block holds",
		"node-a/wal/0001":                                 "a node holds",
		"node-a/lease.json.tmp":                           "a node holds",
	} {
		o, err := bucketlayout.Parse(name)
		if err == nil {
			t.Errorf("%q parsed as %+v, want an error", name, o)
			continue
		}
		if !strings.Contains(err.Error(), says) || !strings.Contains(err.Error(), "not an object of the bucket layout") {
			t.Errorf("Parse(%q): %q does not say %q", name, err, says)
		}
	}
	if _, err := bucketlayout.ParseEventSegment("node-a/lease.json"); err == nil || !strings.Contains(err.Error(), "not an event segment") {
		t.Errorf("a lease parsed as an event segment: %v", err)
	}
	for _, key := range []string{"", "node-a", "node-a/", "/b1", "node-a/b1/x", "node a/b1"} {
		if b, err := bucketlayout.ParseBlockKey(key); err == nil || !strings.Contains(err.Error(), "bad block key") {
			t.Errorf("block key %q parsed to %+v, %v", key, b, err)
		}
	}
	for _, c := range []struct{ node, instance, file, says string }{
		{"a", "", "0000000000000001", "instance id"},
		{"a", inst, "1", "segment number"},
		{"a/b", inst, "0000000000000001", "node name"},
		{"", inst, "0000000000000001", "node name"},
	} {
		if key, err := bucketlayout.ShippedSegment(c.node, c.instance, c.file); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("ShippedSegment(%q, %q, %q) = %q, %v; want an error saying %q", c.node, c.instance, c.file, key, err, c.says)
		}
	}
}

func TestValidName(t *testing.T) {
	for s, want := range map[string]bool{
		"node-a": true, "ip-10-0-0-1.ec2.internal": true, "a_b": true, strings.Repeat("a", 253): true,
		"": false, ".": false, "..": false, "a/b": false, "a b": false, "ä": false, strings.Repeat("a", 254): false,
	} {
		if got := bucketlayout.ValidName(s); got != want {
			t.Errorf("ValidName(%q) = %t", s, got)
		}
	}
}

// FuzzParse: a name either is refused, with an error naming it, or parses
// to an object whose key is that name again, with valid parts.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"node-a/blocks/b1/data", "node-a/events/" + inst + "-0000000000000007",
		"node-a/events/0000000000000012", "node-a/lease.json", "bucket-index.json.gz", "a/events/-0000000000000001"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		o, err := bucketlayout.Parse(name)
		if err != nil {
			if !strings.Contains(err.Error(), "not an object of the bucket layout") {
				t.Fatalf("error %q does not say what is wrong", err)
			}
			return
		}
		if o.Key() != name {
			t.Fatalf("%q parsed to %+v, whose key is %q", name, o, o.Key())
		}
		switch o.Kind {
		case bucketlayout.KindBlockFile:
			if !bucketlayout.ValidName(o.Block.Node) || !bucketlayout.ValidName(o.Block.ID) {
				t.Fatalf("%q: block %+v", name, o.Block)
			}
		case bucketlayout.KindEventSegment:
			if o.Segment.Instance != "" && !store.ValidInstance(o.Segment.Instance) {
				t.Fatalf("%q: instance %q", name, o.Segment.Instance)
			}
		}
	})
}
