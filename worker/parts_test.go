package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/cache"
	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/await"
	"github.com/redmap/redmap/internal/backoff"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/memory"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/failure"
	"github.com/redmap/redmap/internal/memo"
	"github.com/redmap/redmap/internal/redistest"
)

// Unit tests of the worker's parts, against the memory broker
// (internal/broker/memory, which internal/broker/brokertest holds to the
// scripts' rules): no redis-server. The suites against real servers are
// the package's, the manager's and cmd/redmap's other tests.

// activity is notified at every call to the memory broker: what until
// waits on.
var activity await.Broadcast

// sourceOf returns a source of worker w1 over q.
func sourceOf(q *memory.Queue, failed func(string, error)) *source {
	return newSource(sourceParams{wid: "w1", lease: time.Minute, idleWait: 20 * time.Millisecond, first: q.First(),
		serves: func() []string { return nil }, open: q.Open, failed: failed, log: slog.New(slog.DiscardHandler)})
}

func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	await.Until(t, &activity, redistest.WaitLimit(t), what, cond)
}

var negate = redmap.Func("negate", func(_ context.Context, x int) (int, error) { return -x, nil })

// task returns a task of negate over xs, as a manager submits it.
func task(t *testing.T, id string, attempt int, xs ...int) wire.Taken {
	t.Helper()
	return taskOf(t, negate, id, attempt, xs...)
}

// taskOf returns a task of h over xs, as a manager submits it.
func taskOf(t *testing.T, h *redmap.Handle[int, int], id string, attempt int, xs ...int) wire.Taken {
	t.Helper()
	in, err := codec.EncodeElements(xs, 0)
	if err != nil {
		t.Fatal(err)
	}
	payload, err := codec.EncodeTask(&codec.Task{Func: h.Name(), Sig: h.Signature(), Count: len(xs), Input: in})
	if err != nil {
		t.Fatal(err)
	}
	return wire.Taken{ID: id, Attempt: attempt, Payload: payload}
}

// outputs decodes a result's outputs.
func outputs(t *testing.T, d wire.Done) []int {
	t.Helper()
	r, err := codec.DecodeResult(d.Result, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Fails) > 0 {
		t.Fatalf("task %s failed: %+v", d.ID, r.Fails)
	}
	ys := make([]int, 2)
	if err := codec.DecodeElements(r.Values, ys); err != nil {
		t.Fatal(err)
	}
	return ys
}

// fakeWorker is a worker over q, with opts; ran tells when it returned.
func fakeWorker(t *testing.T, q *memory.Queue, opts Options) *Worker {
	t.Helper()
	opts.Queue = "q"
	opts, err := opts.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	w := assemble(opts, q.First(), q.Open, memo.New(cache.NewStore(nil, opts.Prefix, 0), 1<<20)) // no constants here
	if err := w.Register(negate); err != nil {
		t.Fatal(err)
	}
	return w
}

func run(t *testing.T, w *Worker) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	return func() {
		cancel()
		if err := <-ran; err != nil {
			t.Fatal(err)
		}
	}
}

// A worker over a queue of three shards takes the tasks of every shard
// (once a heartbeat says there are three), reports each result to the
// shard its task came from, and retires from each when it stops.
func TestWorkerServesEveryShard(t *testing.T) {
	q := memory.NewQueue(&activity, "q#1", "q#2")
	w := fakeWorker(t, q, Options{Concurrency: 2, Heartbeat: 10 * time.Millisecond})
	stop := run(t, w)
	for i, s := range q.Shards() {
		for j := range 5 {
			s.Add(task(t, fmt.Sprintf("%d-%d", i, j), 0, i, j))
		}
	}
	for i, s := range q.Shards() {
		until(t, fmt.Sprintf("shard %d's 5 tasks are reported", i), func() bool { return len(s.Results()) == 5 })
	}
	stop()
	for i, s := range q.Shards() {
		for _, d := range s.Results() {
			var a, b int
			fmt.Sscanf(d.ID, "%d-%d", &a, &b)
			if ys := outputs(t, d); !slices.Equal(ys, []int{-a, -b}) || d.Shard != i {
				t.Fatalf("task %s of shard %d: %v (from shard %d), want [%d %d]", d.ID, i, ys, d.Shard, -a, -b)
			}
		}
		if !s.Retired(w.ID()) {
			t.Fatalf("shard %d: the worker did not retire", i)
		}
		if held := s.HeldBy(w.ID()); len(held) != 0 {
			t.Fatalf("shard %d still holds %v", i, held)
		}
	}
	if st := w.Stats(); st.Taken != 15 || st.Delivered != 15 {
		t.Fatalf("stats %+v, want 15 taken and delivered", st)
	}
}

