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
	"github.com/redmap/redmap/internal/backoff"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/redisbroker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/failure"
	"github.com/redmap/redmap/internal/memo"
	"github.com/redmap/redmap/internal/redistest"
)

// Unit tests of the worker's parts, on a queue of the package's shared
// redis-server that each test sets up as its managers would (broker_test.go).
// The suites with managers and worker processes are the package's, the
// manager's and cmd/redmap's other tests.

// sourceOf returns a source of worker w1 over s's queue, serving what s
// queued.
func sourceOf(s *scene, failed func(string, error)) *source {
	return newSource(sourceParams{wid: "w1", lease: time.Minute, idleWait: 20 * time.Millisecond, first: s.first(),
		serves: s.serves, open: s.open, failed: failed, log: slog.New(slog.DiscardHandler)})
}

// listening returns a context for src's calls that ends with the test,
// whose end then rings src's bells, as a worker that stops does (a bell
// listener blocks in Redis for a second at least), and waits for its
// listeners to return, before the test's client closes under them.
func listening(t *testing.T, src *source) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		src.stopped(context.Background())
		src.closed()
	})
	return ctx
}

// until polls cond, reading Redis, until it holds.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	redistest.Eventually(t, what, cond)
}

var negate = redmap.Func("negate", func(_ context.Context, x int) (int, error) { return -x, nil })

// outputs decodes the two outputs of a result.
func outputs(t *testing.T, r *codec.Result) []int {
	t.Helper()
	if len(r.Fails) > 0 {
		t.Fatalf("task %s failed: %+v", r.Task, r.Fails)
	}
	ys := make([]int, 2)
	if err := codec.DecodeElements(r.Values, ys); err != nil {
		t.Fatal(err)
	}
	return ys
}

