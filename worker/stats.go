package worker

import (
	"sync/atomic"

	"github.com/redmap/redmap/cache"
)

// Stats are a worker's diagnostics: its work since it was made.
type Stats struct {
	Taken     int64 // tasks taken from the queue
	Delivered int64 // results delivered to a manager that still wanted them
	Discarded int64 // results dropped: their task was cancelled, or finished by another worker first
	GivenBack int64 // held tasks put back because the worker never received them (lost replies)
	Reaped    int64 // dead workers this worker reaped
	Requeued  int64 // tasks of dead workers this worker put back in the queue
	Succeeded int64 // tasks run with every element successful
	Failed    int64 // tasks run with at least one element failed
	Retried   int64 // element runs retried (timeouts, retryable errors)
	Throttled int64 // element runs that answered redmap.RetryAfter and waited
	HeldBack  int64 // tasks taken after their function's limit held them back
	Running   int64 // tasks running now
	// Cache counts the worker's memo of constants: hits, misses, fetches,
	// bytes fetched, decodes, evictions.
	Cache cache.Stats
}

type counters struct {
	taken, delivered, discarded, givenBack, reaped, requeued atomic.Int64
	succeeded, failed, retried                               atomic.Int64
	throttled, heldBack                                      atomic.Int64
}

// Stats returns the worker's counters.
func (w *Worker) Stats() Stats {
	c := &w.counters
	return Stats{
		Taken: c.taken.Load(), Delivered: c.delivered.Load(), Discarded: c.discarded.Load(),
		GivenBack: c.givenBack.Load(), Reaped: c.reaped.Load(), Requeued: c.requeued.Load(),
		Succeeded: c.succeeded.Load(), Failed: c.failed.Load(), Retried: c.retried.Load(),
		Throttled: c.throttled.Load(), HeldBack: c.heldBack.Load(),
		Running: int64(w.runningCount()), Cache: w.memo.Stats(),
	}
}

// runningCount returns how many tasks are running now.
func (w *Worker) runningCount() int { return w.held.count() }
