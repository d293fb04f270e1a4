// Package lru is the one least-recently-used cache heatscope's bounded
// caches share: the store's block indexes and decoded chunks, and
// bucketstore's block tails and its disk cache. Each entry has a weight
// (bytes, samples); when the sum passes the limit the least recently used
// entries go, but the newest always stays, so that one entry larger than
// the whole cache is still kept until the next one comes.
package lru

import (
	"container/list"
	"sync"
)

// Cache maps keys to values, bounded by the sum of their weights. It is
// safe for concurrent use.
type Cache[K comparable, V any] struct {
	limit   int64
	weight  func(V) int64
	evicted func(K, V)

	mu    sync.Mutex
	total int64
	order *list.List // of *entry[K, V], most recently used first
	items map[K]*list.Element
}

type entry[K comparable, V any] struct {
	key    K
	val    V
	weight int64
}

// New returns a cache holding at most limit of weight. weight gives a
// value's; evicted, when not nil, is called (without the cache's lock
// held) for every entry the limit pushes out, not for those Remove takes.
func New[K comparable, V any](limit int64, weight func(V) int64, evicted func(K, V)) *Cache[K, V] {
	return &Cache[K, V]{limit: limit, weight: weight, evicted: evicted, order: list.New(), items: map[K]*list.Element{}}
}

// Get returns the value of key and marks it used.
func (c *Cache[K, V]) Get(key K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.items[key]
	if !ok {
		var zero V
		return zero, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*entry[K, V]).val, true
}

// Add caches val under key unless the key is there already (the value
// there stays: values of one key are alike) and reports whether it added.
func (c *Cache[K, V]) Add(key K, val V) bool { return c.AddIf(key, val, nil) }

// AddIf is Add when ok, called under the cache's lock, says yes (nil: yes):
// a caller that drops a key for good with Remove after making ok say no
// never sees a late Add put it back.
func (c *Cache[K, V]) AddIf(key K, val V, ok func() bool) bool {
	c.mu.Lock()
	if _, there := c.items[key]; there || (ok != nil && !ok()) {
		c.mu.Unlock()
		return false
	}
	w := c.weight(val)
	c.items[key] = c.order.PushFront(&entry[K, V]{key, val, w})
	c.total += w
	var out []*entry[K, V]
	for c.total > c.limit && c.order.Len() > 1 {
		old := c.order.Remove(c.order.Back()).(*entry[K, V])
		delete(c.items, old.key)
		c.total -= old.weight
		out = append(out, old)
	}
	c.mu.Unlock()
	if c.evicted != nil {
		for _, e := range out {
			c.evicted(e.key, e.val)
		}
	}
	return true
}

// Remove drops key and reports whether it was there.
func (c *Cache[K, V]) Remove(key K) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.items[key]
	if ok {
		c.drop(e)
	}
	return ok
}

// RemoveFunc drops every key that drop says to and returns how many.
func (c *Cache[K, V]) RemoveFunc(drop func(K) bool) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for k, e := range c.items {
		if drop(k) {
			c.drop(e)
			n++
		}
	}
	return n
}

func (c *Cache[K, V]) drop(e *list.Element) {
	old := c.order.Remove(e).(*entry[K, V])
	delete(c.items, old.key)
	c.total -= old.weight
}

// Len returns the number of entries.
func (c *Cache[K, V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.items)
}

// Weight returns the sum of the entries' weights.
func (c *Cache[K, V]) Weight() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// Range calls f with every entry, most recently used first, until f
// returns false, with the cache's lock held (f must not use the cache).
func (c *Cache[K, V]) Range(f func(K, V) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for e := c.order.Front(); e != nil; e = e.Next() {
		if en := e.Value.(*entry[K, V]); !f(en.key, en.val) {
			return
		}
	}
}
