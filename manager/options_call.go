package manager

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/engine"
	"github.com/redmap/redmap/internal/keys"
)

// The range of Priority, and the priority of a batch without it.
const (
	MinPriority     = keys.MinPriority
	MaxPriority     = keys.MaxPriority
	DefaultPriority = keys.DefaultPriority
)

// CallOption changes how one batch is submitted.
type CallOption func(*callOptions)

type callOptions struct {
	worker   string
	chunk    int
	attempts int
	timeout  time.Duration
	retry    bool
	seed     uint64
	seeded   bool
	priority int
	waits    int    // MaxRetryAfter
	durable  string // the batch's name, if durable (Durable)
	// retryFailed: a durable call that takes the batch over runs again its
	// tasks whose results found in Redis hold a failed element.
	retryFailed bool
	// durableWait is how long a durable call waits for the batch's holder
	// to let it go (DurableWait).
	durableWait time.Duration
	partitions  int // a map/reduce by key's (Partitions); 0 for the default
	// backups: the call's say on backup tasks (Backups); nil leaves it to
	// the handle (redmap.Idempotent).
	backups *bool
	// call is what the call says of its batch by name, to its workers and
	// operators: an option that sets a field of it needs nothing else.
	call codec.CallInfo
}

// Label names the batch for people: the job it is part of, say
// "nightly-import". Operators see it beside the batch's function (redmap
// batches, its history, the dashboard's JSON), and each line the function
// logs on a worker through redmap.Logger carries it as "label". At most
// 256 bytes of printable UTF-8; default none.
func Label(s string) CallOption { return func(o *callOptions) { o.call.Label = s } }

// Backups turns the batch's backup tasks on or off: near the batch's end,
// a task running far longer than its typical task is run again on another
// worker, and the first result wins (see docs/programming.md,
// "Stragglers"). Default: on for a function declared redmap.Idempotent,
// off for any other. Turn them on only for a function that may run twice:
// both copies may run to the end. A private batch (OnWorker) has none.
func Backups(on bool) CallOption { return func(o *callOptions) { o.backups = &on } }

// Priority sets the batch's priority, from MinPriority (1) to MaxPriority
// (5); default DefaultPriority (3). A worker always takes the public tasks
// of a higher priority first, so a batch submitted while a long batch of
// lower priority runs waits only for the tasks workers already took (see
// README, "Priorities"). A worker takes its private queue (OnWorker) before
// any public task, whatever the priorities.
func Priority(p int) CallOption { return func(o *callOptions) { o.priority = p } }

// Attempts sets the batch's attempt budget: how many times an element may
// run, counting the runs lost when its worker died or stalled past its lease,
// timed-out runs, and retried errors. An element that uses it up fails with
// ErrLost (or its last error). A task that kills every worker that runs it
// (a poison pill) so fails after n worker deaths — 3 if n is 2: a task lost
// twice is a suspect, run alone, and none fails as lost before it ran alone
// once, so that no element beside a pill fails with it. Default
// DefaultAttempts.
func Attempts(n int) CallOption { return func(o *callOptions) { o.attempts = n } }

// Timeout sets how long the function may run on one element: its context ends
// then, and the run fails with ErrTimeout (and is retried while the attempt
// budget lasts). Go cannot stop a goroutine: a function that ignores its
// context and has not returned worker.Options.AbandonGrace (1 s) after the
// timeout is abandoned by its worker, left running, and the element fails
// with ErrTimeout then, not retried. Default: no timeout.
func Timeout(d time.Duration) CallOption { return func(o *callOptions) { o.timeout = d } }

// RetryErrors makes errors and panics of the function count as failed
// attempts to retry while the budget lasts. Without it, only errors wrapped
// with redmap.Retryable are retried.
func RetryErrors() CallOption { return func(o *callOptions) { o.retry = true } }

// DefaultMaxRetryAfter is how many times an element of a batch without
// MaxRetryAfter may wait for a redmap.RetryAfter.
const DefaultMaxRetryAfter = engine.DefaultWaits

// MaxRetryAfter bounds how many times each element may wait and run again
// when its function returns redmap.RetryAfter (a rationed service's "come
// back in d"): those runs spend no attempt; past n, the element fails with
// redmap.ErrThrottled. n is at least 1; default DefaultMaxRetryAfter.
func MaxRetryAfter(n int) CallOption { return func(o *callOptions) { o.waits = n } }

// OnWorker sends the batch to the private queue of worker id (see
// Manager.Workers) instead of the public queue: only that worker runs it.
// A worker not live yet is waited for up to 2 s (its Run may have just
// started), then the call fails with redmap.ErrNoWorker.
func OnWorker(id string) CallOption { return func(o *callOptions) { o.worker = id } }

// ChunkSize fixes how many elements travel in one task. Without it, the size
// adapts to the function's cost as workers measure it, aiming at about 4 ms of
// work per task (500 ms for a map task of ReduceByKey, whose partials cost
// per task; at most 65,536 elements, about 4 MiB of encoded input, and at
// least 16 tasks per batch that has the elements); while the cost is
// unknown, 4 tasks of up to 8 elements measure it before the rest is cut.
func ChunkSize(n int) CallOption { return func(o *callOptions) { o.chunk = n } }

