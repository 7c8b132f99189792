package symbol

import "container/list"

// lru is a small least-recently-used map. It is not safe for concurrent use;
// callers hold their own lock.
type lru[K comparable, V any] struct {
	max   int
	order *list.List // front = most recently used; elements hold *lruItem[K, V]
	items map[K]*list.Element
	// onEvict, when set, is told of each entry add evicts.
	onEvict func(K, V)
}

type lruItem[K comparable, V any] struct {
	key K
	val V
}

func newLRU[K comparable, V any](max int) *lru[K, V] {
	return &lru[K, V]{max: max, order: list.New(), items: make(map[K]*list.Element)}
}

func (c *lru[K, V]) get(k K) (V, bool) {
	e, ok := c.items[k]
	if !ok {
		var zero V
		return zero, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*lruItem[K, V]).val, true
}

// add inserts or replaces k, evicting the least recently used entries beyond max.
func (c *lru[K, V]) add(k K, v V) {
	if e, ok := c.items[k]; ok {
		e.Value.(*lruItem[K, V]).val = v
		c.order.MoveToFront(e)
		return
	}
	c.items[k] = c.order.PushFront(&lruItem[K, V]{key: k, val: v})
	for c.max > 0 && c.order.Len() > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		it := last.Value.(*lruItem[K, V])
		delete(c.items, it.key)
		if c.onEvict != nil {
			c.onEvict(it.key, it.val)
		}
	}
}

// oldest is the least recently used entry.
func (c *lru[K, V]) oldest() (K, V, bool) {
	e := c.order.Back()
	if e == nil {
		var k K
		var v V
		return k, v, false
	}
	it := e.Value.(*lruItem[K, V])
	return it.key, it.val, true
}

func (c *lru[K, V]) remove(k K) {
	if e, ok := c.items[k]; ok {
		c.order.Remove(e)
		delete(c.items, k)
	}
}

func (c *lru[K, V]) len() int { return c.order.Len() }
