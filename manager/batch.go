package manager

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/failure"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/tracing"
)

// Result is the outcome of one element of a batch.
type Result[Out any] struct {
	Index int   // the element's index in the input
	Value Out   // its output; the zero value if Err is set
	Err   error // a *redmap.TaskError, or nil
}

// Batch is a submitted batch of elements whose outputs have type Out. Its
// results can be read in completion order while it runs (Results) and waited
// for in input order (Wait), each any number of times.
//
// A batch is its identity, fixed at Submit, and three parts under one lock,
// each with one job: its ledger of chunks and what is in flight (feed), its
// outputs or their fold (outs), and how it ends and why it waits (state),
// which its record and Progress read. What it needs of its manager comes in
// env; it never reaches back into the Manager.
type Batch[Out any] struct {
	env batchEnv
	batchIdentity
	origin  time.Time    // a durable batch's first start, if another call made it (b.mu)
	samples []rateSample // for Progress's recent rate; under mu

	mu       sync.Mutex
	feed     ledger
	bk       backups // its backup tasks (backup.go)
	outs     outputs[Out]
	state    outcome
	progress chan struct{} // closed at the next progress, if watched (see watch)
	watched  bool          // someone took progress since it was made
	batchEnding
}

// batchIdentity is what a batch is and runs: set when it is made
// (newBatch) and at submit (prepare, startSpan), before the feeder or a
// collector sees it; read-only after.
type batchIdentity struct {
	fn       string
	costKey  string              // what its tasks' cost is learnt under (sizing.key), or "" for nothing
	worker   string              // the private queue's worker, or ""
	priority int                 // its tasks' priority
	call     codec.CallInfo      // what its call says of it by name (published, recorded)
	id       string              // for operators: "<manager id>:<n>"
	lane     wire.Lane           // where its public tasks wait: "<manager id>.<n in base 36>"
	seq      uint64              // n: the batch's number, and its lane's
	types    map[string][]string // the structure of each handle it calls, by name
	started  time.Time
	in       input      // the elements, to encode (again)
	span     trace.Span // the batch's span (tracing.go); a no-op one if not traced
	stream   bool       // the input is a sequence (SubmitSeq): results are read once, as they come
	// solo, for a batch that is one task (a lone Map), is its history
	// record as far as the manager knows it at submit: the task carries it
	// (codec.Task.Record) for the worker's finish to complete and write
	// with the result. Nil for any other batch.
	solo *wire.Solo
}

// batchEnding is how a batch ends and who waits for it: its submit
// context and the hooks set at submit (feeder.first, prepare, submit), and
// the channels closed as it ends (end), its record is written and its
// durable owner lets go.
type batchEnding struct {
	// ctx is the context the batch was submitted with: its end ends the
	// batch.
	ctx    context.Context
	stop   func() bool // detaches the batch from its submit context
	onEnd  func()      // releases what the batch holds (its constant); runs once
	ending sync.Once
	done   chan struct{}
	// recorded is closed once the batch's final record is in the queue's
	// history (or its write gave up): Wait returns after it.
	recorded chan struct{}
	// soloWritten is the record the finish of a solo batch's task wrote
	// with its result, as the result says it ended (wire.Complete); nil
	// if none was. Under mu.
	soloWritten *wire.BatchRecord
	// cancelRecorded says an operator's cancel of this durable batch, made
	// while no call held it, wrote its record with what ran
	// (redisbroker.Admin.CancelOwner): the call that takes it over writes
	// none, which would count its elements failed, not what ran. Under mu.
	cancelRecorded bool
	// settled, for a durable batch, is closed once its owner has closed
	// or detached (Manager.settle): Wait returns after it too.
	settled <-chan struct{}
}