// sceneWorker is a worker over s's queue, with opts, that registered
// negate.
func sceneWorker(t *testing.T, s *scene, opts Options) *Worker {
	t.Helper()
	opts.Queue = s.name
	opts, err := opts.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	w := assemble(opts, s.first(), s.open, memo.New(cache.NewStore(s.c, opts.Prefix, 0), 1<<20))
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
	s := newScene(t, 3)
	w := sceneWorker(t, s, Options{Concurrency: 2, Heartbeat: 10 * time.Millisecond})
	stop := run(t, w)
	inputs := map[string][]int{} // task id -> its elements, of shard i and task j
	for i := range s.shards {
		for j := range 5 {
			tk := s.task(negate, 0, i, j)
			inputs[tk.ID] = []int{i, j}
			s.add(i, tk)
		}
	}
	for i := range s.shards {
		until(t, fmt.Sprintf("shard %d's 5 tasks are reported", i), func() bool { return len(s.results(i)) == 5 })
		until(t, fmt.Sprintf("the worker is live on shard %d", i), func() bool { return slices.Contains(s.live(i), w.ID()) })
	}
	stop()
	for i := range s.shards {
		for _, r := range s.results(i) {
			in := inputs[r.Task]
			if ys := outputs(t, r); len(in) != 2 || in[0] != i || !slices.Equal(ys, []int{-in[0], -in[1]}) {
				t.Fatalf("task %s reported to shard %d: %v, of elements %v; want the negated elements of a task of that shard", r.Task, i, ys, in)
			}
		}
		// Its lease (10 s) runs long past the test: it is gone only if it retired.
		if slices.Contains(s.live(i), w.ID()) {
			t.Fatalf("shard %d: the worker did not retire", i)
		}
		if held := s.heldBy(i, w.ID()); len(held) != 0 {
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
	s := newScene(t, 3)
	for i := range s.shards {
		for j := range 3 {
			s.add(i, s.task(negate, 0, i, j))
		}
	}
	src := sourceOf(s, func(op string, err error) { t.Errorf("%s: %v", op, err) })
	ctx := listening(t, src)
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
	s := newScene(t, 3)
	suspect := s.task(negate, wire.SuspectAfter, 0)
	s.add(0, suspect, s.task(negate, 0, 1))
	for i := 1; i < len(s.shards); i++ {
		for j := range 5 {
			s.add(i, s.task(negate, 0, i, j))
		}
	}
	src := sourceOf(s, func(op string, err error) { t.Errorf("%s: %v", op, err) })
	ctx := listening(t, src)
	src.grow(ctx, 3)
	r := src.take(ctx, 4, func() int { return 4 }, func() int { return 1 }) // holding a task
	if r.err != nil || len(r.taken) != 0 || !r.suspectWaits {
		t.Fatalf("a take holding a task: %v, %v, suspect waits %v; want nothing taken and the suspect waiting", r.taken, r.err, r.suspectWaits)
	}
	if !src.await(ctx) {
		t.Fatal("await ended")
	}
	r = src.take(ctx, 4, func() int { return 4 }, func() int { return 0 }) // emptied
	if r.err != nil || len(r.taken) != 1 || r.taken[0].ID != suspect.ID {
		t.Fatalf("the take once empty: %v, %v; want the suspect alone", r.taken, r.err)
	}
}

// A take that fails on one shard goes on to the next, and says the error
// only if no shard gave tasks.
func TestSourceTakesPastAFailedShard(t *testing.T) {
	s := newScene(t, 2)
	a := s.task(negate, 0, 1)
	s.add(1, a)
	s.first().fail("take", errors.New("connection refused"))
	src := sourceOf(s, func(string, error) {})
	src.grow(context.Background(), 2)
	r := src.take(context.Background(), 1, func() int { return 1 }, func() int { return 0 })
	if r.err != nil || len(r.taken) != 1 || r.taken[0].ID != a.ID {
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
	s := newScene(t, 1)
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
	suspect := s.task(seen, wire.SuspectAfter, 2)
	s.add(0, s.task(negate, 0, 1), suspect, s.task(negate, 0, 3))
	w = sceneWorker(t, s, Options{Concurrency: 4, Heartbeat: 10 * time.Millisecond})
	if err := w.Register(seen); err != nil {
		t.Fatal(err)
	}
	stop := run(t, w)
	until(t, "all three reported", func() bool { return len(s.results(0)) == 3 })
	stop()
	if running.Load() != 1 {
		t.Fatalf("the suspect ran %d times, want 1", running.Load())
	}
	if most.Load() != 1 {
		t.Fatalf("the worker held %d tasks when the suspect started, want it alone", most.Load())
	}
	if got, _ := alone.Load().(string); !strings.Contains(got, suspect.ID+" runs alone: lost 2 times") {
		t.Fatalf("the worker's info said %q as the suspect ran, want why it runs alone", got)
	}
	if got, _ := aloneTask.Load().(string); got != suspect.ID {
		t.Fatalf("the worker's info named task %q as the suspect ran, want %s", got, suspect.ID)
	}
	if st := w.Stats(); st.Suspects != 1 || w.info().Alone != "" || w.info().AloneTask != "" {
		t.Fatalf("after the run: %d suspects, alone %q; want 1 and none", st.Suspects, w.info().Alone)
	}
	holdings := s.first().takes()
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
	h := newHeld()
	jobs := make(chan job, 4)
	f := newFetcher(fetcherParams{wid: "w", heartbeat: time.Second, jobs: jobs, source: sourceOf(newScene(t, 1), func(string, error) {}),
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
	s := newScene(t, 1)
	src := sourceOf(s, func(string, error) {})
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
	gone, kept := s.task(negate, 0, 1), s.task(negate, 0, 2)
	taken := []wire.Taken{gone, kept}
	h.add(taken)
	s.hold(0, "w1", taken...)
	s.withdraw(0, gone.ID)
	jobs <- job{Taken: taken[0], takenAt: old}
	jobs <- job{Taken: taken[1], takenAt: old}
	e.Start(context.Background())
	if d := <-results; d.ID != kept.ID {
		t.Fatalf("result of %s, want kept", d.ID)
	}
	e.Stop()
	aside := wire.Taken{ID: "aside", Shard: 0, Private: true}
	h.add([]wire.Taken{aside})
	jobs <- job{Taken: aside, takenAt: time.Now()}
	close(jobs)
	e.Wait()
	if !slices.Equal(ran, []string{kept.ID}) {
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
	s := newScene(t, 1)
	src := sourceOf(s, func(string, error) {})
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
		taken[i] = s.task(negate, 0, i)
	}
	h.add(taken)
	s.hold(0, "w1", taken...)
	s.withdraw(0, taken[n/2].ID) // gone
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
		if n := s.first().askedAbout(tk.ID); n != 1 {
			t.Errorf("asked about %s %d times, want once", tk.ID, n)
		}
	}
}

// The finisher reports each result to its task's shard, retries a shard
// that fails without reporting again what another shard took, and releases
// every task from the ledger.
func TestFinisherRetriesAFailedShard(t *testing.T) {
	s := newScene(t, 2)
	src := sourceOf(s, func(string, error) {})
	src.grow(context.Background(), 2)
	h := newHeld()
	taken := []wire.Taken{s.task(negate, 0, 1), s.task(negate, 0, 2)}
	taken[1].Shard = 1
	h.add(taken)
	for _, tk := range taken {
		s.hold(tk.Shard, "w1", tk)
	}
	s.shards[1].fail("finish", errors.New("connection refused"))
	var failures atomic.Int32
	var c counters
	f := newFinisher(finisherParams{capacity: 2, source: src, held: h, counters: &c,
		failed: func(string, error) {
			if failures.Add(1) == 2 {
				s.shards[1].fail("finish", nil)
			}
		}})
	f.Start(context.Background())
	for _, tk := range taken {
		f.results <- wire.Done{ID: tk.ID, Result: result(t, tk.ID, 1), Shard: tk.Shard}
	}
	f.Stop()
	f.Wait()
	if n0, n1 := s.first().count("finish"), s.shards[1].count("finish"); n0 != 1 || n1 != 3 {
		t.Fatalf("finish calls: shard 0 %d, shard 1 %d; want 1 and 3 (two failed)", n0, n1)
	}
	if c.delivered.Load() != 2 || h.size() != 0 {
		t.Fatalf("delivered %d, ledger holds %d; want 2 and 0", c.delivered.Load(), h.size())
	}
	for i, tk := range taken {
		if got := s.delivered(i); !slices.Equal(got, []string{tk.ID}) {
			t.Fatalf("shard %d delivered %v, want %s once", i, got, tk.ID)
		}
	}
}

// Over a link on which a call of more than 100 KiB times out (slow, or
// starved of CPU), the finisher sends smaller rounds after each timeout,
// down to one result a call, and delivers every result: not stuck, though
// every call of broker.CallBytes would time out again and again.
func TestFinisherShrinksCallsThatTimeOut(t *testing.T) {
	s := newScene(t, 1)
	s.first().maxCall = 100 << 10
	src := sourceOf(s, func(string, error) {})
	h := newHeld()
	const n = 40
	taken := make([]wire.Taken, n)
	for i := range taken {
		taken[i] = s.task(negate, 0, i)
	}
	s.hold(0, "w1", taken...)
	h.add(taken)
	var c counters
	var failures atomic.Int32
	f := newFinisher(finisherParams{capacity: n, source: src, held: h, counters: &c,
		failed:  func(string, error) { failures.Add(1) },
		renewed: time.Now, stuckAfter: time.Hour, stuck: func(err error) { t.Errorf("stuck: %v", err) }})
	for _, tk := range taken {
		f.results <- wire.Done{ID: tk.ID, Result: result(t, tk.ID, 64<<10)} // 2.5 MiB in all: every full call times out
	}
	f.Start(context.Background())
	f.Stop()
	f.Wait()
	if got := s.delivered(0); len(got) != n || h.size() != 0 || c.delivered.Load() != n {
		t.Fatalf("delivered %d (counted %d), ledger holds %d; want %d, %d and 0", len(got), c.delivered.Load(), h.size(), n, n)
	}
	// All 2.5 MiB, then 512, 256 and 128 KiB time out; 64 KiB passes, and
	// a round of 128 KiB after 8 that passed times out again: a few
	// failures, not one a result.
	if k := failures.Load(); k < 4 || k > n/2 {
		t.Errorf("%d finish rounds failed, want from 4 (down to 64 KiB) to %d", k, n/2)
	}
	t.Logf("%d results of 64 KiB over a link that times out calls over 100 KiB: %d calls, %d failed", n, s.first().count("finish"), failures.Load())
}

// A result Redis refuses for want of memory (at maxmemory, the HSET of a
// result staged beside the result list, over broker.Inline bytes) waits
// apart while the others are delivered; after fullTries refusals a record
// of its failure with ErrRedisFull takes its place, and its task leaves the
// ledger.
func TestFinisherFailsWhatRedisRefuses(t *testing.T) {
	saved := fullWait
	fullWait = backoff.Backoff{Min: time.Millisecond, Max: time.Millisecond}
	t.Cleanup(func() { fullWait = saved })
	srv := redistest.Start(t)
	s := sceneOn(t, srv, 1)
	src := sourceOf(s, func(string, error) {})
	h := newHeld()
	big, small := s.task(negate, 0, 1), s.task(negate, 0, 2)
	taken := []wire.Taken{big, small}
	h.add(taken)
	s.hold(0, "w1", taken...)
	bigResult, err := codec.EncodeResult(&codec.Result{Task: big.ID, Attempt: 1, Values: make([]byte, 4<<10)})
	if err != nil {
		t.Fatal(err)
	}
	full(t, srv)
	var c counters
	f := newFinisher(finisherParams{capacity: 2, source: src, held: h, counters: &c, failed: func(string, error) {},
		renewed: time.Now, stuckAfter: time.Hour, stuck: func(err error) { t.Errorf("stuck: %v", err) }})
	// Both before it starts: one call carries them (small delivered, big
	// refused), and fullTries-1 more big alone.
	f.results <- wire.Done{ID: big.ID, Result: bigResult}
	f.results <- wire.Done{ID: small.ID, Result: result(t, small.ID, 1)}
	f.Start(context.Background())
	f.Stop()
	f.Wait()
	got := s.results(0)
	if len(got) != 2 || got[0].Task != small.ID || got[1].Task != big.ID {
		t.Fatalf("reported %v, want small, then big's failure", s.delivered(0))
	}
	res := got[1]
	if res.Attempt != 1 || len(res.Fails) != 1 || res.Fails[0].Kind != codec.KindRedisFull || res.Fails[0].Index != -1 {
		t.Fatalf("big's report: %+v, want every element failed with KindRedisFull", res)
	}
	if !errors.Is(failure.Cause(res.Fails[0]), redmap.ErrRedisFull) {
		t.Fatalf("its cause %v, want ErrRedisFull", failure.Cause(res.Fails[0]))
	}
	if n := s.first().count("finish"); n != fullTries+1 {
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
	s := newScene(t, 1)
	src := sourceOf(s, func(string, error) {})
	h := newHeld()
	a, b := s.task(negate, 0, 1), s.task(negate, 0, 2)
	h.add([]wire.Taken{a, b})
	s.hold(0, "w1", a, b)
	s.first().fail("finish", errors.New("i/o timeout"))
	stuck := make(chan error, 2)
	var c counters
	f := newFinisher(finisherParams{capacity: 1, source: src, held: h, counters: &c, failed: func(string, error) {},
		renewed: time.Now, stuckAfter: 100 * time.Millisecond, stuck: func(err error) { stuck <- err }})
	f.Start(context.Background())
	f.results <- wire.Done{ID: a.ID, Result: result(t, a.ID, 1)}
	select {
	case err := <-stuck:
		if !strings.Contains(err.Error(), "i/o timeout") {
			t.Errorf("stuck with %v, want the finish's error", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("never stuck")
	}
	s.first().fail("finish", nil)
	f.results <- wire.Done{ID: b.ID, Result: result(t, b.ID, 1)}
	f.Stop()
	f.Wait()
	if len(stuck) != 0 {
		t.Error("stuck said twice")
	}
	if got := s.delivered(0); !slices.Equal(got, []string{b.ID}) || h.size() != 0 {
		t.Fatalf("delivered %v, ledger holds %d; want b alone, and 0", got, h.size())
	}
	if held := s.heldBy(0, "w1"); !slices.Equal(held, []string{a.ID}) {
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
	srv := redistest.Start(t)
	s := sceneOn(t, srv, 1)
	big := s.task(negate, 0, 1)
	s.hold(0, "w1", big)
	full(t, srv)
	s.first().fail("finish", errors.New("i/o timeout"))
	src := sourceOf(s, func(string, error) {})
	h := newHeld()
	h.add([]wire.Taken{big})
	var c counters
	f := newFinisher(finisherParams{capacity: 1, source: src, held: h, counters: &c,
		failed:  func(string, error) { s.first().fail("finish", nil) },
		renewed: time.Now, stuckAfter: time.Millisecond, stuck: func(err error) { t.Errorf("stuck: %v", err) }})
	f.Start(context.Background())
	f.results <- wire.Done{ID: big.ID, Result: result(t, big.ID, 4<<10)}
	f.Stop()
	f.Wait()
	got := s.results(0)
	if len(got) != 1 || got[0].Task != big.ID {
		t.Fatalf("reported %v, want big's failure", s.delivered(0))
	}
	if res := got[0]; len(res.Fails) != 1 || res.Fails[0].Kind != codec.KindRedisFull {
		t.Fatalf("big's report: %+v, want its elements failed with KindRedisFull", res)
	}
}

// A finisher whose finishes fail while the heartbeats fail too (Redis
// gone) is not stuck: the lease lapses by itself.
func TestFinisherNotStuckWhileRedisIsGone(t *testing.T) {
	s := newScene(t, 1)
	src := sourceOf(s, func(string, error) {})
	h := newHeld()
	a := s.task(negate, 0, 1)
	h.add([]wire.Taken{a})
	s.hold(0, "w1", a)
	s.first().fail("finish", errors.New("connection refused"))
	started := time.Now()
	var fails atomic.Int32
	var c counters
	f := newFinisher(finisherParams{capacity: 1, source: src, held: h, counters: &c,
		failed: func(string, error) {
			if fails.Add(1) == 6 {
				s.first().fail("finish", nil)
			}
		},
		renewed: func() time.Time { return started }, stuckAfter: time.Millisecond, stuck: func(err error) { t.Errorf("stuck: %v", err) }})
	f.Start(context.Background())
	f.results <- wire.Done{ID: a.ID, Result: result(t, a.ID, 1)}
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
	s := newScene(t, 1)
	src := sourceOf(s, func(string, error) {})
	h := newHeld()
	running := s.task(negate, 0, 1) // never submitted: in no task set, unwanted
	h.add([]wire.Taken{running})
	cancelled := make(chan struct{})
	var once sync.Once
	h.start(running.ID, func() { once.Do(func() { close(cancelled) }) })
	op := redisbroker.NewAdmin(s.c, DefaultPrefix)
	if err := op.Drain(context.Background(), &broker.DrainParams{Queue: s.name, Worker: "w1"}); err != nil {
		t.Fatal(err)
	}
	s.hold(0, "dead", s.task(negate, 0, 1), s.task(negate, 0, 2), s.task(negate, 0, 3), s.task(negate, 0, 4))
	if _, err := s.first().Heartbeat(context.Background(), &broker.HeartbeatParams{Worker: "dead", Lease: -time.Millisecond}); err != nil { // its lease lapsed
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
	if !slices.Equal(beats, []bool{true, true}) {
		t.Fatalf("the probes were told of heartbeats %v, want one a tick", beats)
	}
	failures, err := op.Failures(ctx, &broker.QueueParams{Queue: s.name})
	if err != nil {
		t.Fatal(err)
	}
	if gs := failures.Groups; len(gs) != 1 || gs[0].Count != 2 || gs[0].Fingerprint != "boom <n>" || gs[0].Sample != "boom 2" {
		t.Fatalf("failure groups %+v, want one of the 2 failures", gs)
	}
	workers, err := op.Workers(ctx, &broker.QueueParams{Queue: s.name})
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(workers, func(r wire.Registered) bool { return r.ID == "w1" }); i < 0 || workers[i].Info.Host != "here" {
		t.Fatalf("workers %+v, want w1's info published", workers)
	}
	s.first().fail("reap", errors.New("connection refused"))
	_ = m.tick(ctx)
	if p.get() == "" {
		t.Fatal("a failed reap is not said for operators")
	}
	s.first().fail("reap", nil)
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
			src := sourceOf(newScene(t, 1), func(string, error) {})
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