// The source takes from its shards in turn: each take starts at the shard
// after the one that gave tasks last.
func TestSourceTakesInTurn(t *testing.T) {
	q := memory.NewQueue(&activity, "q#1", "q#2")
	for i, s := range q.Shards() {
		for j := range 3 {
			s.Add(wire.Taken{ID: fmt.Sprintf("%d-%d", i, j)})
		}
	}
	src := sourceOf(q, func(op string, err error) { t.Errorf("%s: %v", op, err) })
	ctx := context.Background()
	src.grow(ctx, 3)
	if n := len(src.shards()); n != 3 {
		t.Fatalf("serving %d shards, want 3", n)
	}
	var order []int
	for range 9 {
		if !src.await(ctx) {
			t.Fatal("await ended")
		}
		r := src.take(ctx, 1, func() int { return 1 }, func() int { return 0 })
		if r.err != nil || len(r.taken) != 1 {
			t.Fatalf("take: %v, %v", r.taken, r.err)
		}
		order = append(order, r.taken[0].Shard)
	}
	if want := []int{0, 1, 2, 0, 1, 2, 0, 1, 2}; !slices.Equal(order, want) {
		t.Fatalf("took from shards %v, want %v", order, want)
	}
}

// A suspect that waits on one shard for the worker to hold nothing is the
// worker's next take once it does: the round that was refused it takes from
// no other shard, and the next starts at its shard (issue 36: a worker that
// went on to the other shards was never empty when it came back to the
// suspect's, and 570 tasks behind a suspect waited for minutes in make
// chaos-cluster).
func TestSourceSuspectWaitsOnItsShard(t *testing.T) {
	q := memory.NewQueue(&activity, "q#1", "q#2")
	q.First().Add(wire.Taken{ID: "suspect", Attempt: wire.SuspectAfter}, wire.Taken{ID: "0-a"})
	for i, s := range q.Shards()[1:] {
		for j := range 5 {
			s.Add(wire.Taken{ID: fmt.Sprintf("%d-%d", i+1, j)})
		}
	}
	src := sourceOf(q, func(op string, err error) { t.Errorf("%s: %v", op, err) })
	ctx := context.Background()
	src.grow(ctx, 3)
	r := src.take(ctx, 4, func() int { return 4 }, func() int { return 1 }) // holding a task
	if r.err != nil || len(r.taken) != 0 || !r.suspectWaits {
		t.Fatalf("a take holding a task: %v, %v, suspect waits %v; want nothing taken and the suspect waiting", r.taken, r.err, r.suspectWaits)
	}
	if !src.await(ctx) {
		t.Fatal("await ended")
	}
	r = src.take(ctx, 4, func() int { return 4 }, func() int { return 0 }) // emptied
	if r.err != nil || len(r.taken) != 1 || r.taken[0].ID != "suspect" {
		t.Fatalf("the take once empty: %v, %v; want the suspect alone", r.taken, r.err)
	}
}

// A take that fails on one shard goes on to the next, and says the error
// only if no shard gave tasks.
func TestSourceTakesPastAFailedShard(t *testing.T) {
	q := memory.NewQueue(&activity, "q#1")
	q.Shard(1).Add(wire.Taken{ID: "a"})
	q.First().Fail("take", errors.New("connection refused"))
	src := sourceOf(q, func(string, error) {})
	src.grow(context.Background(), 2)
	r := src.take(context.Background(), 1, func() int { return 1 }, func() int { return 0 })
	if r.err != nil || len(r.taken) != 1 || r.taken[0].ID != "a" {
		t.Fatalf("take: %v, %v; want task a of shard 1", r.taken, r.err)
	}
	r = src.take(context.Background(), 1, func() int { return 1 }, func() int { return 0 })
	if r.err == nil {
		t.Fatal("a take that found shard 1 empty and shard 0 failing said no error")
	}
}