// batchEnv is what a batch needs of its manager, handed to it when it is
// made.
type batchEnv struct {
	mid     string
	tracer  trace.Tracer
	log     *slog.Logger
	ended   *atomic.Int64 // Stats.Ended
	unsaid  *unsaid       // what of it the throughput counters were told
	lanes   *endedLanes   // where its lane goes when it ends, for the keeper to forget
	costs   *costs        // what the manager learns of each function's cost
	batches *registry     // the running batches, which it leaves as it ends
	history *history      // where its final record goes
	tasks   *withdrawal   // takes its outstanding tasks back
	// failures counts what fails on the manager's side (no worker, lost,
	// Redis unavailable, ...) for the queue's failure groups: workers count
	// what fails on theirs.
	failures *failure.Log
	durable  bool          // its manager owns a durable batch: see abort
	backups  *backupCounts // the manager's count of backup tasks (Stats), and the races that ended
}

// newBatch returns a batch of n elements (of a slice), or of a sequence
// (stream, n 0) whose length the feeder learns as it reads it; seq is its
// number in its manager.
func newBatch[Out any](env batchEnv, seq uint64, fn string, n int, red *redmap.Reducer[Out], stream bool) *Batch[Out] {
	var out []Out
	if red == nil && !stream {
		out = make([]Out, n)
	}
	return &Batch[Out]{
		env: env,
		batchIdentity: batchIdentity{seq: seq, fn: fn, stream: stream, id: id.Batch(env.mid, seq),
			started: time.Now(), span: tracing.NoSpan},
		feed:     ledger{n: n, left: n, exhausted: !stream, stream: stream, bounded: stream && red == nil},
		outs:     outputs[Out]{fn: fn, out: out, red: red, fold: folderOf(red), stream: stream, names: namesFailures[Out]()},
		progress: make(chan struct{}),
		batchEnding: batchEnding{done: make(chan struct{}), recorded: make(chan struct{}),
			stop: func() bool { return false }},
	}
}

// Len returns the number of elements in the batch: of a streamed batch
// (SubmitSeq), the number read from its sequence so far.
func (b *Batch[Out]) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.feed.n
}

// ID returns the batch's id as operators see it: in redmap batches, the
// dashboard and the queue's history ("<manager id>:<n>").
func (b *Batch[Out]) ID() string { return b.id }

// Done returns a channel closed when every element has a result, or the batch
// ended early.
func (b *Batch[Out]) Done() <-chan struct{} { return b.done }

// Wait blocks until the batch is done or ctx ends, and returns the outputs in
// input order. If some elements failed, it returns every output with a
// *redmap.BatchError listing the failed indexes; if the batch ended early
// (its submit context ended, Cancel, or Close), nil and that error. Ending ctx
// stops the wait, not the batch.
func (b *Batch[Out]) Wait(ctx context.Context) ([]Out, error) {
	return wait(ctx, b, func() []Out { return b.outs.out })
}

