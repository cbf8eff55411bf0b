package redisbroker

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"
)

// A blocking read (the collector's BLMOVE) holds a pooled connection for as
// long as it waits, up to the manager's Poll. A program that makes many
// managers on one client (a web service with a manager per request) would
// have every connection of the pool blocked in their waits, and every other
// call, theirs included, wait for the pool until it gives up
// (redis.ErrPoolTimeout). So the waits of one client take at most a share
// of its pool (blockingShare); a wait beyond it is made by the client's
// waiter instead: one goroutine that reads the first entry of every list
// waited on this way with one pipeline of LINDEX per waiterTick, and hands
// each its entry.
const (
	// waiterTick is the waiter's pace: what a wait beyond the share adds to
	// the time a result takes to arrive, at most.
	waiterTick = 10 * time.Millisecond
)

// blockingShare returns how many blocking reads of c may be in flight at
// once: a quarter of its pool (go-redis's default pool is 10 connections a
// core, a Cluster's 5 a core on each node), at least one. A Cluster's pools
// are its nodes', so the share is each node's: a manager whose shards lie
// on three masters waits on each with a blocking read.
func blockingShare(c redis.UniversalClient) int {
	size := 0
	switch c := c.(type) {
	case *redis.Client:
		size = c.Options().PoolSize
	case *redis.ClusterClient:
		size = c.Options().PoolSize // per node
	case *redis.Ring:
		size = c.Options().PoolSize // per shard
	}
	if size <= 0 {
		size = 10 * runtime.GOMAXPROCS(0)
	}
	return max(size/4, 1)
}

// waiters holds each client's waiter. Its keys are weak, and a client's
// entry is deleted once the client is collected.
var waiters sync.Map // weak.Pointer[T] of the client → *waiter

// waiterOf returns c's waiter, made at its first use.
func waiterOf(c redis.UniversalClient) *waiter {
	key, cleanup := weakKey(c)
	if w, ok := waiters.Load(key); ok {
		return w.(*waiter)
	}
	w, had := waiters.LoadOrStore(key, &waiter{c: c, share: blockingShare(c), nodes: make(map[string]chan struct{}), waits: make(map[string][]chan string)})
	if !had && cleanup != nil {
		cleanup()
	}
	return w.(*waiter)
}

// weakKey returns a key for c in waiters that does not keep c alive, and a
// function that arranges for the entry's deletion once c is collected (nil
// if c's type is not one of go-redis's, then kept for the program's life).
func weakKey(c redis.UniversalClient) (any, func()) {
	switch c := c.(type) {
	case *redis.Client:
		k := weak.Make(c)
		return k, func() { runtime.AddCleanup(c, func(k weak.Pointer[redis.Client]) { waiters.Delete(k) }, k) }
	case *redis.ClusterClient:
		k := weak.Make(c)
		return k, func() { runtime.AddCleanup(c, func(k weak.Pointer[redis.ClusterClient]) { waiters.Delete(k) }, k) }
	case *redis.Ring:
		k := weak.Make(c)
		return k, func() { runtime.AddCleanup(c, func(k weak.Pointer[redis.Ring]) { waiters.Delete(k) }, k) }
	}
	return c, nil
}

// waiter bounds the blocking reads of one client, and waits for the lists
// of those beyond its share.
type waiter struct {
	c     redis.UniversalClient
	share int // blockingShare(c)

	mu      sync.Mutex
	nodes   map[string]chan struct{} // node ("" but for a Cluster) → a token per blocking read in flight
	waits   map[string][]chan string // list → the waits for its first entry
	running bool                     // whether the polling goroutine runs
}

// block takes a slot for a blocking read of list if one is free on the
// node that holds it, and returns the function that gives it back; ok is
// false if none is free.
func (w *waiter) block(ctx context.Context, list string) (release func(), ok bool) {
	slots := w.slots(ctx, list)
	select {
	case slots <- struct{}{}:
		return func() { <-slots }, true
	default:
		return nil, false
	}
}

// slots returns the tokens of the node that holds list: a Cluster's
// master for its slot, as the client's map of slots says (no call to
// Redis); the one set of every other client's, or of a Cluster whose map
// is not known.
func (w *waiter) slots(ctx context.Context, list string) chan struct{} {
	node := ""
	if cc, ok := w.c.(*redis.ClusterClient); ok {
		if n, err := cc.MasterForKey(ctx, list); err == nil {
			node = n.Options().Addr
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	s, ok := w.nodes[node]
	if !ok {
		s = make(chan struct{}, w.share)
		w.nodes[node] = s
	}
	return s
}

// first waits until list holds an entry, or timeout passes, and returns its
// first entry without removing it ("" at the timeout), as a BLMOVE of the
// list onto itself would: a blocking read if the client's share allows
// one, else a wait on the waiter's polling.
func (w *waiter) first(ctx context.Context, list string, timeout time.Duration) (string, error) {
	if release, ok := w.block(ctx, list); ok {
		defer release()
		e, err := w.c.BLMove(ctx, list, list, "LEFT", "LEFT", blocking(timeout)).Result()
		if errors.Is(err, redis.Nil) {
			return "", nil
		}
		return e, err
	}
	return w.poll(ctx, list, timeout)
}

// poll is first by the waiter's polling.
func (w *waiter) poll(ctx context.Context, list string, timeout time.Duration) (string, error) {
	ch := make(chan string, 1)
	w.mu.Lock()
	w.waits[list] = append(w.waits[list], ch)
	if !w.running {
		w.running = true
		go w.run()
	}
	w.mu.Unlock()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case e := <-ch:
		return e, nil
	case <-t.C:
	case <-ctx.Done():
	}
	w.mu.Lock()
	w.drop(list, ch)
	w.mu.Unlock()
	select {
	case e := <-ch: // handed out as the wait ended
		return e, nil
	default:
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	return "", nil
}

// drop removes the wait ch on list; the caller holds mu.
func (w *waiter) drop(list string, ch chan string) {
	chs := w.waits[list]
	for i, c := range chs {
		if c == ch {
			chs = append(chs[:i], chs[i+1:]...)
			break
		}
	}
	if len(chs) == 0 {
		delete(w.waits, list)
	} else {
		w.waits[list] = chs
	}
}

// run reads the first entry of every list waited on, each waiterTick, until
// none is; it hands each entry found to the list's waits. A failed read is
// tried again at the next tick: the waits end at their timeouts, and their
// callers' next calls meet the failure themselves.
func (w *waiter) run() {
	tick := time.NewTicker(waiterTick)
	defer tick.Stop()
	for range tick.C {
		w.mu.Lock()
		if len(w.waits) == 0 {
			w.running = false
			w.mu.Unlock()
			return
		}
		lists := make([]string, 0, len(w.waits))
		for l := range w.waits {
			lists = append(lists, l)
		}
		w.mu.Unlock()

		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		cmds := make([]*redis.StringCmd, len(lists))
		_, _ = w.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, l := range lists {
				cmds[i] = p.LIndex(ctx, l, 0)
			}
			return nil
		})
		cancel()

		w.mu.Lock()
		for i, l := range lists {
			e, err := cmds[i].Result()
			if err != nil {
				continue // redis.Nil: empty; else the next tick tries again
			}
			for _, ch := range w.waits[l] {
				ch <- e
			}
			delete(w.waits, l)
		}
		w.mu.Unlock()
	}
}