// Seed sets the batch's seed for redmap.Rand: each element's random source
// is fixed by the seed and the element's index, so a batch with a seed gives
// the same outputs whichever workers run it, whatever its chunk size, and
// however often its elements are retried. Without Seed, the manager draws a
// seed for the batch.
func Seed(s uint64) CallOption { return func(o *callOptions) { o.seed, o.seeded = s, true } }

// Durable makes the batch durable under name, unique within the queue: it
// outlives its manager. Its tasks, their results and its constant are kept
// in Redis under its name for Options.DurableTTL after the last time a
// manager held it; while no manager holds it, workers go on running its
// queued tasks and keep their results. The same call with the same name
// and the same input, from this program restarted or any other, takes it
// over: it keeps every result already delivered, submits only what is
// neither done nor queued, and returns what an uninterrupted run returns.
// A call whose input, function or constant differs fails with
// redmap.ErrDurableMismatch naming the first task that differs; a call made
// while another live manager holds the name fails at once with a
// *redmap.HeldError (redmap.ErrDurableHeld).
//
// Ending the call's context, or closing the manager, leaves the batch in
// Redis for the next call to take over; Cancel ends it for good. Once it
// has ended in the manager that holds it, its keys are deleted before Wait
// returns. Without ChunkSize, a slice is cut into at most 4,096 tasks of
// equal size and a sequence into tasks of 128 elements, so that a resumed
// call cuts the same tasks (a call with another ChunkSize, or from a
// manager with another Options.Shards, is refused as a mismatch); without Seed its seed is derived from name. A durable sequence
// (SubmitSeq, MapReduceSeq) is read again from its start by the call that
// takes it over: the results delivered before come again, each once, and
// what was submitted is not submitted again. Every function that submits
// takes it.
func Durable(name string) CallOption { return func(o *callOptions) { o.durable = name } }

// RetryFailed makes a durable call (Durable) that takes the batch over run
// again the tasks whose results it finds in Redis with a failed element,
// rather than return those failures: the other results found are kept, and
// the tasks neither done nor queued are submitted as usual. Each element
// still ends once in the call, with its value or the error of its new run.
// A task is the unit run again: with ChunkSize(1), exactly the failed
// elements run again; with larger chunks, the other elements of a chunk
// with a failure run again too. It looks at results of runs made while no
// call held the batch (the call that held it ended, or its process
// died); a batch whose call returned has ended, and its keys are gone:
// run again the elements of its *redmap.BatchError instead. Without
// Durable it has no effect.
func RetryFailed() CallOption { return func(o *callOptions) { o.retryFailed = true } }

// DurableWait makes a durable call (Durable) that finds the batch held by
// another live manager wait up to d for it to let the batch go (its call
// ended, its process died and its claim lapsed), trying every Poll, instead
// of failing at once with a *redmap.HeldError; past d it fails so. Use it
// where a program restarted on another host may find its predecessor's
// claim, which lapses within max(5×Poll, 10 s).
func DurableWait(d time.Duration) CallOption { return func(o *callOptions) { o.durableWait = d } }

// callOptionsOf applies opts, checks them, and fills in the defaults.
func callOptionsOf(opts []CallOption) (callOptions, error) {
	var co callOptions
	for _, o := range opts {
		o(&co)
	}
	switch {
	case co.chunk < 0:
		return co, fmt.Errorf("manager: ChunkSize %d is negative", co.chunk)
	case co.attempts < 0:
		return co, fmt.Errorf("manager: Attempts %d is negative", co.attempts)
	case co.timeout < 0:
		return co, fmt.Errorf("manager: Timeout %v is negative", co.timeout)
	case co.waits < 0 || co.waits > 1<<20:
		return co, fmt.Errorf("manager: MaxRetryAfter %d is not in 1..%d", co.waits, 1<<20)
	case co.durableWait < 0:
		return co, fmt.Errorf("manager: DurableWait %v is negative", co.durableWait)
	case co.durable != "" && keys.CheckDurable(co.durable) != nil:
		return co, fmt.Errorf("manager: Durable: %w", keys.CheckDurable(co.durable))
	case co.call.Problem() != "":
		return co, fmt.Errorf("manager: %s", co.call.Problem())
	case co.priority != 0 && (co.priority < MinPriority || co.priority > MaxPriority):
		return co, fmt.Errorf("manager: Priority %d is outside %d to %d", co.priority, MinPriority, MaxPriority)
	}
	if co.priority == 0 {
		co.priority = DefaultPriority
	}
	if co.attempts == 0 {
		co.attempts = DefaultAttempts
	}
	if !co.seeded {
		co.seed = rand.Uint64()
		if co.durable != "" { // a resumed call draws the same
			co.seed = durableSeed(co.durable)
		}
	}
	return co, nil
}