// A suspect (a task lost wire.SuspectAfter times) runs with nothing else held: after taking
// it, the fetcher takes nothing more until its result is reported, and the
// take that left one for want of an empty worker is followed by one that
// holds nothing. While it runs, the worker's info says so, and why.
func TestFetcherTakesSuspectAlone(t *testing.T) {
	q := memory.NewQueue(&activity)
	s := q.First()
	// The suspect's function sees what the worker holds as it starts.
	var w *Worker
	var running, most atomic.Int32
	var alone, aloneTask atomic.Value // the worker's info's Alone and AloneTask as the suspect runs
	seen := redmap.Func("seeheld", func(_ context.Context, x int) (int, error) {
		if n := int32(w.held.size()); n > most.Load() {
			most.Store(n)
		}
		info := w.info()
		alone.Store(info.Alone)
		aloneTask.Store(info.AloneTask)
		running.Add(1)
		return -x, nil
	})
	s.Add(task(t, "a", 0, 1), taskOf(t, seen, "suspect", wire.SuspectAfter, 2), task(t, "b", 0, 3))
	w = fakeWorker(t, q, Options{Concurrency: 4, Heartbeat: 10 * time.Millisecond})
	if err := w.Register(seen); err != nil {
		t.Fatal(err)
	}
	stop := run(t, w)
	until(t, "all three reported", func() bool { return len(s.Results()) == 3 })
	stop()
	if running.Load() != 1 {
		t.Fatalf("the suspect ran %d times, want 1", running.Load())
	}
	if most.Load() != 1 {
		t.Fatalf("the worker held %d tasks when the suspect started, want it alone", most.Load())
	}
	if got, _ := alone.Load().(string); !strings.Contains(got, "suspect runs alone: lost 2 times") {
		t.Fatalf("the worker's info said %q as the suspect ran, want why it runs alone", got)
	}
	if got, _ := aloneTask.Load().(string); got != "suspect" {
		t.Fatalf("the worker's info named task %q as the suspect ran, want suspect", got)
	}
	if st := w.Stats(); st.Suspects != 1 || w.info().Alone != "" || w.info().AloneTask != "" {
		t.Fatalf("after the run: %d suspects, alone %q; want 1 and none", st.Suspects, w.info().Alone)
	}
	holdings := s.Holdings()
	if !slices.Contains(holdings, 0) || len(holdings) < 2 {
		t.Fatalf("holdings at each take %v: want a take holding nothing after the one that left the suspect", holdings)
	}
}

// A round that took tasks and then met a suspect (refused it for the tasks
// it had just taken) is no sign of orphans: the fetcher does not back off
// before its next take. It did (issue 36), with a delay that grew to 2 s
// while suspects waited behind other work, and every worker ran a task or
// two every 2 s.
func TestFetcherNoOrphanWaitAfterTakingTasks(t *testing.T) {
	q := memory.NewQueue(&activity)
	h := newHeld()
	jobs := make(chan job, 4)
	f := newFetcher(fetcherParams{wid: "w", heartbeat: time.Second, jobs: jobs, source: sourceOf(q, func(string, error) {}),
		held: h, slots: newSlots(func() int { return 4 }), counters: &counters{}, failed: func(string, error) {},
		stopping: func() {}, log: slog.New(slog.DiscardHandler)})
	go func() {
		for j := range jobs {
			h.release(j.ID) // run and reported at once
		}
	}()
	defer close(jobs)
	ctx := context.Background()
	for i := range 4 {
		r := round{taken: []wire.Taken{{ID: fmt.Sprint(i)}}, suspectWaits: true}
		if !f.handOut(ctx, r) {
			t.Fatal("handOut ended")
		}
	}
	// The wait for orphans untouched: its next delay is its first, 50 ms
	// (±20%), not one doubled per round.
	if d := f.orphanWait.Next(); d > 60*time.Millisecond {
		t.Fatalf("the orphan wait grew to %v over rounds that took tasks", d)
	}
}

