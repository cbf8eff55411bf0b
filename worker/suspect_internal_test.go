package worker

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/internal/wire"
	"github.com/redmap/redmap/manager"
)

// The schedule that cost an innocent task its attempts beside a poison pill
// (TestFaultPoisonPill failed about once in 30-60 runs), made deterministic
// with hooks. Two suspects are at the front of the queue: X, an innocent
// task lost once beside the pill, and P, the pill. A worker of concurrency 2
// takes X alone and runs it; its result then waits in the finisher, as
// results do for a moment. Formerly the worker took P as soon as X had run,
// and P ran "alone" while X's result was still unreported: P killed the
// worker, and X was lost again, as often as the two met. Here the report of
// X is held back for as long as the worker allows — until P starts, or until
// the worker waits for X's report before it takes more — and when P starts,
// the worker's held set in Redis must hold P alone.
func TestSuspectRunsWithNothingElseHeld(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := srv.Client(t)
	queue := redistest.Queue(t)
	ctx := context.Background()

	release := make(chan struct{})
	fn := redmap.Func("suspects", func(_ context.Context, x int) (int, error) {
		if x == 1 { // P: it would kill the worker; here it waits
			<-release
		}
		return -x, nil
	})
	m, err := manager.New(c, manager.Options{Queue: queue})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	w, err := New(c, Options{Queue: queue, Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(fn); err != nil {
		t.Fatal(err)
	}
	batch, err := manager.Submit(ctx, m, fn, []int{0, 1}, manager.ChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}
	ids := c.LRange(ctx, keys.Lane("redmap", queue, m.ID()+".1"), 0, -1).Val() // the batch is the manager's first
	if len(ids) != 2 {
		t.Fatalf("the queue holds %v, want 2 tasks", ids)
	}
	x, p := ids[0], ids[1]
	for _, tid := range ids {
		c.HSet(ctx, keys.Attempts("redmap", queue, m.ID()), tid, 1) // both lost once
	}

	var (
		mu        sync.Mutex
		emptying  = make(chan struct{}) // the fetcher waits for the worker to hold nothing
		emptyOnce sync.Once
		pStarted  = make(chan struct{})
		heldAtP   []string
	)
	w.hooks.emptying = func() { emptyOnce.Do(func() { close(emptying) }) }
	w.hooks.finish = func(done []wire.Done) {
		for _, d := range done {
			if d.ID == x {
				select { // hold X's report back as long as the worker allows
				case <-emptying:
				case <-pStarted:
				}
			}
		}
	}
	w.hooks.suspect = func(tk wire.Taken) {
		if tk.ID != p {
			return
		}
		mu.Lock()
		heldAtP = c.SMembers(ctx, keys.Held("redmap", queue, w.ID())).Val()
		mu.Unlock()
		close(pStarted)
	}

	wctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(wctx) }()
	<-pStarted
	mu.Lock()
	got := heldAtP
	mu.Unlock()
	close(release)
	ys, err := batch.Wait(ctx)
	stop()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{p}) {
		t.Fatalf("when the suspect %s started, the worker held %v in Redis; want it alone", p, got)
	}
	if err != nil || ys[0] != 0 || ys[1] != -1 {
		t.Fatalf("batch: %v, %v", ys, err)
	}
}
