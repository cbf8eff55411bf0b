package manager_test

import (
	"context"
	"testing"

	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// A durable batch without ChunkSize is cut by its function's cost, and a
// call that takes it over cuts the same chunks whatever its own manager has
// learnt: the first call's cut plan is in Redis with the batch. Each way
// round, a takeover cut by its own knowledge alone would cut other chunks
// and be refused with ErrDurableMismatch.
func TestDurableCutByCostTakeOver(t *testing.T) {
	for _, learnt := range []string{"first", "second"} {
		t.Run("learnt by the "+learnt, func(t *testing.T) {
			b := setup(t)
			w := b.Worker(t, worker.Options{Concurrency: 4}, durableSquare)
			newManager := func() *manager.Manager {
				m, err := manager.New(b.Client, manager.Options{Queue: b.Queue, Shards: redistest.Shards()})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { m.Close() })
				return m
			}
			m1, m2 := newManager(), newManager()
			learner := map[string]*manager.Manager{"first": m1, "second": m2}[learnt]
			if _, err := manager.Map(testCtx(t), learner, durableSquare, span(64)); err != nil {
				t.Fatal(err)
			}
			xs := span(3000)
			name := "cut-" + learnt
			ctx, cancel := context.WithCancel(testCtx(t))
			defer cancel()
			before := w.Stats().Taken
			batch, err := manager.Submit(ctx, m1, durableSquare, xs, manager.Durable(name))
			if err != nil {
				t.Fatal(err)
			}
			interrupt(t, batch, cancel, 300)
			ys, err := manager.Map(testCtx(t), m2, durableSquare, xs, manager.Durable(name))
			if err != nil {
				t.Fatal(err)
			}
			checkSquaresOf(t, xs, ys)
			if more, never := durableRuns.again(xs); more != 0 || never != 0 {
				t.Fatalf("%d elements ran more than once, %d never; want 0 and 0", more, never)
			}
			t.Logf("3,000 elements of 2 ms in %d tasks", w.Stats().Taken-before)
		})
	}
}
