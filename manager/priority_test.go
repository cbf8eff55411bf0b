package manager_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// A batch of high priority submitted while a long batch of low priority
// runs finishes first: the worker takes it as soon as a slot frees, behind
// only the low tasks it already took.
func TestPriorityHighFinishesFirst(t *testing.T) {
	b := setup(t)
	var mu sync.Mutex
	var order []string // the function's runs, in order: "low" or "high"
	step := redmap.Func("step", func(_ context.Context, x int) (int, error) {
		time.Sleep(time.Millisecond) // work
		mu.Lock()
		if x < 0 {
			order = append(order, "high")
		} else {
			order = append(order, "low")
		}
		mu.Unlock()
		return x, nil
	})
	w := b.Worker(t, worker.Options{Concurrency: 1, Prefetch: 4}, step)
	// One shard: priority orders the lists of one shard. Over several, a
	// take of a shard the high batch's submit has not reached yet may bring
	// one more low task per shard (README, "Priorities").
	m := b.Manager(t, manager.Options{Shards: 1})
	low, err := manager.Submit(testCtx(t), m, step, ints(400), manager.ChunkSize(1), manager.Priority(manager.MinPriority))
	if err != nil {
		t.Fatal(err)
	}
	held := keys.Held("redmap", b.Queue, w.ID())
	eventually(t, "the low batch runs", func() bool { return b.Client.SCard(context.Background(), held).Val() > 0 })
	highIn := make([]int, 20)
	for i := range highIn {
		highIn[i] = -1 - i
	}
	ys, err := manager.Map(testCtx(t), m, step, highIn, manager.ChunkSize(1), manager.Priority(manager.MaxPriority))
	if err != nil || ys[19] != -20 {
		t.Fatalf("high batch: %v", err)
	}
	select {
	case <-low.Done():
		t.Fatal("the low batch finished before the high one")
	default:
	}
	if _, err := low.Wait(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	first := strings.Index(strings.Join(order, " "), "high")
	lowBefore := strings.Count(strings.Join(order, " ")[:first], "low")
	lastHigh := 0
	for i, s := range order {
		if s == "high" {
			lastHigh = i
		}
	}
	lowBetween := 0
	for _, s := range order[:lastHigh] {
		if s == "low" {
			lowBetween++
		}
	}
	t.Logf("runs: %d low before the first high; all 20 high done after %d low runs of 400", lowBefore, lowBetween)
	// Once the high batch is queued, the worker runs at most the low tasks
	// it held (1 running + 4 prefetched) before the high ones.
	if extra := lowBetween - lowBefore; extra > 5 {
		t.Fatalf("%d low tasks ran between the high ones", extra)
	}
}

// A priority out of range is refused.
func TestPriorityRange(t *testing.T) {
	b := setup(t)
	m := b.Manager(t, manager.Options{})
	for _, p := range []int{-1, 6} {
		if _, err := manager.Submit(testCtx(t), m, square, ints(1), manager.Priority(p)); err == nil || !strings.Contains(err.Error(), "Priority") {
			t.Errorf("Priority(%d): %v, want an error", p, err)
		}
	}
}
