package store

import (
	"strings"
	"testing"
)

func TestEventObjectNames(t *testing.T) {
	key, err := EventSegmentObject("node-a", "3f9c21d04e5b6a78", EventSegmentName(7))
	if err != nil {
		t.Fatal(err)
	}
	if want := "node-a/events/3f9c21d04e5b6a78-0000000000000007"; key != want {
		t.Fatalf("object %q, want %q", key, want)
	}
	o, err := ParseEventObject(key)
	if err != nil || o != (EventObject{Node: "node-a", Instance: "3f9c21d04e5b6a78", Seq: 7}) {
		t.Fatalf("parsed %+v, %v", o, err)
	}
	// Objects shipped before instances named them are still read.
	o, err = ParseEventObject("node-a/events/0000000000000012")
	if err != nil || o != (EventObject{Node: "node-a", Seq: 12}) || o.Key() != "node-a/events/0000000000000012" {
		t.Fatalf("old-style object parsed %+v, %v", o, err)
	}
	for _, bad := range []string{"", "node-a", "node-a/events/", "node-a/blocks/0000000000000001", "node-a/events/1",
		"node-a/events/3f9c21d04e5b6a78-1", "node-a/events/XYZ-0000000000000001", "node-a/events/3f9c21d04e5b6a78-0000000000000001/x",
		"/events/0000000000000001", "node-a/events/3F9C21D04E5B6A78-0000000000000001"} {
		if o, err := ParseEventObject(bad); err == nil {
			t.Errorf("%q parsed as %+v, want an error", bad, o)
		}
	}
	for _, bad := range [][3]string{{"a", "", "0000000000000001"}, {"a", "3f9c21d04e5b6a78", "1"}, {"a/b", "3f9c21d04e5b6a78", "0000000000000001"}} {
		if key, err := EventSegmentObject(bad[0], bad[1], bad[2]); err == nil {
			t.Errorf("EventSegmentObject%q = %q, want an error", bad, key)
		}
	}
}

// FuzzParseEventObject: a name either fails to parse or parses to an
// object whose Key is that name again.
func FuzzParseEventObject(f *testing.F) {
	f.Add("node-a/events/3f9c21d04e5b6a78-0000000000000007")
	f.Add("node-a/events/0000000000000012")
	f.Add("a/events/-0000000000000001")
	f.Add("a/events/3f9c21d04e5b6a78-99999999999999999999")
	f.Fuzz(func(t *testing.T, key string) {
		o, err := ParseEventObject(key)
		if err != nil {
			if !strings.Contains(err.Error(), "event segment object") {
				t.Fatalf("error %q does not say what it was reading", err)
			}
			return
		}
		if o.Key() != key {
			t.Fatalf("%q parsed to %+v, whose key is %q", key, o, o.Key())
		}
		if o.Instance != "" && !ValidInstance(o.Instance) {
			t.Fatalf("%q: instance %q", key, o.Instance)
		}
	})
}