// Executors stopped set jobs aside, unrun; a job that waited past stale and
// is no longer wanted is dropped unrun; others run and pass on their
// result.
func TestExecutors(t *testing.T) {
	q := memory.NewQueue(&activity)
	src := sourceOf(q, func(string, error) {})
	jobs := make(chan job, 3)
	results := make(chan wire.Done, 3)
	h := newHeld()
	var ran []string
	var mu sync.Mutex
	var c counters
	e := newExecutors(executorsParams{n: 1, jobs: jobs, results: results, slots: newSlots(func() int { return 3 }),
		held: h, source: src, counters: &c, ran: func(time.Duration) {},
		execute: func(_ context.Context, tk wire.Taken) wire.Done {
			mu.Lock()
			ran = append(ran, tk.ID)
			mu.Unlock()
			return wire.Done{ID: tk.ID}
		}})
	old := time.Now().Add(-time.Hour)
	taken := []wire.Taken{{ID: "gone"}, {ID: "kept"}}
	h.add(taken)
	q.First().Hold("w1", taken...)
	q.First().Withdraw("gone")
	jobs <- job{Taken: taken[0], takenAt: old}
	jobs <- job{Taken: taken[1], takenAt: old}
	e.Start(context.Background())
	if d := <-results; d.ID != "kept" {
		t.Fatalf("result of %s, want kept", d.ID)
	}
	e.Stop()
	aside := wire.Taken{ID: "aside", Shard: 0, Private: true}
	h.add([]wire.Taken{aside})
	jobs <- job{Taken: aside, takenAt: time.Now()}
	close(jobs)
	e.Wait()
	if !slices.Equal(ran, []string{"kept"}) {
		t.Fatalf("ran %v, want only kept", ran)
	}
	if c.discarded.Load() != 1 {
		t.Fatalf("discarded %d, want 1 (gone)", c.discarded.Load())
	}
	if got := e.setAside(); !slices.Equal(got[0], []string{"!aside"}) {
		t.Fatalf("set aside %v, want the private member !aside", got)
	}
}

// Jobs that waited past stale are asked about once each: the check one
// makes covers the others waiting, and its answer holds for them (it
// asked about all of them again whenever one waited past stale).
func TestWantedCheckAsksOnce(t *testing.T) {
	q := memory.NewQueue(&activity)
	src := sourceOf(q, func(string, error) {})
	const n = 20
	jobs := make(chan job, n)
	results := make(chan wire.Done, n)
	h := newHeld()
	var c counters
	e := newExecutors(executorsParams{n: 1, jobs: jobs, results: results, slots: newSlots(func() int { return n }),
		held: h, source: src, counters: &c, ran: func(time.Duration) {}, stale: time.Millisecond,
		recheck: time.Hour, // however slow the machine, no answer gets old here
		execute: func(_ context.Context, tk wire.Taken) wire.Done {
			time.Sleep(2 * time.Millisecond) // a task longer than stale: the next job's wait passes it
			return wire.Done{ID: tk.ID}
		}})
	taken := make([]wire.Taken, n)
	for i := range taken {
		taken[i] = wire.Taken{ID: fmt.Sprint("t", i)}
	}
	taken[n/2].ID = "gone"
	h.add(taken)
	q.First().Hold("w1", taken...)
	q.First().Withdraw("gone")
	old := time.Now().Add(-time.Second)
	for _, tk := range taken {
		jobs <- job{Taken: tk, takenAt: old}
	}
	close(jobs)
	e.Start(context.Background())
	e.Wait()
	if got := len(results); got != n-1 {
		t.Fatalf("%d results, want %d (all but gone)", got, n-1)
	}
	for _, tk := range taken {
		if n := q.First().Asked(tk.ID); n != 1 {
			t.Errorf("asked about %s %d times, want once", tk.ID, n)
		}
	}
}

