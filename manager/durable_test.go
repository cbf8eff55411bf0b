package manager_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/inspect"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// runCounts counts the runs of each element of durableSquare, the
// function's own counter: a test reads how many elements ran more than
// once.
type runCounts struct {
	mu   sync.Mutex
	runs map[int]int
}

var durableRuns = runCounts{runs: make(map[int]int)}

func (c *runCounts) add(x int) {
	c.mu.Lock()
	c.runs[x]++
	c.mu.Unlock()
}

// again returns how many of xs ran more than once, and how many never ran.
func (c *runCounts) again(xs []int) (more, never int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, x := range xs {
		switch n := c.runs[x]; {
		case n > 1:
			more++
		case n == 0:
			never++
		}
	}
	return more, never
}

// durableSquare squares x after 2 ms, counting its runs (durableRuns).
var durableSquare = redmap.Func("durablesq", func(ctx context.Context, x int) (int, error) {
	durableRuns.add(x)
	if err := pause(ctx, 2*time.Millisecond); err != nil {
		return 0, err
	}
	return x * x, nil
})

// spans hands out the elements of durableSquare's batches, so that each
// batch's are its own whatever runs before it (-count).
var spans atomic.Int64

// span returns n ints no other span has.
func span(n int) []int {
	base := int(spans.Add(int64(n))) - n
	xs := make([]int, n)
	for i := range xs {
		xs[i] = base + i
	}
	return xs
}

func checkSquaresOf(t *testing.T, xs, ys []int) {
	t.Helper()
	if len(ys) != len(xs) {
		t.Fatalf("%d outputs for %d elements", len(ys), len(xs))
	}
	for i, x := range xs {
		if ys[i] != x*x {
			t.Fatalf("ys[%d] = %d, want %d", i, ys[i], x*x)
		}
	}
}

// ownerKeys returns the keys durable batch name keeps in b's queue, on
// every shard.
func ownerKeys(t *testing.T, b *harness.Env, name string) []string {
	return b.Keys(t, "*:{"+keys.Glob(b.Queue)+"*}:m:"+id.Durable(name)+":*")
}

