package manager

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/cache"
	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/rdb"
)

// CallOption changes how one batch is submitted.
type CallOption func(*callOptions)

type callOptions struct {
	worker   string
	chunk    int
	attempts int
	timeout  time.Duration
	retry    bool
}

// DefaultAttempts is the attempt budget of a batch without Attempts: each
// element may run up to 3 times, counting runs lost with their worker.
const DefaultAttempts = 3

// Attempts sets the batch's attempt budget: how many times an element may
// run, counting the runs lost when its worker died or stalled past its lease,
// timed-out runs, and retried errors. An element that uses it up fails with
// ErrLost (or its last error). A task that kills every worker that runs it
// (a poison pill) so fails after n worker deaths. Default DefaultAttempts.
func Attempts(n int) CallOption { return func(o *callOptions) { o.attempts = n } }

// Timeout sets how long the function may run on one element: its context ends
// then, and the run fails with ErrTimeout (and is retried while the attempt
// budget lasts). Go cannot stop a goroutine, so a function that ignores its
// context keeps its worker slot until it returns. Default: no timeout.
func Timeout(d time.Duration) CallOption { return func(o *callOptions) { o.timeout = d } }

// RetryErrors makes errors and panics of the function count as failed
// attempts to retry while the budget lasts. Without it, only errors wrapped
// with redmap.Retryable are retried.
func RetryErrors() CallOption { return func(o *callOptions) { o.retry = true } }

// OnWorker sends the batch to the private queue of worker id (see
// Manager.Workers) instead of the public queue: only that worker runs it.
func OnWorker(id string) CallOption { return func(o *callOptions) { o.worker = id } }

// ChunkSize fixes how many elements travel in one task. Without it, a batch of
// n elements is cut into chunks of n/256 elements, at least 1 and at most 256.
func ChunkSize(n int) CallOption { return func(o *callOptions) { o.chunk = n } }

// autoChunk returns the chunk size for n elements: enough tasks (up to 256)
// to spread over a fleet, few enough that tiny elements do not cost a task
// each.
func autoChunk(n int) int { return min(max(n/256, 1), 256) }

// Map runs fn on every element of xs on the queue's workers and returns the
// outputs in input order. If some elements failed it returns every output
// (zero values where failed) and a *redmap.BatchError listing each failed
// index with its cause; the other elements complete. If ctx ends first it
// returns nil and ctx.Err(), withdrawing the batch's queued tasks.
//
// Cost: one script call per 1,000 tasks to submit, and about one round trip per
// 1,000 results to collect.
func Map[In, Out any](ctx context.Context, m *Manager, fn *redmap.Handle[In, Out], xs []In, opts ...CallOption) ([]Out, error) {
	b, err := Submit(ctx, m, fn, xs, opts...)
	if err != nil {
		return nil, err
	}
	return b.Wait(ctx)
}

// Submit submits fn over xs and returns at once with the running batch. The
// batch lives until every element has a result, ctx ends, Cancel or the
// manager's Close. Submit fails, submitting nothing, if an element is larger
// than Options.MaxInputSize (a *redmap.TaskError wrapping ErrTooLarge) or
// cannot be encoded, if OnWorker names a worker that is not live
// (ErrNoWorker), if Redis cannot be reached (ErrUnavailable), or if Redis
// refuses the write (ErrRedisFull at maxmemory); what it queued before the
// refusal is withdrawn.
func Submit[In, Out any](ctx context.Context, m *Manager, fn *redmap.Handle[In, Out], xs []In, opts ...CallOption) (*Batch[Out], error) {
	if err := fn.Validate(); err != nil {
		return nil, err
	}
	return submit[In, Out](ctx, m, spec{name: fn.Name(), sig: fn.Signature()}, xs, opts)
}

// MapWith is Map for a function that takes constant data: constant is
// encoded and stored once in Redis under its BLAKE3 hash (not at all if it
// is already there), each task carries only the hash, and each worker process
// fetches and decodes it once. The batch holds the stored value while it runs
// and releases it when it ends; the value is deleted when no batch holds it.
//
// Cost, on top of Map's: one script call to find the value stored; if it is
// not, one upload of its bytes (one pipeline per 8 MiB part, then one script
// call); one script call to release it; and, per worker process, one fetch
// of its bytes.
func MapWith[C, In, Out any](ctx context.Context, m *Manager, fn *redmap.HandleWith[C, In, Out], constant C, xs []In, opts ...CallOption) ([]Out, error) {
	b, err := SubmitWith(ctx, m, fn, constant, xs, opts...)
	if err != nil {
		return nil, err
	}
	return b.Wait(ctx)
}

