package worker

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/backoff"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/part"
)

// finisher reports results to Redis as the executors pass them on, as many
// per script call as are waiting (each call at most broker.CallBytes), and
// releases their tasks from the ledger. It is a Drain part: Stop (the
// executors have returned) closes its input, not its context, and it
// returns once it has reported the last result, whatever happened to the
// caller.
//
// A result Redis refuses for want of memory (maxmemory) waits, apart from
// the others, and is tried again, up to fullTries times with a growing
// delay (about 10 s in all), or not at all if it is larger than
// broker.CallBytes; then its elements fail with redmap.ErrRedisFull, in a
// small record of the failure sent in its place. The others go on being
// reported meanwhile: one batch's refused results never hold back
// another's.
//
// A worker that cannot report results while Redis takes its heartbeats
// would keep its tasks from everyone for ever: once no result could be
// reported for stuckAfter while heartbeats were taken, the finisher says so
// (stuck), and the worker stops taking tasks and renewing its lease, so
// that its tasks are reaped, their attempts counted, and Run returns an
// error.
type finisher struct {
	*part.Runner
	finisherParams
	results chan wire.Done

	// owned by report
	refused map[string]int // task id -> refusals for want of memory
	waiting []refusedDone  // refused results, by when to try again
	failing time.Time      // since when no result could be reported; zero if the last call did
	gaveUp  bool           // stuck was told
	// shrunk bounds the bytes of results sent in one round after calls
	// failed: halved at each failure (down to one result a call), doubled
	// after growAfter rounds in a row passed, 0 (no bound but
	// broker.CallBytes a call) once back there. On a link slow or starved
	// enough that a call of CallBytes outlasts the read timeout, every call
	// would time out again, and the worker leave, stuck, though smaller
	// ones would pass.
	shrunk int
	passed int // rounds in a row that passed since shrunk last changed
}

// growAfter is how many rounds in a row must pass before a shrunk round
// doubles: growing at each would fail every other round on a link that
// carries one size and not the next.
const growAfter = 8

// refusedDone is a result Redis refused for want of memory, and when to try
// it again.
type refusedDone struct {
	wire.Done
	at time.Time
}

// finisherParams is what a finisher is built from.
type finisherParams struct {
	capacity int // results that may wait to be reported
	source   *source
	held     *held
	counters *counters
	failed   func(op string, err error)
	// renewed returns when Redis last took the worker's heartbeat.
	renewed func() time.Time
	// stuckAfter is how long results may fail to be reported, while
	// heartbeats are taken, before stuck is called (once).
	stuckAfter time.Duration
	stuck      func(err error)
}

// maxFinish caps the results reported in one round of Finish calls.
const maxFinish = 1000

// fullTries is how many times a result Redis refuses for want of memory is
// sent before its elements fail with ErrRedisFull; fullWait spaces the
// tries, doubling from its Min to its Max: about 10 s in all.
const fullTries = 8

var fullWait = backoff.Backoff{Min: 100 * time.Millisecond, Max: 2 * time.Second}

// finishTries is how many times a stopping worker sends results that fail
// otherwise (Redis unreachable) before it leaves them, and their tasks, to
// be reaped.
const finishTries = 10

func newFinisher(p finisherParams) *finisher {
	f := &finisher{finisherParams: p, results: make(chan wire.Done, p.capacity), refused: make(map[string]int)}
	f.Runner = part.Drain(f.report, func() { close(f.results) })
	return f
}

// report reports the results passed on, as many per round as wait, and
// those refused for want of memory when their time comes, until the input
// closes and none is left.
func (f *finisher) report(ctx context.Context) {
	in := f.results
	batch := make([]wire.Done, 0, maxFinish)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for in != nil || len(f.waiting) > 0 {
		batch = batch[:0]
		// Refused results waiting hold their bytes: past capacity, take no
		// more until some are settled (the executors wait).
		take := in
		if len(f.waiting) >= max(f.capacity, 1) {
			take = nil
		}
		var retry <-chan time.Time
		if len(f.waiting) > 0 {
			timer.Reset(time.Until(f.waiting[0].at))
			retry = timer.C
		}
		select {
		case d, ok := <-take:
			if !ok {
				in = nil
			} else {
				batch = append(batch, d)
			}
		case <-retry:
		case <-ctx.Done():
			return
		}
		timer.Stop()
	more:
		for take != nil && in != nil && len(batch) < maxFinish {
			select {
			case d, ok := <-in:
				if !ok {
					in = nil
					break more
				}
				batch = append(batch, d)
			default:
				break more
			}
		}
		if in == nil && f.gaveUp {
			// The worker leaves, stuck: what waits is left to be reaped.
			for _, w := range f.waiting {
				f.drop([]wire.Done{w.Done})
			}
			f.waiting = nil
		}
		batch = f.due(batch, time.Now())
		if len(batch) > 0 {
			f.finish(ctx, batch, in == nil)
		}
	}
}