// A durable batch runs as any other and leaves nothing in Redis once it has
// ended; while it runs, a second call with its name is refused, naming the
// holder.
func TestDurableMapEndsAndIsHeld(t *testing.T) {
	b := setup(t)
	b.Worker(t, worker.Options{Concurrency: 4}, durableSquare)
	m1 := b.Manager(t, manager.Options{})
	m2 := b.Manager(t, manager.Options{})
	xs := span(600)
	batch, err := manager.Submit(testCtx(t), m1, durableSquare, xs, manager.Durable("held"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*manager.Manager{m2, m1} {
		_, err = manager.Map(testCtx(t), m, durableSquare, xs, manager.Durable("held"))
		var held *redmap.HeldError
		if !errors.As(err, &held) || !errors.Is(err, redmap.ErrDurableHeld) || held.Manager != m1.ID() || held.PID == 0 || held.Name != "held" {
			t.Fatalf("a second call while m1 holds the batch: %v; want a *redmap.HeldError naming m1", err)
		}
	}
	ys, err := batch.Wait(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	checkSquaresOf(t, xs, ys)
	if ks := ownerKeys(t, b, "held"); len(ks) != 0 {
		t.Fatalf("the ended durable batch left %q in Redis", ks)
	}
	// Its name is free again.
	ys, err = manager.Map(testCtx(t), m2, durableSquare, xs[:10], manager.Durable("held"))
	if err != nil {
		t.Fatal(err)
	}
	checkSquaresOf(t, xs[:10], ys)
}

// A durable batch whose call's context ended, or whose manager closed, goes
// on in Redis; the same call on another manager takes it over and returns
// what an uninterrupted run returns, no element having run twice.
func TestDurableTakeOver(t *testing.T) {
	for _, how := range []string{"context", "close"} {
		t.Run(how, func(t *testing.T) {
			b := setup(t)
			b.Worker(t, worker.Options{Concurrency: 4}, durableSquare)
			m1, err := manager.New(b.Client, manager.Options{Queue: b.Queue, Shards: redistest.Shards()})
			if err != nil {
				t.Fatal(err)
			}
			defer m1.Close()
			m2 := b.Manager(t, manager.Options{})
			xs := span(3000)
			ctx, cancel := context.WithCancel(testCtx(t))
			defer cancel()
			submitted := time.Now()
			batch, err := manager.Submit(ctx, m1, durableSquare, xs, manager.Durable(how), manager.ChunkSize(10))
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for range batch.Results() {
				if n++; n == 500 {
					break
				}
			}
			if st := m1.Stats(); st.Elements < 500 {
				t.Fatalf("m1.Stats() counts %d elements ended after 500 results were read", st.Elements)
			}
			interrupted := time.Now()
			if how == "context" {
				cancel()
			} else if err := m1.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := batch.Wait(testCtx(t)); err == nil {
				t.Fatal("the interrupted call's Wait returned no error")
			}
			ys, err := manager.Map(testCtx(t), m2, durableSquare, xs, manager.Durable(how), manager.ChunkSize(10))
			if err != nil {
				t.Fatal(err)
			}
			checkSquaresOf(t, xs, ys)
			if more, never := durableRuns.again(xs); more != 0 || never != 0 {
				t.Fatalf("%d elements ran more than once, %d never; want 0 and 0", more, never)
			}
			// Its record says when the first call started it, not the one
			// that took it over.
			hist, _, err := newInspector(t, b).History(context.Background(), b.Queue, 0)
			if err != nil || len(hist) == 0 {
				t.Fatalf("history %v, %v", hist, err)
			}
			if h := hist[0]; h.Outcome != "done" || h.Started.Before(submitted.Truncate(time.Millisecond)) || h.Started.After(interrupted) {
				t.Fatalf("the taken-over batch's record: %s, started %v; want done, started by the first call (between %v and %v)", h.Outcome, h.Started, submitted, interrupted)
			}
			if ks := ownerKeys(t, b, how); len(ks) != 0 {
				t.Fatalf("the ended durable batch left %q in Redis", ks)
			}
		})
	}
}

// interrupt reads n results of batch, then ends its call's context
// (cancel): the durable batch is left in Redis, and its Wait says so.
func interrupt(t *testing.T, batch *manager.Batch[int], cancel context.CancelFunc, n int) {
	t.Helper()
	read := 0
	for range batch.Results() {
		if read++; read == n {
			break
		}
	}
	cancel()
	if _, err := batch.Wait(testCtx(t)); err == nil {
		t.Fatal("the interrupted call's Wait returned no error")
	}
}

// A call that takes a durable batch over with another input is refused,
// naming the task that differs, and leaves the batch as it was: the call
// with the batch's own input then completes it.
func TestDurableMismatchRefused(t *testing.T) {
	b := setup(t)
	b.Worker(t, worker.Options{Concurrency: 2}, durableSquare)
	m := b.Manager(t, manager.Options{})
	xs := span(400)
	ctx, cancel := context.WithCancel(testCtx(t))
	batch, err := manager.Submit(ctx, m, durableSquare, xs, manager.Durable("mismatch"), manager.ChunkSize(4))
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := batch.Wait(testCtx(t)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait after the context ended: %v", err)
	}
	changed := append([]int(nil), xs...)
	changed[201] = -1
	_, err = manager.Map(testCtx(t), m, durableSquare, changed, manager.Durable("mismatch"), manager.ChunkSize(4))
	if !errors.Is(err, redmap.ErrDurableMismatch) || !strings.Contains(err.Error(), "elements 200 to 203") {
		t.Fatalf("a takeover with element 201 changed: %v; want ErrDurableMismatch naming elements 200 to 203", err)
	}
	_, err = manager.Map(testCtx(t), m, durableSquare, xs, manager.Durable("mismatch"), manager.ChunkSize(5))
	if !errors.Is(err, redmap.ErrDurableMismatch) {
		t.Fatalf("a takeover with other chunks: %v; want ErrDurableMismatch", err)
	}
	ys, err := manager.Map(testCtx(t), m, durableSquare, xs, manager.Durable("mismatch"), manager.ChunkSize(4))
	if err != nil {
		t.Fatal(err)
	}
	checkSquaresOf(t, xs, ys)
}

// A manager process running a durable batch of 200,000 elements of 1 ms
// on two worker processes is SIGKILLed at half its results; the program,
// started again with the same name, finishes exact: a Map's outputs, a
// MapReduce's fold, a SubmitSeq's results each read once. The elements
// that may run again are those of the tasks in flight at the kill; here
// the bound is 0, since a manager's death leaves the workers and the
// batch's keys alone: every task runs once, and its result waits in Redis.
// So no element runs twice, and none is lost.
func TestDurableManagerKilledAndRestarted(t *testing.T) {
	for _, mode := range []string{"map", "reduce", "seq"} {
		t.Run(mode, func(t *testing.T) { durableKilled(t, mode) })
	}
}

func durableKilled(t *testing.T, mode string) {
	b := setup(t)
	n := 200_000
	if testing.Short() {
		n = 20_000
	}
	dir := t.TempDir()
	var workers []*harness.Proc
	for _, name := range []string{"a", "b"} {
		w := startChild(t, "worker", childEnv(b, "REDMAP_CONCURRENCY=16", "REDMAP_RUNS_FILE="+filepath.Join(dir, name))...)
		w.Expect(t, "worker ")
		workers = append(workers, w)
	}
	name := "big-" + mode
	env := []string{"REDMAP_URL=" + b.URL, "REDMAP_QUEUE=" + b.Queue, "REDMAP_N=" + strconv.Itoa(n),
		"REDMAP_DURABLE=" + name, "REDMAP_MODE=" + mode}
	first := startChild(t, "manager-durable", env...)
	first.Expect(t, "submitted")
	began := time.Now()
	if mode == "reduce" {
		// A fold prints nothing as it goes: half its partials are in Redis.
		tasks := (n + 4095) / 4096
		tasks = (n + tasks - 1) / tasks
		redistest.Eventually(t, "half the partials delivered", func() bool { return delivered(t, b, name) >= tasks/2 })
	} else {
		first.Expect(t, "results "+strconv.Itoa(n/2))
	}
	first.Kill()
	killed := time.Now()
	second := startChild(t, "manager-durable", env...)
	second.Expect(t, "exact")
	finished := time.Now()
	if <-second.Exited(); second.Err() != nil {
		t.Fatalf("the restarted manager exited with %v", second.Err())
	}
	runs := make(map[int]int)
	for i, w := range workers {
		if err := w.Stop(t); err != nil {
			t.Fatalf("worker exited with %v", err)
		}
		for x, k := range readRuns(t, filepath.Join(dir, []string{"a", "b"}[i])) {
			runs[x] += k
		}
	}
	again, never := 0, 0
	for x := range n {
		switch runs[x] {
		case 0:
			never++
		case 1:
		default:
			again++
		}
	}
	t.Logf("%s of %d elements: killed at half, %v after its submit; the restarted program finished %v after the kill; %d elements ran more than once, %d never",
		mode, n, killed.Sub(began).Round(time.Millisecond), finished.Sub(killed).Round(time.Millisecond), again, never)
	if again != 0 || never != 0 {
		t.Fatalf("%d elements ran more than once and %d never; want 0 and 0", again, never)
	}
	if ks := ownerKeys(t, b, name); len(ks) != 0 {
		t.Fatalf("the ended durable batch left %q in Redis", ks)
	}
}

// delivered counts the results of durable batch name in Redis, read or
// not, on every shard.
func delivered(t *testing.T, b *harness.Env, name string) int {
	n := 0
	for _, k := range ownerKeys(t, b, name) {
		if strings.HasSuffix(k, ":results") || strings.HasSuffix(k, ":kept") {
			n += int(b.Client.LLen(context.Background(), k).Val())
		}
	}
	return n
}

// watched returns an inspector of b's Redis and a manager of its queue
// (opts, polling every 100 ms and waiting for workers for ever), which the
// test closes.
func watched(t *testing.T, b *harness.Env, opts manager.Options) (*inspect.Inspector, *manager.Manager) {
	t.Helper()
	in, err := inspect.New(b.Client, "")
	if err != nil {
		t.Fatal(err)
	}
	opts.Queue, opts.Poll, opts.NoWorkerTimeout = b.Queue, 100*time.Millisecond, -1
	if opts.Shards == 0 {
		opts.Shards = redistest.Shards() // as b.Manager's, which takes its batches over
	}
	m, err := manager.New(b.Client, opts)
	if err != nil {
		t.Fatal(err)
	}
	return in, m
}

// batchOf returns queue's running batch of durable batch name, as
// operators read it (inspect), or false.
func batchOf(t *testing.T, in *inspect.Inspector, queue, name string) (inspect.Batch, bool) {
	t.Helper()
	bs, err := in.Batches(context.Background(), queue)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bs {
		if b.Durable == name {
			return b, true
		}
	}
	return inspect.Batch{}, false
}

// historyOf returns queue's ended batch of durable batch name, or false.
func historyOf(t *testing.T, in *inspect.Inspector, queue, name string) (inspect.Batch, bool) {
	t.Helper()
	bs, _, err := in.History(context.Background(), queue, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bs {
		if b.Manager == id.Durable(name) {
			return b, true
		}
	}
	return inspect.Batch{}, false
}

// Operators see a durable batch that no manager holds as orphaned while
// tasks of it are outstanding, done once every task has its result, never
// as "manager lost"; the call that takes it over collects it.
func TestDurableOrphanedThenDone(t *testing.T) {
	b := setup(t)
	in, m1 := watched(t, b, manager.Options{Shards: 2}) // two shards: the states and the cancel read and write both
	xs := span(200)
	if _, err := manager.Submit(testCtx(t), m1, durableSquare, xs, manager.Durable("orphan"), manager.ChunkSize(10)); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, "the batch listed running", func() bool {
		bt, ok := batchOf(t, in, b.Queue, "orphan")
		return ok && bt.Outcome == "running" && bt.Total == 200
	})
	if err := m1.Close(); err != nil {
		t.Fatal(err)
	}
	bt, ok := batchOf(t, in, b.Queue, "orphan")
	if !ok || bt.Outcome != "orphaned" || !strings.Contains(bt.Waiting, "20 outstanding") {
		t.Fatalf("after its manager closed: %+v, %v; want it orphaned with its 20 tasks outstanding", bt, ok)
	}
	b.Worker(t, worker.Options{Concurrency: 4}, durableSquare)
	redistest.Eventually(t, "the orphan's tasks all done", func() bool {
		bt, ok := batchOf(t, in, b.Queue, "orphan")
		return ok && bt.Outcome == "done"
	})
	if h, ok := historyOf(t, in, b.Queue, "orphan"); ok {
		t.Fatalf("the orphan is in the history as %q", h.Outcome)
	}
	m2 := b.Manager(t, manager.Options{Shards: 2}) // as many as the batch's
	ys, err := manager.Map(testCtx(t), m2, durableSquare, xs, manager.Durable("orphan"), manager.ChunkSize(10))
	if err != nil {
		t.Fatal(err)
	}
	checkSquaresOf(t, xs, ys)
	if more, never := durableRuns.again(xs); more != 0 || never != 0 {
		t.Fatalf("%d elements ran more than once, %d never", more, never)
	}
	if _, ok := batchOf(t, in, b.Queue, "orphan"); ok {
		t.Fatal("the collected batch is still listed running")
	}
	if h, ok := historyOf(t, in, b.Queue, "orphan"); !ok || h.Outcome != "done" || h.Done != 200 {
		t.Fatalf("history of the collected batch: %+v, %v; want done, 200", h, ok)
	}
}

// An operator cancels a durable batch by name: one that a manager holds is
// cancelled by it within its Poll; one that none holds at once, and the
// call that takes it over gets every element failed with ErrCancelled.
func TestDurableCancelledByName(t *testing.T) {
	b := setup(t)
	in, m1 := watched(t, b, manager.Options{Shards: 2}) // two shards: the states and the cancel read and write both
	defer m1.Close()
	xs := span(50)
	held, err := manager.Submit(testCtx(t), m1, durableSquare, xs, manager.Durable("held"))
	if err != nil {
		t.Fatal(err)
	}
	if did, err := cancelDurable(testCtx(t), in, b.Queue, "held"); err != nil || did != "asked" {
		t.Fatalf("cancel of a held batch: %q, %v; want asked", did, err)
	}
	if _, err := held.Wait(testCtx(t)); !errors.Is(err, context.Canceled) {
		t.Fatalf("the held batch after its cancel: %v; want context.Canceled", err)
	}
	if ks := ownerKeys(t, b, "held"); len(ks) != 0 {
		t.Fatalf("the cancelled batch left %q", ks)
	}

	orphan, err := manager.Submit(testCtx(t), m1, durableSquare, xs, manager.Durable("orphan"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testCtx(t))
	cancel()
	if _, err := orphan.Wait(ctx); err == nil {
		t.Fatal("Wait with an ended context returned no error")
	}
	if err := m1.Close(); err != nil {
		t.Fatal(err)
	}
	if did, err := cancelDurable(testCtx(t), in, b.Queue, "orphan"); err != nil || did != "cancelled" {
		t.Fatalf("cancel of an orphan: %q, %v; want cancelled", did, err)
	}
	for _, k := range ownerKeys(t, b, "orphan") {
		if strings.HasSuffix(k, ":tasks") && b.Client.HLen(context.Background(), k).Val() > 2 {
			t.Fatalf("%s still holds tasks after the cancel", k)
		}
	}
	if h, ok := historyOf(t, in, b.Queue, "orphan"); !ok || h.Outcome != "cancelled" || h.Total != 0 && h.Total != 50 {
		t.Fatalf("history of the cancelled orphan: %+v, %v", h, ok)
	}
	if c, err := in.Cancel(testCtx(t), b.Queue, "nothing", false); err == nil {
		t.Fatalf("cancel of a batch Redis never had: %+v, want an error", c)
	}
	b.Worker(t, worker.Options{Concurrency: 4}, durableSquare)
	m1b := b.Manager(t, manager.Options{Shards: 1})
	if _, err := manager.Map(testCtx(t), m1b, durableSquare, xs, manager.Durable("orphan")); !errors.Is(err, redmap.ErrDurableMismatch) || !strings.Contains(err.Error(), "2 shards") {
		t.Fatalf("taking a batch of 2 shards over with 1: %v; want ErrDurableMismatch naming the shards", err)
	}
	m2 := b.Manager(t, manager.Options{Shards: 2})
	ys, err := manager.Map(testCtx(t), m2, durableSquare, xs, manager.Durable("orphan"))
	var be *redmap.BatchError
	if !errors.As(err, &be) || len(be.Failed) != 50 || !errors.Is(err, redmap.ErrCancelled) || len(ys) != 50 {
		t.Fatalf("taking the cancelled orphan over: %d outputs, %v; want all 50 failed with ErrCancelled", len(ys), err)
	}
	// One cause, said once: not 5 times and "and 45 more", nor "cancelled
	// by an operator: cancelled by an operator".
	if want := "redmap: 50 of 50 elements failed: 50 elements (0, 1, 2, ...): batch cancelled by an operator"; err.Error() != want {
		t.Fatalf("the cancelled orphan's error:\n%s\nwant\n%s", err, want)
	}
	if more, _ := durableRuns.again(xs); more != 0 {
		t.Fatalf("%d elements of the cancelled batch ran twice", more)
	}
	if ks := ownerKeys(t, b, "orphan"); len(ks) != 0 {
		t.Fatalf("the cancelled batch left %q", ks)
	}
}

// A durable batch no manager takes over within its DurableTTL is gone from
// Redis, and the queue's history records it as expired.
func TestDurableOrphanExpires(t *testing.T) {
	b := setup(t)
	in, m := watched(t, b, manager.Options{DurableTTL: 3 * time.Second})
	if _, err := manager.Submit(testCtx(t), m, durableSquare, span(30), manager.Durable("brief")); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, "the batch listed", func() bool { _, ok := batchOf(t, in, b.Queue, "brief"); return ok })
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, "the orphan recorded expired", func() bool {
		_, _ = in.Batches(context.Background(), b.Queue) // a reader notices, as a worker's heartbeat would
		h, ok := historyOf(t, in, b.Queue, "brief")
		return ok && h.Outcome == "expired" && h.Total == 30 && strings.Contains(h.Reason, "brief")
	})
	redistest.Eventually(t, "the orphan's keys expired", func() bool { return len(ownerKeys(t, b, "brief")) == 0 })
}

// Redis lost everything (FLUSHALL) while no manager held a durable batch:
// the call that takes it over finds nothing, submits it all again, and
// returns it exact.
func TestDurableAfterFlushAll(t *testing.T) {
	t.Parallel() // a server of its own
	srv := redistest.Start(t)
	b := harness.On(t, srv)
	b.Worker(t, worker.Options{Concurrency: 4}, durableSquare)
	m1, err := manager.New(b.Client, manager.Options{Queue: b.Queue})
	if err != nil {
		t.Fatal(err)
	}
	defer m1.Close()
	xs := span(2000)
	ctx, cancel := context.WithCancel(testCtx(t))
	batch, err := manager.Submit(ctx, m1, durableSquare, xs, manager.Durable("flushed"), manager.ChunkSize(10))
	if err != nil {
		t.Fatal(err)
	}
	interrupt(t, batch, cancel, 300)
	if err := srv.Client(t).FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	m2 := b.Manager(t, manager.Options{})
	ys, err := manager.Map(testCtx(t), m2, durableSquare, xs, manager.Durable("flushed"), manager.ChunkSize(10))
	if err != nil {
		t.Fatal(err)
	}
	checkSquaresOf(t, xs, ys)
}

// constSquare adds a batch's constant to x's square, counting its runs.
var constSquare = redmap.FuncWith("durableconstsq", func(ctx context.Context, c int, x int) (int, error) {
	durableRuns.add(x)
	if err := pause(ctx, 2*time.Millisecond); err != nil {
		return 0, err
	}
	return x*x + c, nil
})

// A durable batch with a constant keeps its constant held while no manager
// holds the batch; the call that takes it over, with the same constant,
// returns it exact; with another constant it is refused.
func TestDurableWithConstant(t *testing.T) {
	b := setup(t)
	b.Worker(t, worker.Options{Concurrency: 4}, constSquare)
	m1, err := manager.New(b.Client, manager.Options{Queue: b.Queue, Shards: redistest.Shards()})
	if err != nil {
		t.Fatal(err)
	}
	defer m1.Close()
	xs := span(2000)
	ctx, cancel := context.WithCancel(testCtx(t))
	batch, err := manager.SubmitWith(ctx, m1, constSquare, 7, xs, manager.Durable("const"), manager.ChunkSize(10))
	if err != nil {
		t.Fatal(err)
	}
	interrupt(t, batch, cancel, 300)
	m2 := b.Manager(t, manager.Options{})
	if _, err := manager.MapWith(testCtx(t), m2, constSquare, 8, xs, manager.Durable("const"), manager.ChunkSize(10)); !errors.Is(err, redmap.ErrDurableMismatch) {
		t.Fatalf("a takeover with another constant: %v; want ErrDurableMismatch", err)
	}
	ys, err := manager.MapWith(testCtx(t), m2, constSquare, 7, xs, manager.Durable("const"), manager.ChunkSize(10))
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range xs {
		if ys[i] != x*x+7 {
			t.Fatalf("ys[%d] = %d, want %d", i, ys[i], x*x+7)
		}
	}
	if more, never := durableRuns.again(xs); more != 0 || never != 0 {
		t.Fatalf("%d elements ran more than once, %d never", more, never)
	}
}

// A call with DurableWait that finds the batch held waits for its holder to
// let it go, then takes it over: each element runs once.
func TestDurableWaitForHolder(t *testing.T) {
	b := setup(t)
	_, m1 := watched(t, b, manager.Options{})
	defer m1.Close()
	m2 := b.Manager(t, manager.Options{})
	xs := span(300)
	ctx, cancel := context.WithCancel(testCtx(t))
	held, err := manager.Submit(ctx, m1, durableSquare, xs, manager.Durable("wait"))
	if err != nil {
		t.Fatal(err)
	}
	type out struct {
		ys  []int
		err error
	}
	second := make(chan out, 1)
	go func() {
		ys, err := manager.Map(testCtx(t), m2, durableSquare, xs, manager.Durable("wait"), manager.DurableWait(time.Minute))
		second <- out{ys, err}
	}()
	select {
	case r := <-second:
		t.Fatalf("the waiting call returned while m1 held the batch: %v", r.err)
	default:
	}
	cancel() // m1 lets the batch go
	if _, err := held.Wait(testCtx(t)); !errors.Is(err, context.Canceled) {
		t.Fatalf("m1's call after its context ended: %v", err)
	}
	b.Worker(t, worker.Options{Concurrency: 4}, durableSquare)
	r := <-second
	if r.err != nil {
		t.Fatal(r.err)
	}
	checkSquaresOf(t, xs, r.ys)
	if more, never := durableRuns.again(xs); more != 0 || never != 0 {
		t.Fatalf("%d elements ran more than once, %d never", more, never)
	}
}

// At maxmemory, a durable call's submit fails with ErrRedisFull and what it
// queued stays: once Redis has room, the same call takes the batch over and
// returns it exact. Nothing is lost.
func TestDurableRedisFull(t *testing.T) {
	t.Parallel() // a server of its own
	srv := redistest.Start(t, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
	b := harness.On(t, srv)
	b.Worker(t, worker.Options{}, echo)
	// The takeover's checks run every Poll: 100 ms, not the default second.
	m := b.Manager(t, manager.Options{Poll: 100 * time.Millisecond})
	big := make([]string, 200)
	for i := range big {
		big[i] = fmt.Sprintf("%03d", i) + strings.Repeat("x", 64<<10) // 12.5 MiB in all
	}
	_, err := manager.Map(testCtx(t), m, echo, big, manager.Durable("full"), manager.ChunkSize(1))
	if !errors.Is(err, redmap.ErrRedisFull) {
		t.Fatalf("a durable batch larger than maxmemory: %v, want ErrRedisFull", err)
	}
	if err := srv.Client(t).ConfigSet(context.Background(), "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	ys, err := manager.Map(testCtx(t), m, echo, big, manager.Durable("full"), manager.ChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}
	for i := range big {
		if ys[i] != big[i] {
			t.Fatalf("ys[%d] is %.8q…, want %.8q…", i, ys[i], big[i])
		}
	}
}

// A durable batch a user named as a pipeline's claim is named
// (<name>/pipeline) is still cancelled as a batch when no pipeline of
// that name runs.
func TestDurableNamedLikeAPipelineClaimCancelled(t *testing.T) {
	b := setup(t)
	in, m := watched(t, b, manager.Options{})
	defer m.Close()
	held, err := manager.Submit(testCtx(t), m, durableSquare, span(50), manager.Durable("nightly/pipeline"))
	if err != nil {
		t.Fatal(err)
	}
	if did, err := cancelDurable(testCtx(t), in, b.Queue, "nightly/pipeline"); err != nil || did != "asked" {
		t.Fatalf("cancel of a held batch: %q, %v; want asked", did, err)
	}
	if _, err := held.Wait(testCtx(t)); !errors.Is(err, context.Canceled) {
		t.Fatalf("the held batch after its cancel: %v; want context.Canceled", err)
	}
}
