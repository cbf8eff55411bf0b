package manager_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/inspect"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// Fault tests with real worker processes and real signals. Workers run with a
// 1 s lease renewed every 200 ms, so a lost task is back in the queue within
// about 1.2 s.
var fastLease = []string{"REDMAP_LEASE_MS=1000", "REDMAP_HEARTBEAT_MS=200"}

func childEnv(b *harness.Env, extra ...string) []string {
	return append(append([]string{"REDMAP_URL=" + b.URL, "REDMAP_QUEUE=" + b.Queue}, fastLease...), extra...)
}

// exactlyOnce reads every result of a batch as it arrives and checks that
// each element has exactly one, equal to want(i); then that Wait agrees.
func exactlyOnce(t *testing.T, batch *manager.Batch[int], want func(i int) int, during func(seen int)) {
	t.Helper()
	seen := make([]int, batch.Len())
	n := 0
	for r := range batch.Results() {
		seen[r.Index]++
		if r.Err != nil || r.Value != want(r.Index) {
			t.Fatalf("element %d: %d, %v; want %d", r.Index, r.Value, r.Err, want(r.Index))
		}
		n++
		if during != nil {
			during(n)
		}
	}
	for i, k := range seen {
		if k != 1 {
			t.Fatalf("element %d delivered %d times, want exactly once", i, k)
		}
	}
	ys, err := batch.Wait(testCtx(t))
	if err != nil || len(ys) != batch.Len() {
		t.Fatalf("Wait: %d results, %v", len(ys), err)
	}
}

func sq(i int) int { return i * i }

// twoWorkers starts two worker processes with extra env and a manager, and
// waits until the manager sees both live.
func twoWorkers(t *testing.T, b *harness.Env, extra ...string) (a, c *harness.Proc, m *manager.Manager) {
	t.Helper()
	return twoWorkersFor(t, b, manager.Options{}, extra...)
}

// twoWorkersFor is twoWorkers with a manager of opts.
func twoWorkersFor(t *testing.T, b *harness.Env, opts manager.Options, extra ...string) (a, c *harness.Proc, m *manager.Manager) {
	t.Helper()
	a = startChild(t, "worker", childEnv(b, extra...)...)
	c = startChild(t, "worker", childEnv(b, extra...)...)
	a.ID, c.ID = a.Expect(t, "worker "), c.Expect(t, "worker ")
	m = b.Manager(t, opts)
	harness.WaitLive(t, m, a.ID, c.ID)
	return a, c, m
}

// A worker process SIGKILLed in the middle of a batch loses nothing: its
// tasks go back to the queue when its lease expires, and every element
// still has exactly one result.
func TestFaultWorkerKilled(t *testing.T) {
	b := setup(t)
	a, _, m := twoWorkers(t, b)

	batch, err := manager.Submit(testCtx(t), m, slowSquare, ints(4000), manager.ChunkSize(10))
	if err != nil {
		t.Fatal(err)
	}
	exactlyOnce(t, batch, sq, func(seen int) {
		if seen == 400 {
			a.Cmd.Process.Signal(syscall.SIGKILL)
		}
	})
	if <-a.Exited(); a.Err() == nil || !strings.Contains(a.Err().Error(), "killed") {
		t.Fatalf("worker a: %v, want killed", a.Err())
	}
}

