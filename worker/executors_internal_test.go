package worker

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
)

// A prefetched task whose batch was cancelled while it waited is not run:
// the executor checks it is still wanted before starting it (a task that
// waited over staleAfter, as these do: behind the first, which runs until
// the test releases it, after the cancel and past staleAfter).
func TestPrefetchedCancelledTasksAreSkipped(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := srv.Client(t)
	queue := redistest.Queue(t)

	started := make(chan int, 64)
	release := make(chan struct{})
	var runs atomic.Int64
	gate := redmap.Func("gate", func(_ context.Context, x int) (int, error) {
		runs.Add(1)
		started <- x
		<-release
		return x, nil
	})
	w, err := New(c, Options{Queue: queue, Concurrency: 1, Prefetch: 16})
	if err != nil {
		t.Fatal(err)
	}
	// The worker knows its tasks to be short, and so prefetches up to
	// Prefetch. (It learnt that from a Map of quick tasks before, which
	// on a loaded machine could take over 1 ms each: then it prefetched
	// fewer than the test waits for.)
	w.taskTimes.observe(0)
	if err := w.Register(gate); err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(wctx) }()
	m, err := manager.New(c, manager.Options{Queue: queue})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bctx, cancelBatch := context.WithCancel(ctx)
	batch, err := manager.Submit(bctx, m, gate, make([]int, 10), manager.ChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}
	<-started
	// The worker holds the running task and prefetched the rest (all 10 fit
	// in Concurrency + Prefetch).
	held := keys.Held("redmap", queue, w.ID())
	redistest.Eventually(t, "tasks prefetched", func() bool { return c.SCard(ctx, held).Val() == 10 })
	cancelBatch()
	if _, err := batch.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait after cancel: %v, want context.Canceled", err)
	}
	tasks := keys.Tasks("redmap", queue, m.ID())
	redistest.Eventually(t, "tasks withdrawn", func() bool { return c.HLen(ctx, tasks).Val() == 2 }) // the count and the epoch
	withdrawn := time.Now()
	// The executors check a task that waited past staleAfter (one that
	// waited less runs unchecked: tiny tasks, where a check would cost more
	// than the run), on an answer no older than recheckAfter: one asked
	// before the cancel (a job that waited on a loaded machine asks about
	// all waiting) must have aged past it. On a fast machine all the above
	// can take less, so the test lets the clock pass both: a condition on
	// time itself, not a wait for another goroutine.
	time.Sleep(time.Until(withdrawn.Add(recheckAfter + staleAfter)))
	close(release)
	redistest.Eventually(t, "prefetched tasks skipped and given up", func() bool { return c.SCard(ctx, held).Val() == 0 })
	if n := runs.Load(); n != 1 {
		t.Fatalf("the function ran %d times, want 1: prefetched tasks of a cancelled batch must be skipped", n)
	}
	if d := w.Stats().Discarded; d != 10 {
		t.Errorf("discarded %d, want 10 (9 skipped unrun, 1 result of a cancelled task)", d)
	}
	stop()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
}

// A task is failed as lost after its budget of lost runs, but never before
// it ran alone once as a suspect, unless its budget is 1 (or 0: no limit).
func TestLostBudget(t *testing.T) {
	for n, want := range map[int]int{0: 0, 1: 1, 2: wire.SuspectAfter + 1, 3: 3, 5: 5} {
		if got := lostBudget(n); got != want {
			t.Errorf("lostBudget(%d) = %d, want %d", n, got, want)
		}
	}
}
