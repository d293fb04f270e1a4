package symbolize

import "container/list"

// lru is a map bounded to max entries that evicts the least recently used
// one. It is not safe for concurrent use.
type lru[K comparable, V any] struct {
	max   int
	order *list.List // of *lruEntry[K, V], most recently used first
	items map[K]*list.Element
	// evicted, when set, is called for each entry evicted (not removed).
	evicted func(K, V)
}

type lruEntry[K comparable, V any] struct {
	key K
	val V
}

func newLRU[K comparable, V any](max int) *lru[K, V] {
	return &lru[K, V]{max: max, order: list.New(), items: make(map[K]*list.Element)}
}

// get returns the value of key and marks it used.
func (c *lru[K, V]) get(key K) (V, bool) {
	e, ok := c.items[key]
	if !ok {
		var zero V
		return zero, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*lruEntry[K, V]).val, true
}

// add sets the value of key, evicting the least recently used entry when
// the cache is full.
func (c *lru[K, V]) add(key K, val V) {
	if e, ok := c.items[key]; ok {
		e.Value.(*lruEntry[K, V]).val = val
		c.order.MoveToFront(e)
		return
	}
	c.items[key] = c.order.PushFront(&lruEntry[K, V]{key: key, val: val})
	if c.order.Len() > c.max {
		c.evictOldest()
	}
}

// evictOldest evicts the least recently used entry, if any.
func (c *lru[K, V]) evictOldest() {
	oldest := c.order.Back()
	if oldest == nil {
		return
	}
	e := oldest.Value.(*lruEntry[K, V])
	c.order.Remove(oldest)
	delete(c.items, e.key)
	if c.evicted != nil {
		c.evicted(e.key, e.val)
	}
}

// peek returns the value of key without marking it used.
func (c *lru[K, V]) peek(key K) (V, bool) {
	e, ok := c.items[key]
	if !ok {
		var zero V
		return zero, false
	}
	return e.Value.(*lruEntry[K, V]).val, true
}

// oldest returns the least recently used value.
func (c *lru[K, V]) oldest() (V, bool) {
	e := c.order.Back()
	if e == nil {
		var zero V
		return zero, false
	}
	return e.Value.(*lruEntry[K, V]).val, true
}

// each calls f for every entry, least recently used first.
func (c *lru[K, V]) each(f func(K, V)) {
	for e := c.order.Back(); e != nil; e = e.Prev() {
		entry := e.Value.(*lruEntry[K, V])
		f(entry.key, entry.val)
	}
}

// remove drops key.
func (c *lru[K, V]) remove(key K) {
	if e, ok := c.items[key]; ok {
		c.order.Remove(e)
		delete(c.items, key)
	}
}

// len returns the number of entries.
func (c *lru[K, V]) len() int { return len(c.items) }