// A worker process stopped (SIGSTOP) past its lease has its tasks run by
// another; when it wakes (SIGCONT) its late results are discarded.
func TestFaultWorkerStoppedPastLease(t *testing.T) {
	b := setup(t)
	a, c, m := twoWorkers(t, b)
	ida := a.ID

	batch, err := manager.Submit(testCtx(t), m, slowSquare, ints(4000), manager.ChunkSize(10))
	if err != nil {
		t.Fatal(err)
	}
	resumed := make(chan struct{})
	exactlyOnce(t, batch, sq, func(seen int) {
		if seen != 400 {
			return
		}
		a.Cmd.Process.Signal(syscall.SIGSTOP)
		ctx := context.Background()
		names := shardNames(t, b.Client, b.Queue)
		go func() {
			defer close(resumed)
			// Resume it only once its lease has expired and its tasks
			// were taken away from it: reaped, put back with an attempt
			// counted, and taken by the other worker (a requeued task
			// waits until a worker holds nothing else, so the other may
			// take it a little after). Which tasks it held is read from
			// the attempts the reap counted, not from its held set at the
			// stop: a take it sent just before may still have run. The
			// ids seen there are remembered: a requeued task's count goes
			// with its result, and on a loaded machine the other worker
			// may take and finish them all between two looks.
			// (Errorf, not Fatalf: this goroutine is not the test's.)
			requeued := map[string]string{} // task id → its shard's name
			eventuallyWithin(t, redistest.WaitLimit(t), "stopped worker reaped and its tasks taken by the other", func() bool {
				// The attempts first, at every look: the reap, the other's
				// take and its results may all come between two looks.
				for _, name := range names {
					for _, id := range b.Client.HKeys(ctx, keys.Attempts("redmap", name, m.ID())).Val() {
						requeued[id] = name
					}
				}
				live, _ := m.Workers(ctx)
				if slices.Contains(live, ida) {
					return false
				}
				for _, name := range names {
					if b.Client.Exists(ctx, keys.Held("redmap", name, ida)).Val() != 0 {
						return false
					}
				}
				for id, name := range requeued {
					if slices.Contains(harness.Queued(t, b.Client, name), id) {
						return false // still queued
					}
				}
				if len(requeued) > 0 {
					return true
				}
				// On a starved machine the reap, the other's take and its
				// results can all fall between two looks, which then never
				// see an attempt counted: the reap's record (gone) and
				// nothing of the stopped worker's left queued say the same.
				for _, name := range names {
					if b.Client.ZScore(ctx, keys.Gone("redmap", name), ida).Err() == nil {
						return len(harness.Queued(t, b.Client, name)) == 0
					}
				}
				return false
			})
			a.Cmd.Process.Signal(syscall.SIGCONT)
		}()
	})
	<-resumed
	// The zombie comes back to life as a worker; what it ran while stopped,
	// the other worker ran again, and one of the two results was discarded.
	harness.WaitLive(t, m, ida)
	sa, sc := stats(t, a).Worker, stats(t, c).Worker
	t.Logf("stopped worker: %+v; other: %+v", sa, sc)
	if sa.Taken+sc.Taken <= 400 || sa.Discarded+sc.Discarded == 0 {
		t.Fatalf("no task ran twice or no result was discarded: the stop did not take effect mid-task")
	}
	// One delivery per task (exactlyOnce saw each element once). A finish
	// of the stopped worker that Redis ran but whose reply came after its
	// read deadline passed (the process was stopped) counts, when sent
	// again, as discarded: it cannot be told from one another worker won.
	if got := sa.Delivered + sc.Delivered; got > 400 || got < 400-sa.Discarded {
		t.Fatalf("delivered %d results in all (the stopped worker's discarded %d), want one per task (400)", got, sa.Discarded)
	}
}

// A task that kills every worker process that runs it fails after its attempt
// budget with ErrLost; every other element completes.
func TestFaultPoisonPill(t *testing.T) {
	b := setup(t)
	started, stop := supervise(t, 2, childEnv(b, "REDMAP_CONCURRENCY=2")...)
	defer stop()
	m := b.Manager(t, manager.Options{})
	eventually(t, "two workers live", func() bool {
		live, _ := m.Workers(context.Background())
		return len(live) == 2
	})

	ys, err := manager.Map(testCtx(t), m, poison, ints(100), manager.ChunkSize(1), manager.Attempts(3))
	var be *redmap.BatchError
	if !errors.As(err, &be) || fmt.Sprint(be.Indexes()) != "[13]" || !errors.Is(err, redmap.ErrLost) {
		t.Fatalf("got %v, want element 13 failing with ErrLost", err)
	}
	t.Logf("poison pill: %v", be.Failed[0])
	if be.Failed[0].Attempt != 3 {
		t.Errorf("poison pill failed at attempt %d, want 3 (after 3 lost runs)", be.Failed[0].Attempt)
	}
	for i, y := range ys {
		if i != 13 && y != -i {
			t.Fatalf("ys[%d] = %d, want %d", i, y, -i)
		}
	}
	// It killed a worker once per attempt: 3 deaths, 5 workers started.
	if n := started(); n != 5 {
		t.Errorf("%d workers started, want 2 + one per attempt (3)", n)
	}
}