// SubmitWith is Submit for a function that takes constant data; see MapWith.
func SubmitWith[C, In, Out any](ctx context.Context, m *Manager, fn *redmap.HandleWith[C, In, Out], constant C, xs []In, opts ...CallOption) (*Batch[Out], error) {
	if err := fn.Validate(); err != nil {
		return nil, err
	}
	enc, err := codec.EncodeValue(&constant)
	if err != nil {
		return nil, fmt.Errorf("%w: constant of %q: %v", redmap.ErrEncode, fn.Name(), err)
	}
	ref, holder, err := m.hold(ctx, enc)
	if err != nil {
		return nil, fmt.Errorf("redmap: storing the constant of %q: %w", fn.Name(), err)
	}
	b, err := submit[In, Out](ctx, m, spec{name: fn.Name(), sig: fn.Signature(), constant: &ref, holder: holder}, xs, opts)
	if err != nil {
		m.release(holder)
		return nil, err
	}
	return b, nil
}

// spec says what a batch runs: the function and, if it takes one, the
// constant and the batch's hold on it.
type spec struct {
	name, sig string
	constant  *cache.Ref
	holder    string
}

func submit[In, Out any](ctx context.Context, m *Manager, sp spec, xs []In, opts []CallOption) (*Batch[Out], error) {
	var co callOptions
	for _, o := range opts {
		o(&co)
	}
	switch {
	case co.chunk < 0:
		return nil, fmt.Errorf("redmap: ChunkSize %d is negative", co.chunk)
	case co.attempts < 0:
		return nil, fmt.Errorf("redmap: Attempts %d is negative", co.attempts)
	case co.timeout < 0:
		return nil, fmt.Errorf("redmap: Timeout %v is negative", co.timeout)
	}
	if co.attempts == 0 {
		co.attempts = DefaultAttempts
	}
	if co.chunk == 0 {
		co.chunk = autoChunk(len(xs))
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if co.worker != "" {
		live, err := m.Workers(ctx)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(live, co.worker) {
			return nil, fmt.Errorf("%w: %q on queue %q", redmap.ErrNoWorker, co.worker, m.opts.Queue)
		}
	}

	b := newBatch[Out](m, sp.name, len(xs))
	b.worker = co.worker
	task := codec.Task{Func: sp.name, Sig: sp.sig, Attempts: co.attempts, Timeout: co.timeout.Milliseconds(), Retry: co.retry}
	if sp.constant != nil {
		task.Const, task.ConstSize = sp.constant.Hash, sp.constant.Size
		b.onEnd = func() { m.release(sp.holder) }
	}
	// encode builds the payload of elements [start, end); the batch keeps it
	// (with xs) to submit again if Redis loses its data.
	encode := func(start, end int) ([]byte, error) {
		frame, err := codec.EncodeElements(xs[start:end], m.opts.MaxInputSize)
		if err != nil {
			return nil, inputError(sp.name, start, err)
		}
		t := task
		t.Count, t.Input = end-start, frame
		payload, err := codec.EncodeTask(&t)
		if err != nil {
			return nil, fmt.Errorf("redmap: encoding a task of %q: %w", sp.name, err)
		}
		return payload, nil
	}
	b.encode = encode
	tasks := make([]rdb.Task, 0, (len(xs)+co.chunk-1)/co.chunk)
	for start := 0; start < len(xs); start += co.chunk {
		end := min(start+co.chunk, len(xs))
		payload, err := encode(start, end)
		if err != nil {
			return nil, err
		}
		tid := redmap.TaskID(m.id, m.seq.Add(1))
		b.chunks = append(b.chunks, chunk{start: start, count: end - start, tid: tid})
		tasks = append(tasks, rdb.Task{ID: tid, Payload: payload})
	}
	b.left = len(b.chunks)
	if b.left == 0 {
		close(b.done)
		b.end()
		return b, nil
	}

	tids := make([]string, len(tasks))
	for i, t := range tasks {
		tids[i] = t.ID
	}
	// Register before submitting: a fast worker's result may arrive before
	// Submit returns. The context hook is set before either, so that ending
	// ctx at any point withdraws what was queued.
	b.stop = context.AfterFunc(ctx, func() { b.abort(ctx.Err()) })
	if err := m.register(b, tids); err != nil {
		b.stop()
		return nil, err
	}
	if err := m.rdb.Submit(ctx, m.id, co.worker, tasks, m.opts.KeyTTL); err != nil {
		b.stop()
		if rdb.Unreachable(err) {
			// Nothing can be withdrawn from a Redis we cannot reach; what
			// was queued runs to a discarded result, and its task set
			// entries go with the manager's keys.
			m.forget(tids)
			return nil, fmt.Errorf("%w: submitting %q: %w", redmap.ErrUnavailable, sp.name, err)
		}
		m.withdraw(tids)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if rdb.OutOfMemory(err) {
			return nil, fmt.Errorf("%w: submitting %q: %w", redmap.ErrRedisFull, sp.name, err)
		}
		return nil, fmt.Errorf("redmap: submitting %q: %w", sp.name, err)
	}
	return b, nil
}

// inputError says which element of a batch could not be submitted.
func inputError(fn string, start int, err error) error {
	idx := start
	var ee *codec.ElementError
	if errors.As(err, &ee) {
		idx += ee.Index
		err = ee.Err
	}
	cause := err
	if !errors.Is(err, redmap.ErrTooLarge) {
		cause = fmt.Errorf("%w: %v", redmap.ErrEncode, err)
	}
	return &redmap.TaskError{Index: idx, Func: fn, Err: cause}
}