// The finisher reports each result to its task's shard, retries a shard
// that fails without reporting again what another shard took, and releases
// every task from the ledger.
func TestFinisherRetriesAFailedShard(t *testing.T) {
	q := memory.NewQueue(&activity, "q#1")
	src := sourceOf(q, func(string, error) {})
	src.grow(context.Background(), 2)
	h := newHeld()
	taken := []wire.Taken{{ID: "a", Shard: 0}, {ID: "b", Shard: 1}}
	h.add(taken)
	for _, tk := range taken {
		q.Shard(tk.Shard).Hold("w1", tk)
	}
	q.Shard(1).Fail("finish", errors.New("connection refused"))
	var failures atomic.Int32
	var c counters
	f := newFinisher(finisherParams{capacity: 2, source: src, held: h, counters: &c,
		failed: func(string, error) {
			if failures.Add(1) == 2 {
				q.Shard(1).Fail("finish", nil)
			}
		}})
	f.Start(context.Background())
	f.results <- wire.Done{ID: "a", Result: []byte("r"), Shard: 0}
	f.results <- wire.Done{ID: "b", Result: []byte("r"), Shard: 1}
	f.Stop()
	f.Wait()
	if n0, n1 := q.First().Calls("finish"), q.Shard(1).Calls("finish"); n0 != 1 || n1 != 3 {
		t.Fatalf("finish calls: shard 0 %d, shard 1 %d; want 1 and 3 (two failed)", n0, n1)
	}
	if c.delivered.Load() != 2 || h.size() != 0 {
		t.Fatalf("delivered %d, ledger holds %d; want 2 and 0", c.delivered.Load(), h.size())
	}
}

// Over a link on which a call of more than 100 KiB times out (slow, or
// starved of CPU), the finisher sends smaller rounds after each timeout,
// down to one result a call, and delivers every result: not stuck, though
// every call of broker.CallBytes would time out again and again.
func TestFinisherShrinksCallsThatTimeOut(t *testing.T) {
	q := memory.NewQueue(&activity)
	q.First().SetLimits(0, 100<<10)
	src := sourceOf(q, func(string, error) {})
	h := newHeld()
	const n = 40
	taken := make([]wire.Taken, n)
	for i := range taken {
		taken[i] = wire.Taken{ID: fmt.Sprint("t", i)}
		q.First().Hold("w1", taken[i])
	}
	h.add(taken)
	var c counters
	var failures atomic.Int32
	f := newFinisher(finisherParams{capacity: n, source: src, held: h, counters: &c,
		failed:  func(string, error) { failures.Add(1) },
		renewed: time.Now, stuckAfter: time.Hour, stuck: func(err error) { t.Errorf("stuck: %v", err) }})
	for _, tk := range taken {
		f.results <- wire.Done{ID: tk.ID, Result: make([]byte, 64<<10)} // 2.5 MiB in all: every full call times out
	}
	f.Start(context.Background())
	f.Stop()
	f.Wait()
	if got := q.First().Results(); len(got) != n || h.size() != 0 || c.delivered.Load() != n {
		t.Fatalf("delivered %d (counted %d), ledger holds %d; want %d, %d and 0", len(got), c.delivered.Load(), h.size(), n, n)
	}
	// All 2.5 MiB, then 512, 256 and 128 KiB time out; 64 KiB passes, and
	// a round of 128 KiB after 8 that passed times out again: a few
	// failures, not one a result.
	if k := failures.Load(); k < 4 || k > n/2 {
		t.Errorf("%d finish rounds failed, want from 4 (down to 64 KiB) to %d", k, n/2)
	}
	t.Logf("%d results of 64 KiB over a link that times out calls over 100 KiB: %d calls, %d failed", n, q.First().Calls("finish"), failures.Load())
}

