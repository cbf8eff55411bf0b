// Package memo is a worker's memo of decoded constants: values of the
// object cache (package cache) kept in memory, least recently used first
// out, within a bound on their encoded bytes.
package memo

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/redmap/redmap/cache"
	"github.com/redmap/redmap/codec"
	"golang.org/x/sync/singleflight"
)

// DefaultBytes is the default bound of a Memo: 512 MiB of values, counted
// by their encoded size.
const DefaultBytes = 512 << 20

// Memo keeps decoded values in memory, least recently used first out, within
// a bound on their encoded bytes. Concurrent lookups of a missing value fetch
// and decode it once (single flight). Safe for concurrent use.
type Memo struct {
	store *cache.Store
	max   int64

	mu    sync.Mutex
	lru   *simplelru.LRU[string, memoEntry]
	bytes int64

	flight singleflight.Group

	hits, misses, fetches, fetched, decodes, evictions atomic.Int64
}

type memoEntry struct {
	v    any
	cost int64
}

// New returns a memo of values from store, holding at most maxBytes of
// them by encoded size (DefaultBytes if maxBytes <= 0). A value larger
// than the bound is decoded and used but not kept.
func New(store *cache.Store, maxBytes int64) *Memo {
	if maxBytes <= 0 {
		maxBytes = DefaultBytes
	}
	m := &Memo{store: store, max: maxBytes}
	// The LRU's own bound is on entries; ours is on bytes, enforced in add.
	m.lru, _ = simplelru.NewLRU[string, memoEntry](math.MaxInt32, func(_ string, e memoEntry) {
		m.bytes -= e.cost
	})
	return m
}

// Get returns ref's value decoded by decode, from memory if it is there, else
// fetched from Redis (checked against its hash) and decoded once however many
// goroutines ask at the same time. kind tells apart decodings of the same
// bytes into different types.
func (m *Memo) Get(ctx context.Context, ref cache.Ref, kind string, decode func([]byte) (any, error)) (any, error) {
	key := ref.Hash + "/" + kind
	if v, ok := m.lookup(key); ok {
		m.hits.Add(1)
		return v, nil
	}
	m.misses.Add(1)
	v, err, _ := m.flight.Do(key, func() (v any, err error) {
		// A panic in here would be passed on to every goroutine waiting on
		// the flight: it is this one's error instead.
		defer func() {
			if p := recover(); p != nil {
				v, err = nil, fmt.Errorf("%w: fetching or decoding %s panicked: %v", codec.ErrCorrupt, ref, p)
			}
		}()
		// A flight that ended just before ours began may have filled it.
		if hit, ok := m.lookup(key); ok {
			return hit, nil
		}
		b, err := m.store.Get(ctx, ref)
		if err != nil {
			return nil, err
		}
		m.fetches.Add(1)
		m.fetched.Add(int64(len(b)))
		val, err := decode(b)
		m.decodes.Add(1)
		if err != nil {
			return nil, err
		}
		m.add(key, val, int64(len(b)))
		return val, nil
	})
	return v, err
}

func (m *Memo) lookup(key string) (any, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.lru.Get(key)
	return e.v, ok
}

func (m *Memo) add(key string, v any, cost int64) {
	if cost > m.max {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lru.Contains(key) {
		return
	}
	m.lru.Add(key, memoEntry{v: v, cost: cost})
	m.bytes += cost
	for m.bytes > m.max {
		m.lru.RemoveOldest()
		m.evictions.Add(1)
	}
}

// Stats returns the memo's counters.
func (m *Memo) Stats() cache.Stats {
	m.mu.Lock()
	bytes, entries := m.bytes, m.lru.Len()
	m.mu.Unlock()
	return cache.Stats{
		Hits: m.hits.Load(), Misses: m.misses.Load(), Fetches: m.fetches.Load(),
		BytesFetched: m.fetched.Load(), Decodes: m.decodes.Load(), Evictions: m.evictions.Load(),
		Bytes: bytes, Entries: entries,
	}
}
