package worker

import (
	"context"
	"log/slog"
	"runtime"
	"time"

	"github.com/redmap/redmap/internal/backoff"
	"github.com/redmap/redmap/internal/part"
	"github.com/redmap/redmap/internal/wire"
)

// fetcher takes tasks from the source and hands them to the executors: as
// many per round trip as there are free slots, the worker's private list
// first; while there are none, it blocks on its bell with the next take
// pipelined behind the wait (WaitTake), so that a wake-up brings its tasks
// along. It stops when its context ends (the worker's, or Stop: an
// operator drains it), and then closes jobs.
type fetcher struct {
	fetcherParams
	*part.Runner
	orphanWait backoff.Backoff // between takes refused a suspect for orphans; owned by the fetch loop
}

// fetcherParams is what a fetcher is built from.
type fetcherParams struct {
	wid         string
	heartbeat   time.Duration // Options.Heartbeat: how often to look for orphans
	concurrency int           // Options.Concurrency
	jobs        chan<- job    // to the executors; the fetcher closes it when it stops
	source      *source
	held        *held
	slots       *slots
	counters    *counters
	failed      func(op string, err error)
	// stopping is called once the fetcher is told to stop, before it has:
	// the worker drains.
	stopping func()
	log      *slog.Logger
}

// job is a taken task, and when it was taken.
type job struct {
	wire.Taken
	takenAt time.Time
}

func newFetcher(p fetcherParams) *fetcher {
	f := &fetcher{fetcherParams: p}
	f.Runner = part.New(f.run)
	return f
}

func (f *fetcher) run(ctx context.Context) {
	defer close(f.jobs)
	// Once stopped, ring the worker's own bells, so that a blocking wait for
	// work returns now rather than at its timeout.
	rang := make(chan struct{})
	unring := context.AfterFunc(ctx, func() {
		defer close(rang)
		f.stopping()
		f.source.stopped(context.WithoutCancel(ctx))
	})
	f.fetch(ctx)
	if !unring() {
		<-rang
	}
}

// fetch takes tasks until ctx ends. Every Heartbeat it also gives back
// orphans (see giveBackOrphans); it does so here, between takes, so that no
// take is in flight while it compares.
func (f *fetcher) fetch(ctx context.Context) {
	var bo backoff.Backoff
	checkAt := time.Now().Add(f.heartbeat)
	for ctx.Err() == nil {
		if !f.source.await(ctx) {
			return
		}
		free := f.slots.acquire(ctx)
		if free == 0 {
			return
		}
		r := f.source.take(ctx, free, f.room, f.held.size)
		f.slots.release(free - len(r.taken))
		if r.err != nil {
			if ctx.Err() != nil {
				return
			}
			f.failed("take", r.err)
			if !bo.Wait(ctx) {
				return
			}
			continue
		}
		bo.Reset()
		f.counters.taken.Add(int64(len(r.taken)))
		if !f.handOut(ctx, r) {
			return
		}
		if r.drained {
			// The next take waits for a bell: let the executors start the
			// tasks just handed out first, on this processor, rather than
			// after the wait is sent (a lone task's result then leaves a
			// round trip's writing sooner).
			runtime.Gosched()
		}
		if r.room && len(r.taken) == 0 {
			// A limited task waits for room to start: take again once one
			// of the worker's tasks ends (a prefetch slot free now would
			// bring the same refusal at once, in a loop).
			select {
			case <-f.held.released():
			case <-ctx.Done():
				return
			}
		}
		if time.Now().After(checkAt) || r.suspectWaits {
			f.giveBackOrphans(ctx)
			checkAt = time.Now().Add(f.heartbeat)
		}
	}
}

// room returns how many tasks of limited functions the worker could start
// now: Concurrency less what it holds. A limited task is never taken ahead
// to wait in the prefetch, where it would hold its limit's room unrun.
func (f *fetcher) room() int { return max(0, f.concurrency-f.held.size()) }

// handOut hands a round's tasks to the executors; it reports false if ctx
// ended.
//
// A suspect (a task lost wire.SuspectAfter times: maybe a poison pill)
// comes alone in its take, to a worker that holds nothing else (take.lua).
// Nothing more is taken until it is reported, so nothing else the worker
// holds dies with it: a poison pill costs an innocent task at most the
// attempts it lost when it shared a worker with the pill in the pill's
// runs before it was a suspect (two). A round that left a suspect
// for want of an empty worker is followed by a wait until it holds nothing
// (and, by fetch, a give-back of orphans), then another take.
func (f *fetcher) handOut(ctx context.Context, r round) bool {
	if !f.hand(ctx, r.taken) && !r.suspectWaits {
		f.orphanWait.Reset()
		return true
	}
	select {
	case <-f.held.emptied():
	case <-ctx.Done():
		return false
	}
	if !r.suspectWaits { // it took the suspect, and reported it
		f.orphanWait.Reset()
		return true
	}
	// The worker held nothing by its ledger already and took nothing, yet
	// was refused the suspect: orphans in Redis (a lost reply) were the
	// reason. fetch gives them back; wait before the next try, in case that
	// fails. (A round that took tasks before it met the suspect was refused
	// for those: no wait. Waiting then, with a delay that grew to 2 s and
	// was never reset while suspects waited behind other work, slowed every
	// worker to a task or two every 2 s in make chaos-cluster.)
	if r.holding == 0 && len(r.taken) == 0 {
		return f.orphanWait.Wait(ctx)
	}
	return true
}

// hand records taken tasks as held and hands them to the executors. It
// reports whether a suspect was among them. Before a suspect runs, the
// worker gives back the tasks Redis says it holds but it never received (a
// take on another shard whose reply was lost): nothing but the suspect may
// be held when it runs.
func (f *fetcher) hand(ctx context.Context, taken []wire.Taken) (suspect bool) {
	f.held.add(taken)
	for _, t := range taken {
		suspect = suspect || t.Suspect()
	}
	if suspect && len(f.source.shards()) > 1 {
		f.giveBackOrphans(ctx)
	}
	now := time.Now()
	for _, t := range taken {
		f.jobs <- job{Taken: t, takenAt: now}
	}
	return suspect
}

// giveBackOrphans puts back tasks that Redis says the worker holds but that
// its ledger does not have: those of a take whose reply was lost on a
// dropped connection. It looks at every shard.
func (f *fetcher) giveBackOrphans(ctx context.Context) {
	members, err := f.source.held(ctx)
	if err != nil {
		f.failed("read held tasks", err)
		return
	}
	orphans := make(map[int][]string)
	for i, ms := range members {
		if o := f.held.orphans(ms); len(o) > 0 {
			orphans[i] = o
		}
	}
	if len(orphans) == 0 {
		return
	}
	n, err := f.source.giveBack(ctx, orphans, false)
	f.counters.givenBack.Add(int64(n))
	if err != nil {
		f.failed("give back orphaned tasks", err)
		return
	}
	f.log.Info("gave back tasks held but never received", "tasks", n)
}
