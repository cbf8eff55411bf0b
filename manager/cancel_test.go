package manager_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// Cancelling Map returns at once with the context's error, while a task still
// runs; the batch's queued tasks are then skipped, not run, and the manager's
// keys are removed.
func TestCancelSkipsQueuedTasks(t *testing.T) {
	b := setup(t)
	started := make(chan int, 64)
	release := make(chan struct{})
	var runs atomic.Int64
	slow := redmap.Func("slow", func(_ context.Context, x int) (int, error) {
		runs.Add(1)
		started <- x
		<-release
		return x, nil
	})
	// No prefetch: the tasks stay queued, and the worker's next take drops
	// them. (Prefetched tasks are checked before they run: see the worker's
	// TestPrefetchedCancelledTasksAreSkipped.)
	w := b.Worker(t, worker.Options{Concurrency: 1, Prefetch: -1}, slow)
	var releaseOnce sync.Once
	// If the test fails before releasing the task, release it before the
	// worker's clean-up waits for it.
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	// One shard: the test watches the task set and lists of shard 0.
	m := b.Manager(t, manager.Options{Shards: 1})

	ctx, cancel := context.WithCancel(testCtx(t))
	errc := make(chan error, 1)
	go func() {
		_, err := manager.Map(ctx, m, slow, ints(50), manager.ChunkSize(1))
		errc <- err
	}()
	<-started
	cancel()
	// The running task is still blocked, so Map returning proves it did not
	// wait for it.
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Map after cancel: got %v, want context.Canceled", err)
	}

	bg := context.Background()
	tasks := keys.Tasks("redmap", b.Queue, m.ID())
	eventually(t, "tasks withdrawn", func() bool { return b.Client.HLen(bg, tasks).Val() == 2 }) // the count and the epoch
	releaseOnce.Do(func() { close(release) })

	held := keys.Held("redmap", b.Queue, w.ID())
	eventually(t, "queue drained and nothing held", func() bool {
		return len(harness.Queued(t, b.Client, b.Queue)) == 0 && b.Client.SCard(bg, held).Val() == 0
	})
	if n := runs.Load(); n != 1 {
		t.Fatalf("the function ran %d times, want 1: cancelled tasks must be skipped", n)
	}
	// No task or result of the batch is left: the task set holds just the
	// manager's count and epoch, and the running task's result was discarded.
	if got := b.Client.HKeys(bg, tasks).Val(); len(got) != 2 || !slices.Contains(got, "_") || !slices.Contains(got, "_e") {
		t.Errorf("task set holds %v after cancel", got)
	}
	if n := b.Client.LLen(bg, keys.Results("redmap", b.Queue, m.ID())).Val(); n != 0 {
		t.Errorf("result list holds %d entries after cancel", n)
	}
	// Close removes the rest.
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	left, err := b.Client.Keys(bg, keys.Base("redmap", b.Queue)+"m:*").Result()
	if err != nil || len(left) != 0 {
		t.Errorf("manager keys left after Close: %v, %v", left, err)
	}
}

func TestBatchCancel(t *testing.T) {
	b := setup(t)
	m := b.Manager(t, manager.Options{})
	batch, err := manager.Submit(testCtx(t), m, square, ints(10)) // no worker: it stays queued
	if err != nil {
		t.Fatal(err)
	}
	batch.Cancel()
	if _, err := batch.Wait(testCtx(t)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait after Cancel: got %v, want context.Canceled", err)
	}
	n := 0
	for range batch.Results() {
		n++
	}
	if n != 0 {
		t.Fatalf("Results after Cancel yielded %d, want 0", n)
	}
	tasks := keys.Tasks("redmap", b.Queue, m.ID())
	eventually(t, "tasks withdrawn", func() bool { return b.Client.HLen(context.Background(), tasks).Val() == 2 }) // the count and the epoch
}

func TestCloseEndsBatches(t *testing.T) {
	b := setup(t)
	m, err := manager.New(b.Client, manager.Options{Queue: b.Queue})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := manager.Submit(testCtx(t), m, square, ints(10))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Close took %v", time.Since(start))
	if _, err := batch.Wait(testCtx(t)); !errors.Is(err, redmap.ErrClosed) {
		t.Fatalf("Wait after Close: got %v, want ErrClosed", err)
	}
	if _, err := manager.Map(testCtx(t), m, square, ints(1)); !errors.Is(err, redmap.ErrClosed) {
		t.Fatalf("Map after Close: got %v, want ErrClosed", err)
	}
	if left := b.Keys(t, keys.Base("redmap", b.Queue)+"m:*"); len(left) != 0 {
		t.Fatalf("manager keys after Close: %v", left)
	}
}

// Cancelling a batch cancels the context of its running tasks within about
// one heartbeat, not only its queued ones.
func TestCancelReachesRunningTasks(t *testing.T) {
	b := setup(t)
	started := make(chan struct{}, 8)
	stopped := make(chan error, 8)
	blocking := redmap.Func("blocking", func(ctx context.Context, x int) (int, error) {
		started <- struct{}{}
		<-ctx.Done()
		stopped <- ctx.Err()
		return 0, ctx.Err()
	})
	b.Worker(t, worker.Options{Concurrency: 2, Heartbeat: 100 * time.Millisecond, Lease: time.Second}, blocking)
	m := b.Manager(t, manager.Options{})
	batch, err := manager.Submit(testCtx(t), m, blocking, ints(2), manager.ChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}
	<-started
	<-started
	cancelled := time.Now()
	batch.Cancel()
	for range 2 {
		select {
		case err := <-stopped:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("task context ended with %v, want context.Canceled", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a running task's context was not cancelled within 10s")
		}
	}
	t.Logf("running tasks cancelled %v after the batch", time.Since(cancelled).Round(time.Millisecond))
}

// A per-task timeout ends the function's context; the element fails with
// ErrTimeout after its attempts, and the others complete.
func TestTaskTimeout(t *testing.T) {
	b := setup(t)
	var runs atomic.Int64
	sleepy := redmap.Func("sleepy", func(ctx context.Context, x int) (int, error) {
		if x != 3 {
			return x, nil
		}
		runs.Add(1)
		<-ctx.Done()
		return 0, ctx.Err()
	})
	// A minute's grace: the function honours its context, and a starved
	// machine once took over the default second to let it return, so its
	// run was abandoned (not retried) rather than timed out.
	b.Worker(t, worker.Options{Concurrency: 2, AbandonGrace: time.Minute}, sleepy)
	m := b.Manager(t, manager.Options{})
	ys, err := manager.Map(testCtx(t), m, sleepy, ints(6), manager.Timeout(50*time.Millisecond), manager.Attempts(2))
	var be *redmap.BatchError
	if !errors.As(err, &be) || len(be.Failed) != 1 || be.Failed[0].Index != 3 || !errors.Is(err, redmap.ErrTimeout) {
		t.Fatalf("got %v, want element 3 failing with ErrTimeout", err)
	}
	if ys[5] != 5 || runs.Load() != 2 {
		t.Fatalf("ys %v; the slow element ran %d times, want 2 (its attempt budget)", ys, runs.Load())
	}
}