// A result Redis refuses for want of memory waits apart while the others
// are delivered; after fullTries refusals a record of its failure with
// ErrRedisFull takes its place, and its task leaves the ledger.
func TestFinisherFailsWhatRedisRefuses(t *testing.T) {
	saved := fullWait
	fullWait = backoff.Backoff{Min: time.Millisecond, Max: time.Millisecond}
	t.Cleanup(func() { fullWait = saved })
	q := memory.NewQueue(&activity)
	q.First().SetLimits(1<<10, 0)
	src := sourceOf(q, func(string, error) {})
	h := newHeld()
	taken := []wire.Taken{{ID: "big"}, {ID: "small"}}
	h.add(taken)
	q.First().Hold("w1", taken...)
	big, err := codec.EncodeResult(&codec.Result{Task: "big", Attempt: 1, Values: make([]byte, 4<<10)})
	if err != nil {
		t.Fatal(err)
	}
	var c counters
	f := newFinisher(finisherParams{capacity: 2, source: src, held: h, counters: &c, failed: func(string, error) {},
		renewed: time.Now, stuckAfter: time.Hour, stuck: func(err error) { t.Errorf("stuck: %v", err) }})
	f.Start(context.Background())
	f.results <- wire.Done{ID: "big", Result: big}
	f.results <- wire.Done{ID: "small", Result: []byte("r")}
	f.Stop()
	f.Wait()
	got := q.First().Results()
	if len(got) != 2 || got[0].ID != "small" || got[1].ID != "big" {
		t.Fatalf("reported %v, want small, then big's failure", got)
	}
	res, err := codec.DecodeResult(got[1].Result, 1<<20)
	if err != nil || res.Task != "big" || res.Attempt != 1 || len(res.Fails) != 1 || res.Fails[0].Kind != codec.KindRedisFull || res.Fails[0].Index != -1 {
		t.Fatalf("big's report: %+v (%v), want every element failed with KindRedisFull", res, err)
	}
	if !errors.Is(failure.Cause(res.Fails[0]), redmap.ErrRedisFull) {
		t.Fatalf("its cause %v, want ErrRedisFull", failure.Cause(res.Fails[0]))
	}
	if n := q.First().Calls("finish"); n != fullTries+1 {
		t.Errorf("%d finish calls, want %d (refused %d times, then its failure)", n, fullTries+1, fullTries)
	}
	if h.size() != 0 || c.delivered.Load() != 2 {
		t.Fatalf("ledger holds %d, delivered %d; want 0 and 2", h.size(), c.delivered.Load())
	}
}

