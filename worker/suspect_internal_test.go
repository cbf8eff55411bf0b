package worker

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/cache"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/redisbroker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/memo"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
)

// The schedule that cost an innocent task its attempts beside a poison pill
// (TestFaultPoisonPill failed about once in 30-60 runs), made deterministic
// in the worker's seam: the test wraps the worker's Redis. Two suspects are
// at the front of the queue: X, an innocent task lost beside the pill,
// and P, the pill. A worker of concurrency 2 takes X alone and runs it; its
// result then waits to be reported, as results do for a moment. Formerly
// the worker took P as soon as X had run, and P ran "alone" while X's
// result was still unreported: P killed the worker, and X was lost again,
// as often as the two met. Here the seam holds X's report back for as long
// as the worker allows — until P starts, or until a take of the worker's
// brought it a suspect or left one waiting (then it waits to hold nothing
// before it takes more) — and P's function, as it starts, reads the
// worker's held set in Redis: it must hold P alone.
func TestSuspectRunsWithNothingElseHeld(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := srv.Client(t)
	queue := redistest.Queue(t)
	ctx := context.Background()

	var (
		release  = make(chan struct{})
		pStarted = make(chan struct{})
		heldAtP  []string
		w        *Worker
	)
	fn := redmap.Func("suspects", func(_ context.Context, x int) (int, error) {
		if x == 1 { // P: it would kill the worker; here it waits
			heldAtP = c.SMembers(ctx, keys.Held("redmap", queue, w.ID())).Val()
			close(pStarted)
			<-release
		}
		return -x, nil
	})
	m, err := manager.New(c, manager.Options{Queue: queue})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	opts, err := Options{Queue: queue, Concurrency: 2}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	seam := &holdingBack{Queue: redisbroker.New(c, opts.Prefix, queue), released: pStarted, waits: make(chan struct{})}
	w = assemble(opts, seam, func(name string, i int) broker.Shard { return redisbroker.NewShard(c, opts.Prefix, name, i) },
		memo.New(cache.NewStore(c, opts.Prefix, 0), 1<<20))
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
	seam.x = x
	for _, tid := range ids {
		c.HSet(ctx, keys.Attempts("redmap", queue, m.ID()), tid, wire.SuspectAfter) // both suspects
	}

	wctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(wctx) }()
	<-pStarted
	got := heldAtP
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

// holdingBack is a worker's seam to Redis that holds the report of task x
// back until released is closed or a take has brought a suspect or left
// one waiting (waits is closed then): the worker then waits to hold
// nothing, so the report must go.
type holdingBack struct {
	broker.Queue
	x        string
	released chan struct{}
	waits    chan struct{}
	once     sync.Once
}

func (h *holdingBack) Take(ctx context.Context, p *broker.TakeParams) (*broker.TakeResult, error) {
	got, err := h.Queue.Take(ctx, p)
	h.saw(got)
	return got, err
}

func (h *holdingBack) WaitTake(ctx context.Context, p *broker.TakeParams) (*broker.TakeResult, error) {
	got, err := h.Queue.WaitTake(ctx, p)
	h.saw(got)
	return got, err
}

// saw closes waits if a take brought a suspect or left one waiting.
func (h *holdingBack) saw(got *broker.TakeResult) {
	if got != nil && (got.End.Suspect || slices.ContainsFunc(got.Taken, func(t wire.Taken) bool { return t.Suspect() })) {
		h.once.Do(func() { close(h.waits) })
	}
}

func (h *holdingBack) Finish(ctx context.Context, p *broker.FinishParams) (*wire.Finished, error) {
	if slices.ContainsFunc(p.Done, func(d wire.Done) bool { return d.ID == h.x }) {
		select { // hold X's report back as long as the worker allows
		case <-h.waits:
		case <-h.released:
		}
	}
	return h.Queue.Finish(ctx, p)
}
