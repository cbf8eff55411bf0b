package worker

import (
	"cmp"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/redmap/redmap/internal/config"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/memo"
)

// Defaults for the zero fields of Options.
const (
	DefaultPrefix    = config.DefaultPrefix
	DefaultHeartbeat = time.Second
	DefaultLease     = 10 * time.Second
	DefaultIdleWait  = time.Second
	DefaultMaxFrame  = config.DefaultMaxFrame
	// DefaultGrace is how long a stopping worker lets its running tasks
	// finish: well under Kubernetes's default termination grace of 30 s.
	DefaultGrace = 20 * time.Second
	// DefaultCacheBytes bounds the decoded constant data a worker keeps in
	// memory, counted by encoded size: 512 MiB.
	DefaultCacheBytes = memo.DefaultBytes
	// DefaultGCHeadroom is the heap growth a running worker lets its
	// process's garbage collector allow at least between collections:
	// 4 MiB (see Options.GCHeadroom).
	DefaultGCHeadroom = 4 << 20
	// DefaultAbandonGrace is how long past an element's timeout, or past
	// the cancellation of its task, the worker waits for a function that
	// ignores its context before it abandons the call (see
	// Options.AbandonGrace).
	DefaultAbandonGrace = time.Second
	// DefaultMaxAbandoned is how many abandoned calls may still be running
	// in a worker before it drains and Run fails (see Options.MaxAbandoned).
	DefaultMaxAbandoned = 3
)

// defaultPrefetch is the number of tasks a worker takes ahead of its free
// slots when Options.Prefetch is zero: 64 per slot. Within it the worker
// takes ahead only about prefetchBound of work per slot, so the cap binds
// only tasks under about 150 µs, where a take of many is what keeps Redis's
// scripts per task down.
func defaultPrefetch(concurrency int) int { return 64 * concurrency }

// DefaultConcurrency is the number of tasks a worker runs at once when
// Options.Concurrency is zero: GOMAXPROCS.
func DefaultConcurrency() int { return runtime.GOMAXPROCS(0) }

