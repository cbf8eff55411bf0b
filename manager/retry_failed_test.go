package manager_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// healed fails the multiples of 5 until it is mended, counting its runs.
var (
	mended       atomic.Bool
	healedRuns   = runCounts{runs: make(map[int]int)}
	healedSquare = redmap.Func("healedsq", func(_ context.Context, x int) (int, error) {
		healedRuns.add(x)
		if x%5 == 0 && !mended.Load() {
			return 0, fmt.Errorf("%d: service down", x)
		}
		return x * x, nil
	})
	// stuckSquare fails the multiples of 5 always.
	stuckSquare = redmap.Func("stucksq", func(_ context.Context, x int) (int, error) {
		if x%5 == 0 {
			return 0, fmt.Errorf("%d: service down", x)
		}
		return x * x, nil
	})
)

// A durable batch whose elements failed while no call held it is taken
// over with RetryFailed: only its failed elements run again, and the call
// returns every value; each element ends once.
func TestDurableRetryFailed(t *testing.T) {
	b := setup(t)
	in, m1 := watched(t, b, manager.Options{})
	xs := span(40)
	failing := 0
	for _, x := range xs {
		if x%5 == 0 {
			failing++
		}
	}
	if _, err := manager.Submit(testCtx(t), m1, healedSquare, xs, manager.Durable("healed"), manager.ChunkSize(1)); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, "the batch listed running", func() bool {
		bt, ok := batchOf(t, in, b.Queue, "healed")
		return ok && bt.Outcome == "running" && bt.Total == len(xs)
	})
	if err := m1.Close(); err != nil { // the batch waits in Redis, orphaned
		t.Fatal(err)
	}
	b.Worker(t, worker.Options{Concurrency: 4}, healedSquare)
	redistest.Eventually(t, "the orphan's tasks all done, some failed", func() bool {
		bt, ok := batchOf(t, in, b.Queue, "healed")
		return ok && bt.Outcome == "done"
	})
	if more, never := healedRuns.again(xs); more != 0 || never != 0 {
		t.Fatalf("before the retry: %d elements ran more than once, %d never", more, never)
	}
	mended.Store(true)
	m2 := b.Manager(t, manager.Options{})
	ys, err := manager.Map(testCtx(t), m2, healedSquare, xs, manager.Durable("healed"), manager.ChunkSize(1), manager.RetryFailed())
	if err != nil {
		t.Fatalf("the retry: %v; want every value", err)
	}
	checkSquaresOf(t, xs, ys)
	healedRuns.mu.Lock()
	defer healedRuns.mu.Unlock()
	again := 0
	for _, x := range xs {
		want := 1
		if x%5 == 0 {
			want = 2
		}
		if n := healedRuns.runs[x]; n != want {
			t.Errorf("element %d ran %d times, want %d", x, n, want)
		}
		if healedRuns.runs[x] > 1 {
			again++
		}
	}
	if again != failing || failing == 0 {
		t.Fatalf("%d elements ran again, want the %d that failed", again, failing)
	}
}

// Without RetryFailed, the call that takes the batch over returns the
// failures it finds, as before, with the worker that failed them.
func TestDurableFailuresFoundWithoutRetry(t *testing.T) {
	b := setup(t)
	in, m1 := watched(t, b, manager.Options{})
	xs := []int{5, 4}
	if _, err := manager.Submit(testCtx(t), m1, stuckSquare, xs, manager.Durable("unhealed"), manager.ChunkSize(1)); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, "the batch listed running", func() bool {
		bt, ok := batchOf(t, in, b.Queue, "unhealed")
		return ok && bt.Outcome == "running" && bt.Total == 2
	})
	if err := m1.Close(); err != nil {
		t.Fatal(err)
	}
	b.Worker(t, worker.Options{Concurrency: 2}, stuckSquare)
	redistest.Eventually(t, "the orphan's tasks all done", func() bool {
		bt, ok := batchOf(t, in, b.Queue, "unhealed")
		return ok && bt.Outcome == "done"
	})
	m2 := b.Manager(t, manager.Options{})
	ys, err := manager.Map(testCtx(t), m2, stuckSquare, xs, manager.Durable("unhealed"), manager.ChunkSize(1))
	var be *redmap.BatchError
	if !errors.As(err, &be) || len(be.Failed) != 1 || be.Failed[0].Index != 0 || ys[1] != 16 || be.Failed[0].Worker == "" {
		t.Fatalf("the takeover without RetryFailed: %v, %v; want element 0 failed by a worker, 16", ys, err)
	}
}
