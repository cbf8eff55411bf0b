package manager_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// A batch of more tasks than the window streams through Redis: the task set
// never holds more than the window, and every element comes back.
func TestBatchStreamsThroughWindow(t *testing.T) {
	b := setup(t)
	var maxQueued atomic.Int64
	b.Worker(t, worker.Options{Concurrency: 4}, square)
	m := b.Manager(t, manager.Options{})
	ctx := testCtx(t)
	taskSet := keys.Tasks("redmap", b.Queue, m.ID())
	batch, err := manager.Submit(ctx, m, square, ints(20_000), manager.ChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}
	exactlyOnce(t, batch, sq, func(seen int) {
		if seen%500 == 0 {
			n := b.Client.HLen(context.Background(), taskSet).Val() - 2 // the count and the epoch
			if n > maxQueued.Load() {
				maxQueued.Store(n)
			}
		}
	})
	t.Logf("at most %d of 20,000 tasks in Redis at once", maxQueued.Load())
	if got := maxQueued.Load(); got > 4096 || got == 0 {
		t.Fatalf("saw up to %d tasks in Redis, want between 1 and the window (4096)", got)
	}
}

// An element too large in a later window fails alone; Submit could not see it.
func TestLateElementTooLarge(t *testing.T) {
	b := setup(t)
	b.Worker(t, worker.Options{Concurrency: 4}, echo)
	m := b.Manager(t, manager.Options{MaxInputSize: 100})
	xs := make([]string, 10_000)
	for i := range xs {
		xs[i] = fmt.Sprint(i)
	}
	xs[9000] = strings.Repeat("x", 200) // past the first window of 4,096 tasks of 1
	ys, err := manager.Map(testCtx(t), m, echo, xs, manager.ChunkSize(1))
	var be *redmap.BatchError
	if !errors.As(err, &be) || fmt.Sprint(be.Indexes()) != "[9000]" || !errors.Is(err, redmap.ErrTooLarge) {
		t.Fatalf("got %v, want element 9000 failing with ErrTooLarge", err)
	}
	if ys[8999] != "8999" || ys[9001] != "9001" {
		t.Fatalf("neighbours: %q %q", ys[8999], ys[9001])
	}
}

// Chunks adapt to the function's cost: tiny elements travel many to a task.
// The sizes come from measured time, so the test compares the batches with
// each other rather than with a count this machine's speed would set: once
// the cost is known, a batch takes at most half the tasks of the first (the
// one that learned it, which starts with tasks of a few elements) and at
// least ten elements a task on average.
func TestChunksAdapt(t *testing.T) {
	b := setup(t)
	w := b.Worker(t, worker.Options{Concurrency: 2}, square)
	m := b.Manager(t, manager.Options{})
	ctx := testCtx(t)
	var first int64
	// The first batch measures the cost; the second uses it.
	for i := range 2 {
		before := w.Stats().Taken
		if _, err := manager.Map(ctx, m, square, ints(100_000)); err != nil {
			t.Fatal(err)
		}
		n := w.Stats().Taken - before
		if i == 0 {
			first = n
		}
		t.Logf("100,000 tiny elements in %d tasks", n)
	}
	before := w.Stats().Taken
	if _, err := manager.Map(ctx, m, square, ints(100_000)); err != nil {
		t.Fatal(err)
	}
	if n := w.Stats().Taken - before; n > first/2 || n > 10_000 {
		t.Fatalf("100,000 tiny elements took %d tasks once their cost was known (the first batch %d), want at most half the first's and 10,000", n, first)
	}
}
