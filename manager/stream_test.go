package manager_test

import (
	"context"
	"errors"
	"iter"
	"sync/atomic"
	"testing"

	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// count yields 0, 1, ... n-1, counting how many were pulled; stopped, if
// not nil, is set when the sequence returns.
func count(n int, pulled *atomic.Int64, stopped ...*atomic.Bool) iter.Seq[int] {
	return func(yield func(int) bool) {
		for _, s := range stopped {
			defer s.Store(true)
		}
		for i := range n {
			pulled.Add(1)
			if !yield(i) {
				return
			}
		}
	}
}

// A sequence streams through: every element's result comes once, in
// completion order or, with Ordered, in input order.
func TestSubmitSeq(t *testing.T) {
	b := setup(t)
	b.Worker(t, worker.Options{Concurrency: 2}, square, sum)
	b.Worker(t, worker.Options{Concurrency: 2}, square, sum)
	m := b.Manager(t, manager.Options{})
	const n = 30_000
	for _, ordered := range []bool{false, true} {
		var pulled atomic.Int64
		batch, err := manager.SubmitSeq(testCtx(t), m, square, count(n, &pulled), manager.ChunkSize(50))
		if err != nil {
			t.Fatal(err)
		}
		results := batch.Results()
		if ordered {
			results = batch.Ordered()
		}
		seen := make([]bool, n)
		i := 0
		for r := range results {
			if r.Err != nil || r.Value != r.Index*r.Index || seen[r.Index] {
				t.Fatalf("result %+v (seen before: %v)", r, seen[r.Index])
			}
			if ordered && r.Index != i {
				t.Fatalf("ordered: result %d came %d-th", r.Index, i)
			}
			seen[r.Index] = true
			i++
		}
		if i != n || batch.Len() != n || pulled.Load() != n {
			t.Fatalf("%d results, Len %d, %d pulled; want %d", i, batch.Len(), pulled.Load(), n)
		}
		if _, err := batch.Wait(testCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
	// And folded.
	var pulled atomic.Int64
	got, err := manager.MapReduceSeq(testCtx(t), m, square, sum, count(n, &pulled))
	if err != nil || got != sumOfSquares(n) {
		t.Fatalf("MapReduceSeq: %d, %v; want %d", got, err, sumOfSquares(n))
	}
	// An empty sequence ends at once.
	got, err = manager.MapReduceSeq(testCtx(t), m, square, sum, count(0, &pulled))
	if err != nil || got != 0 {
		t.Fatalf("MapReduceSeq of nothing: %d, %v", got, err)
	}
}

// Breaking out of the loop stops reading the sequence and removes the
// batch's tasks from Redis.
func TestSubmitSeqBreak(t *testing.T) {
	b := setup(t)
	b.Worker(t, worker.Options{Concurrency: 2}, slowSquare)
	m := b.Manager(t, manager.Options{})
	var pulled atomic.Int64
	var stopped atomic.Bool
	batch, err := manager.SubmitSeq(testCtx(t), m, slowSquare, count(1_000_000_000, &pulled, &stopped), manager.ChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}
	read := 0
	for range batch.Results() {
		if read++; read == 100 {
			break
		}
	}
	if _, err := batch.Wait(testCtx(t)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait after break: %v, want context.Canceled", err)
	}
	tasks := keys.Tasks("redmap", b.Queue, m.ID())
	eventually(t, "tasks withdrawn", func() bool { return b.Client.HLen(context.Background(), tasks).Val() == 2 })
	eventually(t, "the sequence stopped", stopped.Load)
	p := pulled.Load()
	if p > 5000 {
		t.Fatalf("%d elements read from the sequence for 100 results: the window is 4,096 tasks", p)
	}
	t.Logf("broke out after 100 results; %d elements were read from the sequence", p)
}

// Ending the context stops a stream as breaking out does.
func TestSubmitSeqContextEnds(t *testing.T) {
	b := setup(t)
	b.Worker(t, worker.Options{Concurrency: 2}, slowSquare)
	m := b.Manager(t, manager.Options{})
	var pulled atomic.Int64
	var stopped atomic.Bool
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	batch, err := manager.SubmitSeq(ctx, m, slowSquare, count(1_000_000_000, &pulled, &stopped), manager.ChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}
	read := 0
	for range batch.Results() {
		if read++; read == 50 {
			cancel()
		}
	}
	if _, err := batch.Wait(testCtx(t)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait after cancel: %v, want context.Canceled", err)
	}
	eventually(t, "the sequence stopped", stopped.Load)
	tasks := keys.Tasks("redmap", b.Queue, m.ID())
	eventually(t, "tasks withdrawn", func() bool { return b.Client.HLen(context.Background(), tasks).Val() == 2 })
}