// wait waits for b to end or ctx, and returns what get reads of the batch
// (under b.mu) with the batch's error: why it ended early (then the zero T),
// a *redmap.BatchError of the failed elements, or nil.
func wait[T, Out any](ctx context.Context, b *Batch[Out], get func() T) (T, error) {
	var zero T
	select {
	case <-b.done:
	case <-ctx.Done():
		if ctx != b.ctx {
			return zero, ctx.Err() // a wait of the caller's own: the batch goes on
		}
		// The context the batch was submitted with (Map's): the batch ends
		// with it now, not when its hook runs, so that its record,
		// cancelled, reaches the history before the call returns, as any
		// end's does, and a Close right after finds nothing to record as
		// closed. The write is bounded by the history's budget.
		b.abort(ctx.Err())
		<-b.recorded
		return zero, ctx.Err()
	}
	// The batch's record reaches the queue's history before its outcome
	// reaches the caller, so an operator who looks after Map returned sees
	// how it ended. The context the batch was submitted with ending now
	// (a pipeline's, which an operator's cancel ends right after its
	// batch) does not cut that short: the write is bounded as above.
	select {
	case <-b.recorded:
	case <-ctx.Done():
		if ctx == b.ctx {
			<-b.recorded
		}
	}
	if b.settled != nil {
		select {
		case <-b.settled:
		case <-ctx.Done():
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state.err != nil {
		return zero, b.state.err
	}
	return get(), b.outs.batchError(b.feed.n, b.feed.cut)
}

// exhaust records that every element of the input has its chunk; cut, if
// not nil, says why the feeder stopped reading a sequence early. The batch
// ends once the last chunk does.
func (b *Batch[Out]) exhaust(cut error) {
	b.mu.Lock()
	if b.feed.exhausted || b.finished() {
		b.mu.Unlock()
		return
	}
	b.feed.exhausted, b.feed.cut = true, cut
	b.progressed()
}

// reduced is Wait for a batch whose outputs red folds: it returns their
// fold, with a *redmap.BatchError if some elements failed (the fold is then
// of the others).
func (b *Batch[Out]) reduced(ctx context.Context) (Out, error) {
	return wait(ctx, b, func() Out { return b.outs.acc })
}

// Results returns the results in completion order, as they arrive. Ranging
// over it blocks until the next result; it ends when every element has a
// result or the batch ended early (then Wait says why).
//
// A batch of a slice can be ranged over any number of times. A streamed
// batch (SubmitSeq) holds only the results not yet read, so each is yielded
// once; breaking out of the loop cancels the batch (its queued tasks are
// withdrawn and its sequence is read no further).
func (b *Batch[Out]) Results() iter.Seq[Result[Out]] {
	if b.stream {
		return b.streamed(false)
	}
	return func(yield func(Result[Out]) bool) {
		for i := 0; ; {
			b.mu.Lock()
			if i < len(b.outs.order) {
				c := b.feed.chunks[b.outs.order[i]]
				rs := make([]Result[Out], c.count)
				for j := range rs {
					idx := c.start + j
					rs[j] = Result[Out]{Index: idx, Value: b.outs.out[idx]}
					if e := b.outs.errs[idx]; e != nil {
						rs[j].Err = e
					}
				}
				b.mu.Unlock()
				i++
				for _, r := range rs {
					if !yield(r) {
						return
					}
				}
				continue
			}
			finished, progress := b.finished(), b.watch()
			b.mu.Unlock()
			if finished {
				return
			}
			<-progress
		}
	}
}

// Ordered returns the results of a streamed batch (SubmitSeq) in input
// order, as they become the next in order: results that come early wait in
// a reorder buffer, which the feeder's bound on unread results keeps small
// (it submits no more while it is full). Like Results, each result is
// yielded once and breaking out cancels the batch. For a batch of a slice,
// it waits for the batch and yields every result in order.
func (b *Batch[Out]) Ordered() iter.Seq[Result[Out]] {
	if b.stream {
		return b.streamed(true)
	}
	return func(yield func(Result[Out]) bool) {
		<-b.done
		b.mu.Lock()
		if b.state.err != nil { // ended early: Wait says why
			b.mu.Unlock()
			return
		}
		rs := make([]Result[Out], b.feed.n)
		for i := range rs {
			rs[i] = b.outs.result(i)
		}
		b.mu.Unlock()
		for _, r := range rs {
			if !yield(r) {
				return
			}
		}
	}
}

// streamed reads a stream's results once each, in completion order or, if
// ordered, in input order.
func (b *Batch[Out]) streamed(ordered bool) iter.Seq[Result[Out]] {
	return func(yield func(Result[Out]) bool) {
		early := map[int]Result[Out]{} // ordered: results ahead of next
		next := 0
		for {
			b.mu.Lock()
			if len(b.outs.ready) == 0 {
				finished, progress := b.finished(), b.watch()
				b.mu.Unlock()
				if finished {
					return
				}
				<-progress
				continue
			}
			rs := b.outs.ready
			b.outs.ready = nil
			b.mu.Unlock()
			for _, r := range rs {
				var out []Result[Out]
				if !ordered {
					out = append(out, r)
				} else {
					early[r.Index] = r
					for {
						r, ok := early[next]
						if !ok {
							break
						}
						delete(early, next)
						next++
						out = append(out, r)
					}
				}
				for _, r := range out {
					b.read(1)
					if !yield(r) {
						b.abort(context.Canceled)
						return
					}
				}
			}
		}
	}
}

// read records that n of a stream's results were yielded, and wakes the
// feeder if it waits for room.
func (b *Batch[Out]) read(n int) {
	b.mu.Lock()
	if b.feed.read(n) && !b.finished() {
		b.signal()
	}
	b.mu.Unlock()
}

// Cancel ends the batch early with context.Canceled: its queued tasks are
// withdrawn and skipped by workers, and results still to come are discarded.
func (b *Batch[Out]) Cancel() { b.cancel(context.Canceled) }

// isFinished reports whether the batch is done.
func (b *Batch[Out]) isFinished() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.finished()
}

// addChunks appends chunks to the batch, counting them in flight, and
// returns the index of the first.
func (b *Batch[Out]) addChunks(cs ...chunk) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.feed.add(cs...)
}