// Options configure a Worker. The zero value of each field means its default.
type Options struct {
	// Queue is the queue to serve. Required; must not contain '{', '}' or '#'. A
	// queue its managers spread over shards (manager.Options.Shards) is served
	// whole: the worker learns the shard count from Redis.
	Queue string
	// Prefix of every Redis key. Default DefaultPrefix.
	Prefix string
	// ID names the worker; managers use it to send a batch to this worker's
	// private queue. Letters, digits, '_', '.' and '-', at most 64. Default: a
	// random 128-bit id.
	ID string
	// Name is the worker's stable name: the "worker" label of its metrics
	// (Collector). Unlike ID, new at every start unless set, it stays the
	// same across restarts on one host or pod, so that a dashboard's series
	// do not churn; the metric redmap_worker_info maps it to the ID.
	// Printable UTF-8, at most 256 bytes. Default: the host name (worker.Main:
	// -name, else $REDMAP_WORKER_NAME, else $POD_NAME).
	Name string
	// Concurrency is how many tasks run at once. Default DefaultConcurrency().
	Concurrency int
	// Prefetch caps how many tasks the worker takes beyond its free slots,
	// so that one round trip brings many tiny tasks. Within the cap, the
	// worker takes ahead only about 10 ms of work per slot, at the average
	// run time of its tasks so far, and nothing before a task has run: long
	// tasks are not piled on one worker while others idle. A prefetched task
	// that waited over a millisecond is checked again before it runs, on an
	// answer at most 100 ms old (it is skipped if its batch was cancelled
	// before that answer), and prefetched tasks not started
	// when the worker stops go back to the queue. -1 for none. Default: 64
	// per slot of Concurrency.
	Prefetch int
	// Heartbeat is how often the worker renews its lease. Default DefaultHeartbeat.
	Heartbeat time.Duration
	// Lease is how long the worker counts as live after a heartbeat, by the
	// Redis clock. Must exceed Heartbeat. Default DefaultLease.
	Lease time.Duration
	// IdleWait is how long an idle worker blocks waiting for work before it
	// looks again on its own (a submit wakes it at once). go-redis rounds
	// blocking timeouts up to whole seconds. Default DefaultIdleWait.
	IdleWait time.Duration
	// MaxFrame caps the size of a task read from Redis and of a result written
	// back, in bytes. Default DefaultMaxFrame.
	MaxFrame int
	// CacheBytes bounds the constant data (see manager.MapWith) the worker
	// keeps decoded in memory, by encoded size; least recently used goes first.
	// Default DefaultCacheBytes.
	CacheBytes int64
	// Grace bounds how long Run, once its context ended, lets the tasks
	// running then finish: at the bound it cancels their contexts and gives
	// them back to the queue at once (not after a lease), so another worker
	// runs them, drops their results, and returns. -1 waits for ever.
	// Default DefaultGrace.
	Grace time.Duration
	// AbandonGrace bounds how long a function that ignores its context
	// holds its element and its slot. Go cannot stop a goroutine: the
	// worker abandons the call instead, leaves it running, and never
	// reports what it returns. An element run with a timeout
	// (manager.Timeout) that has not returned AbandonGrace after it fails
	// with redmap.ErrTimeout at once, not retried, and the task goes on
	// with its other elements; a task whose context was cancelled (its
	// batch cancelled or its manager gone, seen within a Heartbeat; or the
	// worker's Grace over at a stop) that has not returned AbandonGrace
	// after is dropped, and its slot goes to the next task. Each abandoned
	// call is logged at error level and counted (Stats.Abandoned, the
	// metrics redmap_worker_calls_abandoned_total and
	// redmap_worker_calls_abandoned_running). -1 never abandons a call.
	// Default DefaultAbandonGrace.
	AbandonGrace time.Duration
	// MaxAbandoned is how many abandoned calls (see AbandonGrace) may be
	// running at once before the worker gives up on its process: it drains
	// as when Run's context ends, and Run returns an error wrapping
	// ErrAbandoned, so that worker.Main returns it and the program exits
	// non-zero, for its supervisor to start a fresh one. The calls still
	// count once abandoned; one that returns at last counts no more. -1
	// for no limit. Default DefaultMaxAbandoned.
	MaxAbandoned int
	// GCHeadroom is how much the heap may grow at least between two
	// garbage collections while Run runs: at Go's default a process whose
	// live heap is a few MiB collects every few MiB allocated, dozens of
	// times a second at a few KiB a task, and the collections' fixed costs
	// took about a third of a worker's CPU on tasks of one tiny element.
	// After each collection the worker sets the collector's percent (GOGC)
	// so that the next comes after at least this much growth, never below
	// the percent the process had; a live heap larger than the headroom
	// keeps that percent. Go's own floor (4 MiB at GOGC=100) scales with
	// the percent, so under a live heap of 4 MiB the growth allowed is
	// larger, up to 4 MiB × headroom / 1 MiB (16 MiB at the default): a
	// worker's heap, and its resident memory, may reach that much. More is
	// not faster: a larger heap touches more memory between collections,
	// and in the bench a headroom of 8 MiB made 64 KiB elements 3-14%
	// slower, in six alternated runs, where 4 MiB did not. It leaves the collector alone when the
	// environment sets GOGC or GOMEMLIMIT, when the program set a memory
	// limit, and once the program sets a percent of its own. Processes with
	// several workers use the largest headroom of those running. -1 for
	// none. Default DefaultGCHeadroom.
	GCHeadroom int64
	// Logger receives the worker's logs. Default: none. Lines logged while a
	// task runs (the worker's own, and a function's through redmap.Logger)
	// carry the task span's trace_id and span_id when the task is traced.
	Logger *slog.Logger
	// TracerProvider traces task runs with OpenTelemetry: a task whose
	// batch was traced (its envelope carries the batch span's trace
	// context) runs in a span of its own, a child of the batch's (README
	// "Tracing"). Default: the global provider (otel.SetTracerProvider),
	// a no-op unless the program installed one; worker.Main installs an
	// OTLP exporter when OTEL_EXPORTER_OTLP_ENDPOINT is set.
	TracerProvider trace.TracerProvider
}