// due appends to batch the refused results whose time has come.
func (f *finisher) due(batch []wire.Done, now time.Time) []wire.Done {
	n := 0
	for n < len(f.waiting) && !f.waiting[n].at.After(now) && len(batch) < maxFinish {
		batch = append(batch, f.waiting[n].Done)
		n++
	}
	f.waiting = f.waiting[n:]
	return batch
}

// finish reports a batch of results, one call per shard they came from and
// per broker.CallBytes, and releases the tasks of those Redis took
// (delivered, or discarded as no longer wanted: finishing twice delivers
// once). Those refused for want of memory wait (refuse); the others are
// sent again, with backoff, while Redis is unreachable. Once input is
// closed (the worker stops) it gives up after finishTries, once stuck at
// the first failure: the tasks stay held in Redis, and are reaped, their
// attempt counted, when the worker retires or its lease lapses.
func (f *finisher) finish(ctx context.Context, batch []wire.Done, closing bool) {
	var bo backoff.Backoff
	left := batch
	for failures := 0; ; {
		now, later := f.within(left)
		got, err := f.source.finish(ctx, now)
		f.counters.delivered.Add(int64(got.Delivered))
		f.counters.discarded.Add(int64(got.Sent - got.Delivered))
		f.settle(now, got)
		// The clock of a worker that cannot report runs while calls fail
		// and none lands. A call Redis answered, if only to refuse results
		// for want of memory, stops it: those end with ErrRedisFull
		// (refuse), and a worker that left would fail them with
		// ErrNoWorker instead. Only a record of such a failure refused
		// too starts it (refuse).
		switch {
		case got.Sent > 0 || err == nil || len(got.Failed) == 0 && !f.records(got.Full):
			f.failing = time.Time{}
		case len(got.Failed) > 0 && f.failing.IsZero():
			f.failing = time.Now()
		}
		if len(got.Full) > 0 {
			f.refuse(got.Full, err, closing || f.gaveUp)
		}
		if err != nil {
			f.checkStuck(err)
		}
		f.adapt(len(got.Failed) > 0)
		if len(got.Failed) == 0 {
			if len(later) == 0 {
				return
			}
			left = later // the link answers: on at once
			bo.Reset()
			continue
		}
		f.failed("finish", err)
		left = slices.Concat(got.Failed, later)
		// A worker that leaves, stuck, tries each result once: its tasks
		// are reaped anyway.
		if failures++; f.gaveUp || closing && failures >= finishTries || !bo.Wait(ctx) {
			f.drop(left)
			return
		}
	}
}

// within splits ds into the results the next round sends, within shrunk
// bytes (one at least; all if shrunk is 0), and the rest.
func (f *finisher) within(ds []wire.Done) (now, later []wire.Done) {
	if f.shrunk == 0 {
		return ds, nil
	}
	n, size := 0, 0
	for n < len(ds) && (n == 0 || size+len(ds[n].Result)+len(ds[n].Record) <= f.shrunk) {
		size += len(ds[n].Result) + len(ds[n].Record)
		n++
	}
	return ds[:n], ds[n:]
}

// adapt halves the bytes of a round after one whose calls failed, and
// doubles them back after growAfter in a row that passed.
func (f *finisher) adapt(failed bool) {
	switch {
	case failed && f.shrunk == 0:
		f.shrunk, f.passed = broker.CallBytes/2, 0
	case failed:
		f.shrunk, f.passed = max(f.shrunk/2, 1), 0
	case f.shrunk > 0:
		if f.passed++; f.passed < growAfter {
			return
		}
		if f.shrunk, f.passed = 2*f.shrunk, 0; f.shrunk >= broker.CallBytes {
			f.shrunk = 0
		}
	}
}

