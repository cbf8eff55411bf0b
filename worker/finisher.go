package worker

import (
	"context"

	"github.com/redmap/redmap/internal/backoff"
	"github.com/redmap/redmap/internal/part"
	"github.com/redmap/redmap/internal/wire"
)

// finisher reports results to Redis as the executors pass them on, as many
// per script call as are waiting, and releases their tasks from the ledger.
// It is a Drain part: Stop (the executors have returned) closes its input,
// not its context, and it returns once it has reported the last result,
// whatever happened to the caller.
type finisher struct {
	*part.Runner
	finisherParams
	results chan wire.Done
}

// finisherParams is what a finisher is built from.
type finisherParams struct {
	capacity int // results that may wait to be reported
	source   *source
	held     *held
	counters *counters
	failed   func(op string, err error)
}

// maxFinish caps the results reported in one Finish call.
const maxFinish = 1000

func newFinisher(p finisherParams) *finisher {
	f := &finisher{finisherParams: p, results: make(chan wire.Done, p.capacity)}
	f.Runner = part.Drain(f.report, func() { close(f.results) })
	return f
}

// report reports the results passed on, as many per call as wait, until
// the input closes.
func (f *finisher) report(ctx context.Context) {
	batch := make([]wire.Done, 0, maxFinish)
	for d := range f.results {
		batch = append(batch[:0], d)
	more:
		for len(batch) < maxFinish {
			select {
			case d, ok := <-f.results:
				if !ok {
					break more
				}
				batch = append(batch, d)
			default:
				break more
			}
		}
		f.finish(ctx, batch)
	}
}

// finish reports a batch of results, one call per shard they came from,
// retrying while Redis is unreachable (finishing twice delivers once), and
// releases their tasks. If it gives up, the tasks stay in the worker's held
// set in Redis, and the sweep of orphans returns them to the queue to run
// again.
func (f *finisher) finish(ctx context.Context, batch []wire.Done) {
	defer func() {
		for _, d := range batch {
			f.held.release(d.ID)
		}
	}()
	var bo backoff.Backoff
	left := batch
	for attempt := 1; ; attempt++ {
		n, failed, err := f.source.finish(ctx, left)
		f.counters.delivered.Add(int64(n))
		f.counters.discarded.Add(int64(len(left) - len(failed) - n))
		if err == nil {
			return
		}
		f.failed("finish", err)
		left = failed
		if attempt == 10 || !bo.Wait(ctx) {
			return
		}
	}
}