func (o Options) withDefaults() (Options, error) {
	shared := config.Shared{Queue: o.Queue, Prefix: o.Prefix, MaxFrame: o.MaxFrame}
	if err := shared.Resolve("worker"); err != nil {
		return o, err
	}
	o.Prefix, o.MaxFrame = shared.Prefix, shared.MaxFrame
	if err := o.check(); err != nil {
		return o, err
	}
	if o.ID == "" {
		o.ID = id.New()
	}
	if o.Name == "" {
		host, _ := os.Hostname()
		o.Name = cmp.Or(host, o.ID)
	}
	config.Or(&o.Concurrency, DefaultConcurrency())
	switch o.Prefetch {
	case 0:
		o.Prefetch = defaultPrefetch(o.Concurrency)
	case -1:
		o.Prefetch = 0
	}
	config.Or(&o.Heartbeat, DefaultHeartbeat)
	config.Or(&o.Lease, DefaultLease)
	if o.Lease <= o.Heartbeat {
		return o, fmt.Errorf("worker: Options.Lease %v must exceed Options.Heartbeat %v", o.Lease, o.Heartbeat)
	}
	config.Or(&o.IdleWait, DefaultIdleWait)
	config.Or(&o.CacheBytes, DefaultCacheBytes)
	config.Or(&o.GCHeadroom, DefaultGCHeadroom)
	config.Or(&o.Grace, DefaultGrace)
	config.Or(&o.AbandonGrace, DefaultAbandonGrace)
	config.Or(&o.MaxAbandoned, DefaultMaxAbandoned)
	config.Or(&o.Logger, slog.New(slog.DiscardHandler))
	return o, nil
}

// check refuses a field no default makes good: an ID or Name Redis's keys
// cannot carry, a negative count or duration.
func (o Options) check() error {
	switch {
	case o.ID != "" && keys.CheckWorker(o.ID) != nil:
		return fmt.Errorf("worker: Options.ID %q: want letters, digits, '_', '.' or '-', at most 64", o.ID)
	case o.Name != "" && keys.CheckFunc(o.Name) != nil:
		return fmt.Errorf("worker: Options.Name %q: want 1 to %d bytes of printable UTF-8", o.Name, keys.MaxName)
	case o.Concurrency < 0:
		return fmt.Errorf("worker: Options.Concurrency %d is negative", o.Concurrency)
	case o.Prefetch < -1:
		return fmt.Errorf("worker: Options.Prefetch %d is below -1", o.Prefetch)
	case o.Heartbeat < 0 || o.Lease < 0 || o.IdleWait < 0:
		return fmt.Errorf("worker: Options.Heartbeat, Lease and IdleWait must not be negative")
	case o.Grace < -1:
		return fmt.Errorf("worker: Options.Grace %v is negative (-1 waits for ever)", o.Grace)
	case o.CacheBytes < 0:
		return fmt.Errorf("worker: Options.CacheBytes %d is negative", o.CacheBytes)
	case o.AbandonGrace < -1:
		return fmt.Errorf("worker: Options.AbandonGrace %v is negative (-1 never abandons a call)", o.AbandonGrace)
	case o.MaxAbandoned < -1:
		return fmt.Errorf("worker: Options.MaxAbandoned %d is below -1", o.MaxAbandoned)
	case o.GCHeadroom < -1:
		return fmt.Errorf("worker: Options.GCHeadroom %d is below -1", o.GCHeadroom)
	}
	return nil
}
