package manager_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
)

// TestChaos runs for REDMAP_CHAOS (a duration, for example 2m; skipped when
// unset): three managers submit batch after batch to four worker processes,
// while worker processes are SIGKILLed at random (and restarted) and Redis
// is restarted empty every 15 s. It reports the elements completed, lost and
// duplicated; the last two must be 0. Run it with `make chaos`.
func TestChaos(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("REDMAP_CHAOS"))
	if err != nil {
		t.Skip("set REDMAP_CHAOS to a duration (make chaos) to run")
	}
	srv := redistest.Start(t)
	b := &bundle{srv: srv, rdb: srv.Client(t), queue: "chaos"}
	env := childEnv(b, "REDMAP_CONCURRENCY=4")
	var mu sync.Mutex
	var children []*child
	started, stopFleet := superviseWith(t, 4, env, func(c *child) {
		mu.Lock()
		children = append(children, c)
		mu.Unlock()
	})
	defer stopFleet()

	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var kills, restarts atomic.Int64
	var chaos sync.WaitGroup
	chaos.Add(2)
	go func() { // kill a random worker every 0.2-1 s
		defer chaos.Done()
		for ctx.Err() == nil {
			time.Sleep(time.Duration(200+rand.IntN(800)) * time.Millisecond)
			mu.Lock()
			if len(children) > 0 {
				i := rand.IntN(len(children))
				children[i].cmd.Process.Signal(syscall.SIGKILL)
				children = append(children[:i], children[i+1:]...)
				kills.Add(1)
			}
			mu.Unlock()
		}
	}()
	go func() { // restart Redis, empty, every 15 s
		defer chaos.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(15 * time.Second):
			}
			srv.Kill(t)
			srv.Restart(t)
			restarts.Add(1)
		}
	}()

	var completed, lost, duplicated, failed, batches atomic.Int64
	var managers sync.WaitGroup
	for range 3 {
		managers.Add(1)
		go func() {
			defer managers.Done()
			c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			defer c.Close()
			m, err := manager.New(c, manager.Options{Queue: b.queue, Poll: 200 * time.Millisecond})
			if err != nil {
				t.Error(err)
				return
			}
			defer m.Close()
			for ctx.Err() == nil {
				n := 500 + rand.IntN(3000)
				bctx, bcancel := context.WithTimeout(context.Background(), 3*time.Minute)
				batch, err := manager.Submit(bctx, m, slowSquare, ints(n), manager.ChunkSize(1+rand.IntN(20)), manager.Attempts(20))
				if err != nil {
					bcancel()
					if errors.Is(err, redmap.ErrUnavailable) { // Redis is restarting
						time.Sleep(100 * time.Millisecond)
						continue
					}
					t.Errorf("submit: %v", err)
					return
				}
				seen := make([]int, n)
				for r := range batch.Results() {
					seen[r.Index]++
					switch {
					case r.Err != nil && errors.Is(r.Err, redmap.ErrLost):
						lost.Add(1)
					case r.Err != nil || r.Value != r.Index*r.Index:
						failed.Add(1)
						t.Errorf("element %d: %d, %v", r.Index, r.Value, r.Err)
					}
				}
				if _, err := batch.Wait(bctx); err != nil && !errors.As(err, new(*redmap.BatchError)) {
					t.Errorf("batch of %d ended with %v", n, err)
				}
				bcancel()
				for _, k := range seen {
					switch {
					case k == 1:
						completed.Add(1)
					case k == 0:
						lost.Add(1)
					default:
						duplicated.Add(int64(k - 1))
					}
				}
				batches.Add(1)
			}
		}()
	}
	managers.Wait()
	cancel()
	chaos.Wait()
	t.Logf("chaos for %v: %d batches, %d elements completed, %d lost, %d duplicated, %d wrong; %d workers killed (%d started), Redis restarted empty %d times",
		d, batches.Load(), completed.Load(), lost.Load(), duplicated.Load(), failed.Load(), kills.Load(), started(), restarts.Load())
	if lost.Load() != 0 || duplicated.Load() != 0 || failed.Load() != 0 {
		t.Fatal("elements lost, duplicated or wrong")
	}
}
