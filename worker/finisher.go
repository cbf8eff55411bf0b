package worker

import (
	"context"

	"github.com/redmap/redmap/internal/backoff"
	"github.com/redmap/redmap/internal/rdb"
)

// finisher reports results to Redis as the executors pass them on, as many
// per script call as are waiting, and releases their tasks from the ledger.
type finisher struct {
	w       *Worker
	results chan rdb.Done
	done    chan struct{}
}

// maxFinish caps the results reported in one Finish call.
const maxFinish = 1000

func newFinisher(w *Worker, capacity int) *finisher {
	return &finisher{w: w, results: make(chan rdb.Done, capacity), done: make(chan struct{})}
}

// start starts reporting, with calls under ctx.
func (f *finisher) start(ctx context.Context) {
	go func() {
		defer close(f.done)
		batch := make([]rdb.Done, 0, maxFinish)
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
	}()
}

// stop tells the finisher no more results come; wait returns once it has
// reported the last.
func (f *finisher) stop() { close(f.results) }
func (f *finisher) wait() { <-f.done }

// finish reports a batch of results, one call per shard they came from,
// retrying while Redis is unreachable (finishing twice delivers once), and
// releases their tasks. If it gives up, the tasks stay in the worker's held
// set in Redis, and the sweep of orphans returns them to the queue to run
// again.
func (f *finisher) finish(ctx context.Context, batch []rdb.Done) {
	w := f.w
	if w.hooks.finish != nil {
		w.hooks.finish(batch)
	}
	defer func() {
		for _, d := range batch {
			w.held.release(d.ID)
		}
	}()
	if len(w.shards()) == 1 {
		f.finishShard(ctx, 0, batch)
		return
	}
	byShard := make(map[int][]rdb.Done)
	for _, d := range batch {
		byShard[d.Shard] = append(byShard[d.Shard], d)
	}
	for i, done := range byShard {
		f.finishShard(ctx, i, done)
	}
}

// finishShard reports results of tasks of shard i.
func (f *finisher) finishShard(ctx context.Context, i int, batch []rdb.Done) {
	w := f.w
	var bo backoff.Backoff
	for attempt := 1; ; attempt++ {
		n, err := w.shard(i).Finish(ctx, w.opts.ID, batch)
		if err == nil {
			w.counters.delivered.Add(int64(n))
			w.counters.discarded.Add(int64(len(batch) - n))
			return
		}
		w.failed("finish", err)
		if attempt == 10 || !bo.Wait(ctx) {
			return
		}
	}
}