// served records whether, at now, some live worker serves the batch's
// function (see outcome.served).
func (b *Batch[Out]) served(ok bool, now time.Time, timeout time.Duration, why string) (began, expired bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state.served(ok, now, timeout, why)
}

// inFlight returns what of the batch is in flight (see ledger.window).
func (b *Batch[Out]) inFlight() (tasks, bytes, elems, maxElems int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.feed.window()
}

// room returns whether the feeder may submit more now, the channel closed
// at the batch's next progress, whether the batch is over, and why its
// waiting elements were failed, if they were: the feeder then fails the
// rest.
func (b *Batch[Out]) room() (room bool, progress chan struct{}, finished bool, stopped error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.feed.room(), b.watch(), b.finished(), b.state.stopped
}

// failUnsubmitted fails elements [start, start+count) that were never
// submitted, as a chunk of their own.
func (b *Batch[Out]) failUnsubmitted(start, count, attempt int, cause error) {
	ci := b.addChunks(chunk{start: start, count: count})
	b.fail(ci, attempt, cause)
}

// finished reports whether the batch is done; b.mu must be held.
func (b *Batch[Out]) finished() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// closeChunk is the one place that ends a chunk: it calls record to set the
// outcome of the chunk's elements, counts them, and wakes readers and the
// feeder, unless the chunk is already over or the batch has ended, in which
// case it does nothing. So however many parts of the manager learn of a
// chunk's end (a result, a worker's death, Redis gone, a resubmission
// that failed), its elements are counted once. record returns the chunk's
// outputs for a stream (nil where all failed); a slice batch's go to out.
func (b *Batch[Out]) closeChunk(ci int, record func(c chunk) []Out) {
	b.mu.Lock()
	c := &b.feed.chunks[ci]
	if c.over || b.finished() {
		b.mu.Unlock()
		return
	}
	c.over = true
	c.payload = nil
	b.outs.keep(ci, *c, b.recordSafely(*c, record))
	b.feed.settle(*c)
	if b.soloWritten != nil {
		// The finish that wrote the record counted the elements in the
		// queue's throughput.
		b.env.unsaid.endSaid(int64(c.count))
	} else {
		b.env.ended.Add(int64(c.count))
	}
	b.progressed()
}

// progressed wakes whoever watches the batch, ends it if every element has
// its outcome, and unlocks b.mu, which must be held; an ended batch is
// released, with b.mu free.
func (b *Batch[Out]) progressed() {
	ended := b.feed.ended()
	if ended {
		close(b.done)
	}
	b.signal()
	b.mu.Unlock()
	if ended {
		b.release()
	}
}

// recordSafely calls record for chunk c; a panic in it (in decoding a
// result, say, on bytes some check missed) fails the chunk's elements with
// ErrDecode instead of leaving b.mu held and the process down. b.mu must be
// held.
func (b *Batch[Out]) recordSafely(c chunk, record func(c chunk) []Out) (vals []Out) {
	defer func() {
		if p := recover(); p != nil {
			b.env.log.Error("recording a task's result panicked; its elements fail", "batch", b.id, "task", c.tid, "panic", p, "stack", string(debug.Stack()))
			b.outs.failElements(c, 0, fmt.Errorf("%w: recording the result of task %s panicked: %v", redmap.ErrDecode, c.tid, p))
			vals = nil
		}
	}()
	return record(c)
}

