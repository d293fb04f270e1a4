package symbolize

import "testing"

func TestLRU(t *testing.T) {
	c := newLRU[string, int](2)
	c.add("a", 1)
	c.add("b", 2)
	if v, ok := c.get("a"); !ok || v != 1 {
		t.Fatalf("get(a) = %d, %v", v, ok)
	}
	c.add("c", 3) // evicts b, the least recently used
	if _, ok := c.get("b"); ok {
		t.Error("b survived eviction")
	}
	for k, want := range map[string]int{"a": 1, "c": 3} {
		if v, ok := c.get(k); !ok || v != want {
			t.Errorf("get(%s) = %d, %v, want %d", k, v, ok, want)
		}
	}
	c.add("a", 10)
	if v, _ := c.get("a"); v != 10 || c.len() != 2 {
		t.Errorf("after replacing a: get(a) = %d, len %d", v, c.len())
	}
	c.remove("a")
	c.remove("missing")
	if _, ok := c.get("a"); ok || c.len() != 1 {
		t.Errorf("after remove: len %d", c.len())
	}
}