// A finisher that can report nothing while the worker's heartbeats are
// taken says so once stuckAfter has passed, and then tries each result
// once: one that lands still counts, one that does not is left to be
// reaped.
func TestFinisherStuck(t *testing.T) {
	q := memory.NewQueue(&activity)
	src := sourceOf(q, func(string, error) {})
	h := newHeld()
	h.add([]wire.Taken{{ID: "a"}, {ID: "b"}})
	q.First().Hold("w1", wire.Taken{ID: "a"}, wire.Taken{ID: "b"})
	q.First().Fail("finish", errors.New("i/o timeout"))
	stuck := make(chan error, 2)
	var c counters
	f := newFinisher(finisherParams{capacity: 1, source: src, held: h, counters: &c, failed: func(string, error) {},
		renewed: time.Now, stuckAfter: 100 * time.Millisecond, stuck: func(err error) { stuck <- err }})
	f.Start(context.Background())
	f.results <- wire.Done{ID: "a", Result: []byte("r")}
	select {
	case err := <-stuck:
		if !strings.Contains(err.Error(), "i/o timeout") {
			t.Errorf("stuck with %v, want the finish's error", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("never stuck")
	}
	q.First().Fail("finish", nil)
	f.results <- wire.Done{ID: "b", Result: []byte("r")}
	f.Stop()
	f.Wait()
	if len(stuck) != 0 {
		t.Error("stuck said twice")
	}
	if got := q.First().Results(); len(got) != 1 || got[0].ID != "b" || h.size() != 0 {
		t.Fatalf("delivered %v, ledger holds %d; want b alone, and 0", got, h.size())
	}
	if held := q.First().HeldBy("w1"); !slices.Equal(held, []string{"a"}) {
		t.Fatalf("held in Redis %v, want a, for a reap", held)
	}
}

// A finisher whose call failed once (a timeout), then whose result Redis
// refuses for want of memory for longer than stuckAfter, is not stuck:
// Redis answers each call, and the result ends as a record of its failure
// with ErrRedisFull. Were the worker to leave, its tasks would end with
// ErrNoWorker, not ErrRedisFull.
func TestFinisherNotStuckAtMaxmemory(t *testing.T) {
	saved := fullWait
	fullWait = backoff.Backoff{Min: 5 * time.Millisecond, Max: 5 * time.Millisecond}
	t.Cleanup(func() { fullWait = saved })
	q := memory.NewQueue(&activity)
	q.First().SetLimits(1<<10, 0)
	q.First().Hold("w1", wire.Taken{ID: "big"})
	q.First().Fail("finish", errors.New("i/o timeout"))
	src := sourceOf(q, func(string, error) {})
	h := newHeld()
	h.add([]wire.Taken{{ID: "big"}})
	big, err := codec.EncodeResult(&codec.Result{Task: "big", Values: make([]byte, 4<<10)})
	if err != nil {
		t.Fatal(err)
	}
	var c counters
	f := newFinisher(finisherParams{capacity: 1, source: src, held: h, counters: &c,
		failed:  func(string, error) { q.First().Fail("finish", nil) },
		renewed: time.Now, stuckAfter: time.Millisecond, stuck: func(err error) { t.Errorf("stuck: %v", err) }})
	f.Start(context.Background())
	f.results <- wire.Done{ID: "big", Result: big}
	f.Stop()
	f.Wait()
	got := q.First().Results()
	if len(got) != 1 {
		t.Fatalf("reported %v, want big's failure", got)
	}
	if res, err := codec.DecodeResult(got[0].Result, 1<<20); err != nil || len(res.Fails) != 1 || res.Fails[0].Kind != codec.KindRedisFull {
		t.Fatalf("big's report: %+v (%v), want its elements failed with KindRedisFull", res, err)
	}
}

// A finisher whose finishes fail while the heartbeats fail too (Redis
// gone) is not stuck: the lease lapses by itself.
func TestFinisherNotStuckWhileRedisIsGone(t *testing.T) {
	q := memory.NewQueue(&activity)
	src := sourceOf(q, func(string, error) {})
	h := newHeld()
	h.add([]wire.Taken{{ID: "a"}})
	q.First().Hold("w1", wire.Taken{ID: "a"})
	q.First().Fail("finish", errors.New("connection refused"))
	started := time.Now()
	var fails atomic.Int32
	var c counters
	f := newFinisher(finisherParams{capacity: 1, source: src, held: h, counters: &c,
		failed: func(string, error) {
			if fails.Add(1) == 6 {
				q.First().Fail("finish", nil)
			}
		},
		renewed: func() time.Time { return started }, stuckAfter: time.Millisecond, stuck: func(err error) { t.Errorf("stuck: %v", err) }})
	f.Start(context.Background())
	f.results <- wire.Done{ID: "a", Result: []byte("r")}
	f.Stop()
	f.Wait()
	if c.delivered.Load() != 1 {
		t.Fatalf("delivered %d, want 1", c.delivered.Load())
	}
}

// The maintainer publishes the worker's info, starts a drain an operator
// asked for once, cancels running tasks whose batch is gone, writes failure
// records, and says a failed step for operators until one tick succeeds.
func TestMaintainer(t *testing.T) {
	q := memory.NewQueue(&activity)
	s := q.First()
	src := sourceOf(q, func(string, error) {})
	h := newHeld()
	h.add([]wire.Taken{{ID: "running"}})
	cancelled := make(chan struct{})
	var once sync.Once
	h.start("running", func() { once.Do(func() { close(cancelled) }) })
	s.SetDrain("w1", true) // "running" is in no task set: unwanted
	s.Hold("dead", wire.Taken{ID: "d1"}, wire.Taken{ID: "d2"}, wire.Taken{ID: "d3"}, wire.Taken{ID: "d4"})
	if _, err := s.Heartbeat(context.Background(), &broker.HeartbeatParams{Worker: "dead", Lease: -time.Millisecond}); err != nil { // its lease lapsed
		t.Fatal(err)
	}
	var fl failure.Log
	fl.Note("negate", "t1", []codec.Failure{{Index: 0, Kind: codec.KindError, Msg: "boom 1"}, {Index: 1, Kind: codec.KindError, Msg: "boom 2"}})
	var drains atomic.Int32
	var draining atomic.Bool
	var beats []bool
	var c counters
	var p problem
	m := newMaintainer(maintainerParams{wid: "w1", lease: time.Minute, source: src, held: h, failures: &fl,
		counters: &c, info: func() wire.WorkerInfo { return wire.WorkerInfo{Host: "here"} }, problem: &p,
		failed: func(op string, err error) { p.set(op + ": " + err.Error()) },
		drain: func() {
			drains.Add(1)
			draining.Store(true)
		},
		draining: draining.Load, beat: func(ok bool) { beats = append(beats, ok) }, log: slog.New(slog.DiscardHandler)}, time.Hour)
	ctx := context.Background()
	if err := m.tick(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(beats, []bool{true}) {
		t.Fatalf("the probes were told of heartbeats %v, want one taken", beats)
	}
	<-cancelled
	if err := m.tick(ctx); err != nil {
		t.Fatal(err)
	}
	if drains.Load() != 1 {
		t.Fatalf("drain started %d times, want once", drains.Load())
	}
	if c.reaped.Load() != 1 || c.requeued.Load() != 4 {
		t.Fatalf("reaped %d requeued %d, want 1 and 4", c.reaped.Load(), c.requeued.Load())
	}
	if gs, infos := s.Groups(), s.Infos(); len(gs) != 1 || gs[0].Count != 2 || gs[0].Fingerprint != "boom <n>" || gs[0].Sample != "boom 2" ||
		len(infos) != 2 || infos[0].Host != "here" {
		t.Fatalf("failure groups %+v, infos %v", gs, infos)
	}
	s.Fail("reap", errors.New("connection refused"))
	_ = m.tick(ctx)
	if p.get() == "" {
		t.Fatal("a failed reap is not said for operators")
	}
	s.Fail("reap", nil)
	_ = m.tick(ctx)
	if got := p.get(); got != "" {
		t.Fatalf("problem %q after a clean tick, want none", got)
	}
}

// A running job whose context was cancelled and whose function ignores it
// is abandoned abandonAfter later: its slot and the lock a suspect holds
// (lost wire.SuspectAfter times) are freed, another goroutine serves the next job, the
// executors stop without waiting for it, and when it returns at last its
// result is not passed on, and abandon's returned function is called. So
// too when it was cancelled for a backup's race it lost, which abandon is
// told (outrun), and only then.
func TestExecutorsAbandonJobIgnoringCancel(t *testing.T) {
	for _, outrun := range []bool{false, true} {
		t.Run(fmt.Sprint("outrun=", outrun), func(t *testing.T) {
			q := memory.NewQueue(&activity)
			src := sourceOf(q, func(string, error) {})
			jobs := make(chan job, 2)
			results := make(chan wire.Done, 2)
			h := newHeld()
			var c counters
			running := make(chan struct{})
			release := make(chan struct{})
			var abandoned []string
			var mu sync.Mutex
			returned := make(chan struct{})
			e := newExecutors(executorsParams{n: 1, jobs: jobs, results: results, slots: newSlots(func() int { return 2 }),
				held: h, source: src, counters: &c, ran: func(time.Duration) {}, stale: time.Hour,
				abandonAfter: 10 * time.Millisecond,
				abandon: func(_ context.Context, tk wire.Taken, outran bool) func() {
					mu.Lock()
					abandoned = append(abandoned, fmt.Sprint(tk.ID, " outrun:", outran))
					mu.Unlock()
					return func() { close(returned) }
				},
				execute: func(_ context.Context, tk wire.Taken) wire.Done {
					if tk.ID == "stuck" {
						close(running)
						<-release // ignores its context
					}
					return wire.Done{ID: tk.ID}
				}})
			taken := []wire.Taken{{ID: "stuck", Attempt: wire.SuspectAfter}, {ID: "next"}}
			h.add(taken)
			jobs <- job{Taken: taken[0], takenAt: time.Now()}
			jobs <- job{Taken: taken[1], takenAt: time.Now()}
			e.Start(context.Background())
			<-running
			// As the maintainer does when its batch is cancelled, or its other
			// copy won a backup's race.
			if outrun {
				h.cancel([]string{"stuck"}, []string{"stuck"})
			} else {
				h.cancel([]string{"stuck"}, nil)
			}
			if d := <-results; d.ID != "next" {
				t.Fatalf("result of %s, want next", d.ID)
			}
			close(jobs)
			e.Stop()
			e.Wait() // returns with stuck still running
			mu.Lock()
			if want := fmt.Sprint("stuck outrun:", outrun); !slices.Equal(abandoned, []string{want}) {
				t.Fatalf("abandoned %v, want [%s]", abandoned, want)
			}
			mu.Unlock()
			// stuck is dropped from the ledger; next stays until the finisher
			// (none here) reports it.
			if w := h.waiting(); h.size() != 1 || !slices.Equal(w[0], []string{"next"}) || c.discarded.Load() != 1 {
				t.Fatalf("ledger %v (%d), discarded %d; want only next left, stuck dropped", w, h.size(), c.discarded.Load())
			}
			close(release)
			<-returned
			select {
			case d := <-results:
				t.Fatalf("the abandoned job's result (%s) was passed on", d.ID)
			default:
			}
		})
	}
}
