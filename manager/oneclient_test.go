package manager_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// Many managers, one client: 200 managers in one process share one go-redis
// client (its default pool, 10 connections a core), as a web service making
// a manager per request would, each running 5 Maps of 10 elements at once
// with the others. Every Map succeeds: the managers' waits for results do
// not take the pool from their other calls, and a wait for a pooled
// connection is not taken for Redis being gone.
func TestManyManagersOneClient(t *testing.T) {
	srv := redistest.Start(t)
	b := faultBundle(t, srv, srv.Addr())
	shared := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { shared.Close() })
	b.Worker(t, worker.Options{Concurrency: 8}, square)

	const managers, maps, n = 200, 5, 10
	ms := make([]*manager.Manager, managers)
	for i := range ms {
		m, err := manager.New(shared, manager.Options{Queue: b.Queue})
		if err != nil {
			t.Fatal(err)
		}
		ms[i] = m
	}
	t.Cleanup(func() {
		for _, m := range ms {
			if err := m.Close(); err != nil {
				t.Errorf("manager close: %v", err)
			}
		}
	})

	// A generous bound on "ended at all": a stalled Map fails with the
	// context's error, and is counted, rather than hang the test.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var (
		wg          sync.WaitGroup
		mu          sync.Mutex
		failed      []error
		unavailable atomic.Int64
		started     = time.Now()
		slowest     atomic.Int64 // ns, the longest Map
	)
	for i, m := range ms {
		wg.Go(func() {
			for j := range maps {
				xs := ints(n)
				for k := range xs {
					xs[k] += 100*i + 10*j
				}
				t0 := time.Now()
				ys, err := manager.Map(ctx, m, square, xs)
				if d := int64(time.Since(t0)); d > slowest.Load() {
					slowest.Store(d) // a log figure only: races lose a maximum, not a result
				}
				if err == nil {
					for k, y := range ys {
						if y != xs[k]*xs[k] {
							err = fmt.Errorf("element %d: %d, want %d", k, y, xs[k]*xs[k])
							break
						}
					}
				}
				if err != nil {
					if errors.Is(err, redmap.ErrUnavailable) {
						unavailable.Add(1)
					}
					mu.Lock()
					failed = append(failed, fmt.Errorf("manager %d, map %d: %w", i, j, err))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d managers × %d Maps of %d on one client (pool %d): %d failed (%d ErrUnavailable); all in %v, slowest Map %v",
		managers, maps, n, shared.Options().PoolSize, len(failed), unavailable.Load(),
		time.Since(started).Round(time.Millisecond), time.Duration(slowest.Load()).Round(time.Millisecond))
	if len(failed) > 0 {
		kinds := make(map[string]int) // the errors' last words: their causes
		for _, err := range failed {
			msg := err.Error()
			kinds[msg[max(0, len(msg)-60):]]++
		}
		for k, n := range kinds {
			t.Errorf("%4d× …%s", n, k)
		}
		t.Fatalf("%d of %d Maps failed", len(failed), managers*maps)
	}
}