// watch returns the channel closed at the batch's next progress (a chunk
// over, a result read, the batch ended); b.mu must be held.
func (b *Batch[Out]) watch() chan struct{} {
	b.watched = true
	return b.progress
}

// signal wakes whoever watches the batch's progress; b.mu must be held. A
// new channel is made only if the last one was taken, not once per chunk.
func (b *Batch[Out]) signal() {
	if !b.watched {
		return
	}
	close(b.progress)
	b.progress = make(chan struct{})
	b.watched = false
}

// release detaches the batch from its context and releases what it holds;
// it runs once, without b.mu held, since releasing talks to Redis.
func (b *Batch[Out]) release() {
	b.ending.Do(func() {
		if !b.leftInRedis() {
			// A durable batch left in Redis stays listed: its owner, which
			// stops, publishes it as it was until then, so operators see it
			// orphaned, never gone.
			b.env.batches.unlist(b.id)
		}
		b.stop()
		b.backupsOver()
		if b.env.lanes != nil && !b.env.durable {
			// Nothing of it is wanted any more: its lane's entry and keys
			// go with the keeper's next tick.
			b.env.lanes.add(strconv.FormatUint(b.seq, 36))
		}
		// A durable batch left in Redis keeps its constant held there.
		if b.onEnd != nil && !b.leftInRedis() {
			b.onEnd()
		}
		if b.isEmpty() {
			b.endSpan(wire.BatchRecord{Outcome: "done"})
			close(b.recorded) // an empty batch ran nothing: no record
			return
		}
		if b.leftInRedis() {
			// A durable batch goes on in Redis: it has not ended, and its
			// last published progress stays for operators.
			b.endSpan(b.record())
			close(b.recorded)
			return
		}
		r := b.record()
		b.endSpan(r)
		if b.cancelledUnheld() {
			close(b.recorded)
			return
		}
		failed := b.failedElements()
		if b.writtenAlike(r) {
			// Its task's finish wrote the record; not its failed elements.
			if len(failed.Elements) == 0 {
				close(b.recorded)
			} else {
				b.env.history.recordFailed(r, failed, b.recorded)
			}
			return
		}
		b.env.history.record(r, failed, b.recorded)
	})
}

// cancelledUnheld reports whether an operator's cancel recorded the batch
// (cancelRecorded).
func (b *Batch[Out]) cancelledUnheld() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cancelRecorded
}

// isEmpty reports whether the batch has no element and never will.
func (b *Batch[Out]) isEmpty() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.feed.n == 0 && b.feed.exhausted
}

// writtenAlike reports whether the finish of the batch's only task wrote
// a record in the queue's history that says what r, the manager's, says.
func (b *Batch[Out]) writtenAlike(r wire.BatchRecord) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.soloWritten != nil && wire.SameEnd(*b.soloWritten, r)
}

// soloChunk reports whether elements [start, end) are all the batch's,
// for a solo batch: its only task, which carries its record.
func (b *Batch[Out]) soloChunk(start, end int) bool {
	return b.solo != nil && start == 0 && end == b.solo.Record.Total
}

// firstStarted returns when the batch first started: for a durable batch
// taken over, when the call that first submitted it did (origin), else
// when this call did; b.mu must be held.
func (b *Batch[Out]) firstStarted() time.Time {
	if !b.origin.IsZero() {
		return b.origin
	}
	return b.started
}

// resumedFrom records ms (Unix ms, as durable sums keep it: startedField),
// if it parses, as when the batch first started.
func (b *Batch[Out]) resumedFrom(ms string) {
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil || n <= 0 {
		return
	}
	b.mu.Lock()
	b.origin = time.UnixMilli(n)
	b.mu.Unlock()
}