// settle releases from the ledger the tasks of sent's results that Redis
// took: all but got.Full and got.Failed.
func (f *finisher) settle(sent []wire.Done, got wire.Finished) {
	if len(got.Full)+len(got.Failed) == 0 {
		for _, d := range sent {
			f.release(d.ID)
		}
		return
	}
	left := make(map[string]bool, len(got.Full)+len(got.Failed))
	for _, d := range got.Full {
		left[d.ID] = true
	}
	for _, d := range got.Failed {
		left[d.ID] = true
	}
	for _, d := range sent {
		if !left[d.ID] {
			f.release(d.ID)
		}
	}
}

// records reports whether any of ds, refused for want of memory, was
// already the record of a failure with ErrRedisFull (see refuse).
func (f *finisher) records(ds []wire.Done) bool {
	for _, d := range ds {
		if f.refused[d.ID] >= fullTries {
			return true
		}
	}
	return false
}

// release releases task tid from the ledger and forgets its refusals.
func (f *finisher) release(tid string) {
	delete(f.refused, tid)
	f.held.release(tid)
}

// drop gives up reporting results: their tasks leave the ledger but stay
// held in Redis, for a reap to put back with their attempt counted.
func (f *finisher) drop(ds []wire.Done) {
	for _, d := range ds {
		f.release(d.ID)
	}
}

// refuse puts results Redis refused for want of memory to wait for their
// next try; one refused fullTries times is replaced by a record of its
// failure with ErrRedisFull, sent at once. If that is refused too, it is
// tried again at the longest delay, unless the worker is leaving (ending):
// then it is dropped, its task left to be reaped.
func (f *finisher) refuse(ds []wire.Done, err error, ending bool) {
	now := time.Now()
	for _, d := range ds {
		n := f.refused[d.ID] + 1
		tries := n
		if len(d.Result) > broker.CallBytes && n < fullTries {
			// Each try of a result this large swings Redis's memory by its
			// size (the command sits in a buffer before it is refused),
			// and may make others' writes refused: it is not tried again.
			n = fullTries
		}
		f.refused[d.ID] = n
		switch {
		case n == fullTries:
			d = redisFull(d, tries, err)
			f.counters.failed.Add(1)
			f.waiting = append(f.waiting, refusedDone{Done: d, at: now})
			continue
		case n > fullTries && ending:
			f.drop([]wire.Done{d})
			continue
		case n > fullTries && f.failing.IsZero():
			// Even the record of its failure is refused.
			f.failing = now
		}
		// The delay doubles with each refusal of this result.
		bo := fullWait
		var wait time.Duration
		for range min(n, fullTries) {
			wait = bo.Next()
		}
		f.waiting = append(f.waiting, refusedDone{Done: d, at: now.Add(wait)})
	}
	// Keep waiting in order of when to try: the first is the next timer.
	slices.SortStableFunc(f.waiting, func(a, b refusedDone) int { return a.at.Compare(b.at) })
}

// checkStuck tells stuck, once, that no result could be reported for
// stuckAfter although Redis took heartbeats meanwhile: the worker serves
// no one and must not keep its tasks.
func (f *finisher) checkStuck(err error) {
	if f.gaveUp || f.failing.IsZero() || f.stuck == nil {
		return
	}
	since := time.Since(f.failing)
	if since < f.stuckAfter || !f.renewed().After(f.failing) {
		return
	}
	f.gaveUp = true
	f.stuck(fmt.Errorf("worker: no result could be reported for %v while Redis took heartbeats: %w", since.Round(time.Second), err))
}

// redisFull returns the record of d's failure with ErrRedisFull: every
// element of its task fails, and the manager writes the batch's history
// record itself.
func redisFull(d wire.Done, refusals int, err error) wire.Done {
	res, derr := codec.DecodeResult(d.Result, len(d.Result))
	var tid, wid string
	var attempt int
	if derr == nil {
		tid, attempt, wid = res.Task, res.Attempt, res.Worker
	} else {
		tid = d.ID
	}
	fail := wholeFailure(codec.KindRedisFull, "result of %d bytes refused by Redis at maxmemory (tries: %d): %v", len(d.Result), refusals, err)
	b, _ := codec.EncodeResult(&codec.Result{Task: tid, Attempt: attempt, Fails: []codec.Failure{*fail}, Worker: wid}) // small and well-formed: cannot fail
	return wire.Done{ID: d.ID, Result: b, Shard: d.Shard}
}
