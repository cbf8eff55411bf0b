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
	// Suspects counts the suspects the worker ran alone: tasks lost
	// wire.SuspectAfter times with their workers, maybe poison pills.
	Suspects int64
	// Abandoned counts the calls of functions that ignored their context
	// that the worker abandoned (Options.AbandonGrace); AbandonedRunning,
	// those of them that have not returned yet.
	Abandoned, AbandonedRunning int64
	// OutrunRunning counts the calls that lost a backup's race (their
	// task's other copy's result came first) and ignored their context,
	// left to finish and not returned yet: not abandoned calls, never
	// counted toward Options.MaxAbandoned.
	OutrunRunning int64
	// Cache counts the worker's memo of constants: hits, misses, fetches,
	// bytes fetched, decodes, evictions.
	Cache cache.Stats
}

type counters struct {
	taken, delivered, discarded, givenBack, reaped, requeued atomic.Int64
	succeeded, failed, retried                               atomic.Int64
	throttled, heldBack, suspects                            atomic.Int64
	// alone is the suspect running alone now, and why (WorkerInfo.Alone,
	// AloneTask); nil if none.
	alone atomic.Pointer[aloneRun]
}

// aloneRun is a suspect's task running alone, and why.
type aloneRun struct{ task, why string }

// Stats returns the worker's counters.
func (w *Worker) Stats() Stats {
	c := &w.counters
	return Stats{
		Taken: c.taken.Load(), Delivered: c.delivered.Load(), Discarded: c.discarded.Load(),
		GivenBack: c.givenBack.Load(), Reaped: c.reaped.Load(), Requeued: c.requeued.Load(),
		Succeeded: c.succeeded.Load(), Failed: c.failed.Load(), Retried: c.retried.Load(),
		Throttled: c.throttled.Load(), HeldBack: c.heldBack.Load(), Suspects: c.suspects.Load(),
		Running: int64(w.runningCount()), Cache: w.memo.Stats(),
		Abandoned: w.abandoned.total.Load(), AbandonedRunning: w.abandoned.running.Load(),
		OutrunRunning: w.abandoned.outrun.Load(),
	}
}

// runningCount returns how many tasks are running now.
func (w *Worker) runningCount() int { return w.held.count() }

// aloneNow returns the suspect running alone now, and why; "" and "" if
// none.
func (c *counters) aloneNow() (task, why string) {
	if a := c.alone.Load(); a != nil {
		return a.task, a.why
	}
	return "", ""
}