// record returns the batch's final record for the queue's history.
func (b *Batch[Out]) record() wire.BatchRecord {
	p := b.published()
	b.mu.Lock()
	defer b.mu.Unlock()
	r := p.Record(b.id, b.env.mid)
	r.Outcome, r.Ended = outcomeOf(b.state.err, b.outs.failures()), time.Now().UnixMilli()
	if b.outs.failures() > 0 {
		r.FailedBy = make(map[string]int)
		for _, e := range b.outs.errs {
			r.FailedBy[causeOf(e.Err)]++
		}
		for _, e := range b.outs.stepErrs {
			r.FailedBy[causeOf(e.Err)]++
		}
	}
	if b.state.err != nil {
		r.Reason = b.state.err.Error()
	}
	if r.Outcome == wire.OutcomeFailed && b.state.err == nil && len(b.outs.errs) > 0 && r.FailedBy[wire.OutcomeCancelled] == b.outs.failures() {
		// An operator's cancel of a durable batch no call held: every
		// element failed with ErrCancelled when the next call took it over.
		r.Outcome = wire.OutcomeCancelled
		for _, e := range b.outs.errs {
			r.Reason = e.Err.Error() // each says it was cancelled
			break
		}
	}
	return r
}

// failedElements returns the batch's failed elements for operators, the
// first wire.MaxFailedElements by index and how many more failed; none for
// a batch cancelled or closed, whose elements did not fail in the fleet.
// A pipeline's element that failed in a step is listed by its index in the
// pipeline's input, or past a by-key step by its key, after the others.
func (b *Batch[Out]) failedElements() wire.FailedElements {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out wire.FailedElements
	if b.outs.failures() == 0 {
		return out
	}
	es := make([]*redmap.TaskError, 0, b.outs.failures())
	for _, e := range b.outs.errs {
		if k := causeOf(e.Err); k != wire.OutcomeCancelled && k != wire.OutcomeClosed {
			es = append(es, e)
		}
	}
	slices.SortFunc(es, func(a, b *redmap.TaskError) int { return a.Index - b.Index })
	es = append(es, b.outs.stepErrs...)
	if len(es) > wire.MaxFailedElements {
		out.Omitted = len(es) - wire.MaxFailedElements
		es = es[:wire.MaxFailedElements]
	}
	out.Elements = make([]wire.FailedElement, len(es))
	for j, e := range es {
		out.Elements[j] = wire.FailedElement{Index: e.Index, Key: e.Key, Stage: e.Stage, Kind: causeOf(e.Err), Error: e.Err.Error(), Attempts: e.Attempt + 1, Worker: e.Worker}
	}
	return out
}

// deliver records the result of chunk ci; err is set if the result could not
// be fully decoded.
//
// The outputs are decoded before the batch's lock is taken, into a slice of
// their own, so that the collector can decode many results at once (see
// dispatchAll); under the lock they are only copied.
func (b *Batch[Out]) deliver(ci int, r *codec.Result, err error) {
	var vals []Out
	var decodeErr error
	if err == nil && b.outs.red == nil && !wholeFailure(r) {
		b.mu.Lock()
		c := b.feed.chunks[ci]
		b.mu.Unlock()
		if !c.over {
			vals = make([]Out, c.count)
			decodeErr = codec.DecodeElements(r.Values, vals)
		}
	}
	b.closeChunk(ci, func(c chunk) []Out {
		if err != nil {
			cause := fmt.Errorf("%w: result: %v", redmap.ErrDecode, err)
			b.outs.failElements(c, 0, cause)
			b.noteFailure(c, cause)
			return nil
		}
		b.env.costs.observe(b.costKey, r.Nanos, c.count)
		b.env.costs.observeOut(b.costKey, len(r.Values), c.count)
		b.backupEnded(ci, r)
		if r.Recorded && b.soloChunk(c.start, c.start+c.count) {
			w := wire.Complete(b.solo.Record, c.count, r.Fails, 0)
			b.soloWritten = &w
		}
		return b.outs.record(c, r, vals, decodeErr)
	})
}