// The tasks of a worker SIGKILLed while it held several are lost once each:
// they run again side by side on the survivor, not one at a time as
// suspects (issue 59: four lost tasks of 30 s took 120 s more, each
// holding a whole worker). Two workers of 4 slots, no prefetch, hold 4 of 8
// tasks of 3 s each; one is killed; the 4 lost tasks' runs, all on the
// survivor after its own, overlap.
func TestFaultLostTasksRunSideBySide(t *testing.T) {
	b := setup(t)
	a, c, m := twoWorkers(t, b, "REDMAP_CONCURRENCY=4", "REDMAP_PREFETCH=-1")
	const d = 3000 // ms a task runs
	in := []int{d, d, d, d, d, d, d, d}
	batch, err := manager.Submit(testCtx(t), m, spanned, in, manager.ChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "each worker holds 4 tasks", func() bool {
		return len(heldBy(t, b, a.ID)) == 4 && len(heldBy(t, b, c.ID)) == 4
	})
	a.Cmd.Process.Signal(syscall.SIGKILL)
	killed := time.Now().UnixNano()
	<-a.Exited()
	spans, err := batch.Wait(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range spans {
		if s.Pid != c.Cmd.Process.Pid {
			t.Fatalf("element %d ran on process %d, want the survivor (%d): the victim finished a task before the kill", i, s.Pid, c.Cmd.Process.Pid)
		}
	}
	// The survivor's own 4 started first (a task may start a moment after
	// its take, so after the kill); the lost ones came back a lease later,
	// once its slots were free.
	slices.SortFunc(spans, func(x, y runSpan) int { return cmp.Compare(x.Start, y.Start) })
	again := spans[4:] // the runs of the lost tasks
	latestStart, firstEnd := again[0].Start, again[0].End
	for _, s := range again {
		latestStart, firstEnd = max(latestStart, s.Start), min(firstEnd, s.End)
	}
	t.Logf("the 4 lost tasks ran again from %v after the kill; all 4 ran together for %v",
		time.Duration(again[0].Start-killed),
		time.Duration(firstEnd-latestStart))
	if latestStart >= firstEnd {
		t.Fatalf("the lost tasks ran one after another (the last began %v after the first ended): they were run alone, as suspects",
			time.Duration(latestStart-firstEnd))
	}
}

// A batch sent to the private queue of a worker that dies fails with ErrLost
// naming the worker; it does not run elsewhere.
func TestFaultPrivateWorkerDies(t *testing.T) {
	b := setup(t)
	a := startChild(t, "worker", childEnv(b, "REDMAP_CONCURRENCY=1")...)
	c := startChild(t, "worker", childEnv(b)...)
	ida, idc := a.Expect(t, "worker "), c.Expect(t, "worker ")
	m := b.Manager(t, manager.Options{})
	harness.WaitLive(t, m, ida, idc)

	batch, err := manager.Submit(testCtx(t), m, slowSquare, ints(2000), manager.ChunkSize(1), manager.OnWorker(ida))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for range batch.Results() {
		if n++; n == 50 {
			a.Cmd.Process.Signal(syscall.SIGKILL)
		}
	}
	_, err = batch.Wait(testCtx(t))
	var be *redmap.BatchError
	if !errors.As(err, &be) || !errors.Is(err, redmap.ErrLost) || !strings.Contains(err.Error(), ida) {
		t.Fatalf("got %v, want lost elements naming worker %s", err, ida)
	}
	t.Logf("%d of 2000 elements lost with their private worker", len(be.Failed))
}

// A manager process killed with SIGKILL leaves nothing for ever: its keys
// expire, workers skip its queued tasks instead of running them, and other
// managers on the queue are unaffected.
func TestFaultManagerKilled(t *testing.T) {
	b := setup(t)
	c := startChild(t, "manager", "REDMAP_URL="+b.URL, "REDMAP_QUEUE="+b.Queue, "REDMAP_CONST_BYTES=1000")
	c.Expect(t, "submitted")
	c.Cmd.Process.Signal(syscall.SIGKILL)
	<-c.Exited()
	eventually(t, "the killed manager's keys expired", func() bool {
		return len(b.Keys(t, keys.Base("redmap", b.Queue)+"m:*")) == 0
	})

	// Its three lookup tasks are still queued; a worker drops them unrun.
	ran := 0
	counting := redmap.FuncWith("lookup", func(_ context.Context, tab []byte, x int) (byte, error) {
		ran++
		return tab[x], nil
	})
	b.Worker(t, worker.Options{Concurrency: 1}, counting, square)
	m := b.Manager(t, manager.Options{})
	if ys, err := manager.Map(testCtx(t), m, square, ints(100)); err != nil || ys[99] != 99*99 {
		t.Fatalf("another manager: %v", err)
	}
	eventually(t, "queue drained", func() bool {
		return len(harness.Queued(t, b.Client, b.Queue)) == 0
	})
	if ran != 0 {
		t.Fatalf("the dead manager's tasks ran %d times, want 0", ran)
	}
}

// Tasks lost twice (suspects: each runs alone, on a worker that holds
// nothing) are run while another batch keeps every worker busy,
// not after it (issue 36: a take went round the lanes in the ring's order,
// filled itself from the busy batch's lane and was refused the suspect, so
// the suspects waited until the busy batch ended: a minute in make
// chaos-cluster). The busy batch has twenty times the work of the other:
// the other must end first. The small batch's tasks count as lost once
// already, so those of a SIGKILLed worker come back lost twice: suspects.
func TestFaultSuspectsNotStarved(t *testing.T) {
	b := setup(t)
	var mu sync.Mutex
	var procs []*harness.Proc
	_, stop := superviseWith(t, 2, childEnv(b, "REDMAP_CONCURRENCY=4"), func(p *harness.Proc) {
		mu.Lock()
		procs = append(procs, p)
		mu.Unlock()
	})
	defer stop()
	busy, small := b.Manager(t, manager.Options{}), b.Manager(t, manager.Options{})
	eventually(t, "two workers live", func() bool {
		live, _ := busy.Workers(context.Background())
		return len(live) == 2
	})
	long, err := manager.Submit(testCtx(t), busy, slowSquare, ints(200_000), manager.ChunkSize(20))
	if err != nil {
		t.Fatal(err)
	}
	defer long.Cancel()
	// 48 tasks of 300 ms: a task of it is held long enough to be seen
	// held, whatever the machine's load (with 200 of 50 ms, a loaded run
	// once saw none held before the batch had ended).
	naps := make([]int, 48)
	for i := range naps {
		naps[i] = 300
	}
	short, err := manager.Submit(testCtx(t), small, spanned, naps, manager.ChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, name := range shardNames(t, b.Client, b.Queue) {
		for _, tid := range b.Client.HKeys(ctx, keys.Tasks("redmap", name, small.ID())).Val() {
			if !strings.HasPrefix(tid, "_") { // the set's count and epoch
				b.Client.HSet(ctx, keys.Attempts("redmap", name, small.ID()), tid, wire.SuspectAfter-1)
			}
		}
	}
	// Kill a worker while it holds tasks of the small batch: they come back
	// as suspects.
	mu.Lock()
	victim := procs[0]
	mu.Unlock()
	eventually(t, "the victim holds a task of the small batch", func() bool {
		select {
		case <-short.Done():
			t.Fatal("the small batch ended before the victim was seen holding a task of it")
		default:
		}
		return slices.ContainsFunc(heldBy(t, b, victim.ID), func(tid string) bool {
			return strings.HasPrefix(strings.TrimPrefix(tid, "!"), small.ID()+"-")
		})
	})
	victim.Cmd.Process.Signal(syscall.SIGKILL)
	atKill := long.Progress().Done
	if _, err := short.Wait(testCtx(t)); err != nil {
		t.Fatalf("the small batch: %v", err)
	}
	select {
	case <-long.Done():
		t.Fatal("the small batch ended after the busy one: its suspects waited for it")
	default:
	}
	t.Logf("busy batch: %d at the kill, %d at the end", atKill, long.Progress().Done)
	// The lost tasks ran as suspects, and the workers' records say so.
	in, err := inspect.New(b.Client, "")
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "workers' records count the suspects they ran alone", func() bool {
		now, err := in.Now(ctx)
		if err != nil {
			return false
		}
		ws, err := in.Workers(ctx, b.Queue, now)
		n := int64(0)
		for _, w := range ws {
			n += w.Suspects
		}
		return err == nil && n > 0
	})
	if p := long.Progress(); p.Done == p.Total {
		t.Fatalf("the busy batch was done (%d of %d) when the small one ended", p.Done, p.Total)
	}
}

// heldBy returns the members of worker wid's held sets on every shard of
// b's queue.
func heldBy(t *testing.T, b *harness.Env, wid string) []string {
	ctx := context.Background()
	names := append([]string{b.Queue}, b.Client.LRange(ctx, keys.ShardNames("redmap", b.Queue), 0, -1).Val()...)
	var out []string
	for _, name := range names {
		out = append(out, b.Client.SMembers(ctx, keys.Held("redmap", name, wid)).Val()...)
	}
	return out
}
