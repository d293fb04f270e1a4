package lru

import (
	"slices"
	"testing"
)

func byteLen(b []byte) int64 { return int64(len(b)) }

// TestEvictsLeastRecentlyUsed fills a 10-byte cache and checks that what
// goes is the least recently used, that the evicted callback sees it, and
// that the weight follows.
func TestEvictsLeastRecentlyUsed(t *testing.T) {
	var gone []string
	c := New(10, byteLen, func(k string, _ []byte) { gone = append(gone, k) })
	c.Add("a", make([]byte, 4))
	c.Add("b", make([]byte, 4))
	if _, ok := c.Get("a"); !ok { // a is now newer than b
		t.Fatal("a missing")
	}
	c.Add("c", make([]byte, 4)) // 12 > 10: b goes
	if _, ok := c.Get("b"); ok {
		t.Error("b kept, want it evicted (least recently used)")
	}
	if !slices.Equal(gone, []string{"b"}) {
		t.Errorf("evicted %v, want [b]", gone)
	}
	if c.Len() != 2 || c.Weight() != 8 {
		t.Errorf("len %d weight %d, want 2 and 8", c.Len(), c.Weight())
	}
	if c.Add("a", make([]byte, 1)) {
		t.Error("Add replaced a key already there")
	}
}

// TestKeepsTheNewest adds an entry larger than the limit: it stays alone.
func TestKeepsTheNewest(t *testing.T) {
	c := New[string](10, byteLen, nil)
	c.Add("a", make([]byte, 3))
	c.Add("big", make([]byte, 30))
	if _, ok := c.Get("big"); !ok || c.Len() != 1 || c.Weight() != 30 {
		t.Errorf("len %d weight %d, want the large entry alone", c.Len(), c.Weight())
	}
}

// TestAddIfAndRemove: AddIf adds only when its condition holds; Remove and
// RemoveFunc drop entries without calling evicted.
func TestAddIfAndRemove(t *testing.T) {
	evicted := 0
	c := New(100, func(v int) int64 { return int64(v) }, func(int, int) { evicted++ })
	if c.AddIf(1, 5, func() bool { return false }) {
		t.Error("AddIf added against its condition")
	}
	for k := range 6 {
		c.Add(k, 1)
	}
	if !c.Remove(0) || c.Remove(0) {
		t.Error("Remove: want true once, then false")
	}
	if n := c.RemoveFunc(func(k int) bool { return k%2 == 1 }); n != 3 {
		t.Errorf("RemoveFunc dropped %d, want 3", n)
	}
	if c.Len() != 2 || c.Weight() != 2 || evicted != 0 {
		t.Errorf("len %d weight %d evicted %d, want 2, 2, 0", c.Len(), c.Weight(), evicted)
	}
}
