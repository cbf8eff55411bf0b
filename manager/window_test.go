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
// The sizes come from measured time, so the bound is loose enough for a
// loaded machine under -race: once the cost is known, a batch of 100,000
// squares goes in at most 1,000 tasks (100 elements a task or more), where
// tasks cut blind (chunkUnknown, 8 elements) would be 12,500. The first
// batch, which learns the cost, is not compared: it cuts its rest as soon
// as one task has reported.
func TestChunksAdapt(t *testing.T) {
	b := setup(t)
	w := b.Worker(t, worker.Options{Concurrency: 2}, square)
	m := b.Manager(t, manager.Options{})
	ctx := testCtx(t)
	for i := range 3 {
		before := w.Stats().Taken
		if _, err := manager.Map(ctx, m, square, ints(100_000)); err != nil {
			t.Fatal(err)
		}
		n := w.Stats().Taken - before
		t.Logf("batch %d: 100,000 tiny elements in %d tasks", i+1, n)
		if i > 0 && n > 1_000 {
			t.Fatalf("batch %d: 100,000 tiny elements took %d tasks once their cost was known, want at most 1,000", i+1, n)
		}
	}
}

// A new manager's first batch of a function of unknown cost is not cut
// blind: a few tasks measure the cost, and the rest is cut to it (30,000
// tiny elements were 3,750 tasks of 8).
func TestFirstBatchMeasuresItsCost(t *testing.T) {
	b := setup(t)
	w := b.Worker(t, worker.Options{Concurrency: 2}, square)
	m := b.Manager(t, manager.Options{})
	ys, err := manager.Map(testCtx(t), m, square, ints(30_000))
	if err != nil || ys[29_999] != 29_999*29_999 {
		t.Fatalf("Map: %v", err)
	}
	// 4 tasks of 8 measure; then 16 or so of about 1,900 (the spread). On
	// a loaded machine a first task of 8 can measure 20 µs an element, its
	// fixed cost, and the rest is cut to about 200 (132 tasks in a CI run);
	// cut blind, it would be 3,750.
	if n := w.Stats().Taken; n > 400 {
		t.Fatalf("30,000 tiny elements took %d tasks, want at most 400 (blind: 3,750)", n)
	}
}