// fail fails every element of chunk ci with cause.
func (b *Batch[Out]) fail(ci, attempt int, cause error) {
	b.closeChunk(ci, func(c chunk) []Out {
		b.outs.failElements(c, attempt, cause)
		b.noteFailure(c, cause)
		return nil
	})
}

// noteFailure counts chunk c's elements, failed on the manager's side with
// cause, in the queue's failure groups (redmap failures), by the kind the
// history records them under; a cancelled or closed batch's are not
// failures of the fleet, and are left to the history.
func (b *Batch[Out]) noteFailure(c chunk, cause error) {
	kind := causeOf(cause)
	if b.env.failures == nil || kind == wire.OutcomeCancelled || kind == wire.OutcomeClosed {
		return
	}
	b.env.failures.NoteKind(b.fn, kind, c.tid, cause.Error(), c.count)
}

// abort ends the batch early with err and withdraws its outstanding tasks;
// a durable batch's are left in Redis, for the next call to take it over
// (its context ended, or its manager closed), unless its context ended
// with an operator's cancel of its pipeline: that one is over.
func (b *Batch[Out]) abort(err error) { b.end(err, !b.env.durable || cancelledByOperator(b.ctx)) }

// cancel ends the batch early with err and withdraws its outstanding
// tasks, durable or not: Cancel, an operator's cancel.
func (b *Batch[Out]) cancel(err error) { b.end(err, true) }

// end ends the batch early with err, withdrawing its outstanding tasks if
// withdraw is set.
func (b *Batch[Out]) end(err error, withdraw bool) {
	b.mu.Lock()
	if b.finished() {
		b.mu.Unlock()
		return
	}
	b.state.err = err
	b.state.left = !withdraw
	close(b.done)
	b.signal()
	_, tids := b.feed.open()
	b.mu.Unlock()
	if withdraw {
		b.env.tasks.withdraw(tids)
	}
	b.release()
}

// leftInRedis reports whether the batch ended early leaving its tasks in
// Redis (a durable batch's context ended, or its manager closed).
func (b *Batch[Out]) leftInRedis() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state.left
}

// function returns the batch's function name, and whether the batch is on
// the public queue (a private one has its own worker, checked at Submit).
func (b *Batch[Out]) function() (string, bool) { return b.fn, b.worker == "" }

// failWaiting fails, with cause, every element that has no outcome yet: it
// withdraws the batch's outstanding tasks, fails their chunks, and makes the
// feeder fail what it has not submitted.
func (b *Batch[Out]) failWaiting(cause error) {
	b.mu.Lock()
	b.state.stopped = cause
	open, tids := b.feed.open()
	b.mu.Unlock()
	b.env.tasks.withdraw(tids)
	for _, ci := range open {
		b.fail(ci, 0, cause)
	}
}

// resubmission returns the payload of chunk ci again, and the worker whose
// private queue it goes to ("" for the public queue).
func (b *Batch[Out]) resubmission(ci int) (wire.Task, string, wire.Lane, error) {
	b.mu.Lock()
	c := b.feed.chunks[ci]
	b.mu.Unlock()
	b.event("task resubmitted", tracing.MessagingMessageID.String(c.tid),
		tracing.Reason.String("Redis lost the task (restarted, flushed or failed over)"))
	if c.payload != nil {
		return wire.Task{ID: c.tid, Payload: c.payload}, b.worker, b.lane, nil
	}
	payload, err := b.in.encode(c.start, c.start+c.count)
	return wire.Task{ID: c.tid, Payload: payload}, b.worker, b.lane, err
}

// place returns where the batch's tasks wait: the worker of its private
// list ("" for the public queue) and its lane.
func (b *Batch[Out]) place() (string, wire.Lane) { return b.worker, b.lane }

// calls returns what the batch's tasks call (wire.Calls).
func (b *Batch[Out]) calls() string { return b.lane.Calls }

// typesOf returns the structure of the types of handle name, as the batch
// calls it.
func (b *Batch[Out]) typesOf(name string) []string { return b.types[name] }
