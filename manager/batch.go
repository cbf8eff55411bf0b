package manager

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"reflect"
	"runtime/debug"
	"sort"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/engine"
	"github.com/redmap/redmap/internal/failure"
	"github.com/redmap/redmap/internal/tracing"
	"github.com/redmap/redmap/internal/wire"
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
type Batch[Out any] struct {
	m        *Manager
	fn       string
	stop     func() bool // detaches the batch from its submit context
	onEnd    func()      // releases what the batch holds (its constant); runs once
	ending   sync.Once
	worker   string              // the private queue's worker, or ""
	priority int                 // its tasks' priority
	id       string              // for operators: "<manager id>:<n>"
	lane     wire.Lane           // where its public tasks wait: "<manager id>.<n in base 36>"
	seq      uint64              // n: the batch's number, and its lane's
	types    map[string][]string // the structure of each handle it calls, by name
	started  time.Time
	in       input      // the elements, to encode (again)
	span     trace.Span // the batch's span (tracing.go); a no-op one if not traced

	red    *redmap.Reducer[Out] // folds the outputs (MapReduce), or nil
	stream bool                 // the input is a sequence (SubmitSeq): results are read once, as they come

	mu        sync.Mutex
	n         int                // elements: all of a slice; of a sequence, those read so far
	exhausted bool               // every element of the input has its chunk
	cut       error              // why the feeder stopped reading a sequence early, if it did
	chunks    []chunk            // the tasks submitted so far, appended by the feeder
	out       []Out              // the outputs, in input order; nil if red folds them or for a stream
	ready     []Result[Out]      // a stream's results not yet read, in completion order
	fold      engine.Folder[Out] // with red: its fold, in the manager
	acc       Out                // with red: the fold of the partials so far
	folded    bool               // with red: acc holds a fold
	errs      map[int]*redmap.TaskError
	order     []int         // indexes of the chunks over, in completion order
	left      int           // elements without a result yet
	err       error         // why the batch ended early, if it did
	progress  chan struct{} // closed at the next progress, if watched (see watch)
	watched   bool          // someone took progress since it was made
	done      chan struct{}
	// recorded is closed once the batch's final record is in the queue's
	// history (or its write gave up): Wait returns after it.
	recorded chan struct{}

	// The in-flight window: tasks and payload bytes submitted and not yet
	// delivered. The feeder submits more only while both are under the
	// manager's bounds.
	inflight, inflightBytes int
	// A stream's elements in flight, and its results not yet read: their
	// sum is held under maxUnread, so a stream's outputs cannot pile up in
	// the manager faster than it reads them.
	inflightElems, unread int

	waiting  string    // why the batch does not advance (no live worker serves it), or ""
	unserved time.Time // since when no live worker serves it, or zero
	stopped  error     // set when the waiting elements were failed: the feeder fails the rest
}

// chunk is one task of a batch: count elements from start, size bytes of
// payload. A chunk with no task id holds elements that were never submitted
// (one that could not be encoded, or the rest of a batch Redis did not take).
// over is set once, by closeChunk, when the chunk's elements have their
// outcome.
type chunk struct {
	start, count, size int
	tid                string
	over               bool
	payload            []byte // kept while out if the input cannot encode it again
}

// newBatch returns a batch of n elements (of a slice), or of a sequence
// (stream, n 0) whose length the feeder learns as it reads it.
func newBatch[Out any](m *Manager, fn string, n int, red *redmap.Reducer[Out], stream bool) *Batch[Out] {
	var out []Out
	if red == nil && !stream {
		out = make([]Out, n)
	}
	seq := m.batchSeq.Add(1)
	return &Batch[Out]{
		seq:       seq,
		m:         m,
		fn:        fn,
		n:         n,
		exhausted: !stream,
		red:       red,
		fold:      folderOf(red),
		stream:    stream,
		id:        m.id + ":" + strconv.FormatUint(seq, 10),
		started:   time.Now(),
		out:       out,
		left:      n,
		progress:  make(chan struct{}),
		done:      make(chan struct{}),
		recorded:  make(chan struct{}),
		stop:      func() bool { return false },
		span:      tracing.NoSpan,
	}
}

// Len returns the number of elements in the batch: of a streamed batch
// (SubmitSeq), the number read from its sequence so far.
func (b *Batch[Out]) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n
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
	return wait(ctx, b, func() []Out { return b.out })
}

// wait waits for b to end or ctx, and returns what get reads of the batch
// (under b.mu) with the batch's error: why it ended early (then the zero T),
// a *redmap.BatchError of the failed elements, or nil.
func wait[T, Out any](ctx context.Context, b *Batch[Out], get func() T) (T, error) {
	var zero T
	select {
	case <-b.done:
	case <-ctx.Done():
		return zero, ctx.Err()
	}
	// The batch's record reaches the queue's history before its outcome
	// reaches the caller, so an operator who looks after Map returned sees
	// how it ended.
	select {
	case <-b.recorded:
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return zero, b.err
	}
	return get(), b.batchError()
}

// exhaust records that every element of the input has its chunk; cut, if
// not nil, says why the feeder stopped reading a sequence early. The batch
// ends once the last chunk does.
func (b *Batch[Out]) exhaust(cut error) {
	b.mu.Lock()
	if b.exhausted || b.finished() {
		b.mu.Unlock()
		return
	}
	b.exhausted, b.cut = true, cut
	ended := b.left == 0
	if ended {
		close(b.done)
		b.signal()
	}
	b.mu.Unlock()
	if ended {
		b.release()
	}
}

// reduced is Wait for a batch whose outputs red folds: it returns their
// fold, with a *redmap.BatchError if some elements failed (the fold is then
// of the others).
func (b *Batch[Out]) reduced(ctx context.Context) (Out, error) {
	return wait(ctx, b, func() Out { return b.acc })
}

// batchError returns the failed elements as a *redmap.BatchError, or nil if
// none failed; b.mu must be held.
func (b *Batch[Out]) batchError() error {
	var err error
	if len(b.errs) > 0 {
		be := &redmap.BatchError{Total: b.n, Failed: make([]*redmap.TaskError, 0, len(b.errs))}
		for _, e := range b.errs {
			be.Failed = append(be.Failed, e)
		}
		sort.Slice(be.Failed, func(i, j int) bool { return be.Failed[i].Index < be.Failed[j].Index })
		err = be
	}
	if b.cut != nil {
		// A streamed batch whose feeder gave up: what it read has its
		// outcome, and what it did not read is not part of the batch.
		err = errors.Join(err, fmt.Errorf("manager: reading the input stopped after element %d: %w", b.n, b.cut))
	}
	return err
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
			if i < len(b.order) {
				c := b.chunks[b.order[i]]
				rs := make([]Result[Out], c.count)
				for j := range rs {
					idx := c.start + j
					rs[j] = Result[Out]{Index: idx, Value: b.out[idx]}
					if e := b.errs[idx]; e != nil {
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
		if b.err != nil { // ended early: Wait says why
			b.mu.Unlock()
			return
		}
		rs := make([]Result[Out], b.n)
		for i := range rs {
			rs[i] = Result[Out]{Index: i, Value: b.out[i]}
			if e := b.errs[i]; e != nil {
				rs[i].Err = e
			}
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
			if len(b.ready) == 0 {
				finished, progress := b.finished(), b.watch()
				b.mu.Unlock()
				if finished {
					return
				}
				<-progress
				continue
			}
			rs := b.ready
			b.ready = nil
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
	before := b.inflightElems + b.unread
	b.unread -= n
	wake := before > maxUnread/2 && before-n <= maxUnread/2 // the feeder has room again
	if wake && !b.finished() {
		b.signal()
	}
	b.mu.Unlock()
}

// Cancel ends the batch early with context.Canceled: its queued tasks are
// withdrawn and skipped by workers, and results still to come are discarded.
func (b *Batch[Out]) Cancel() { b.abort(context.Canceled) }

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
	first := len(b.chunks)
	b.chunks = append(b.chunks, cs...)
	b.inflight += len(cs)
	for _, c := range cs {
		b.inflightBytes += c.size
		b.inflightElems += c.count
		if b.stream { // a stream's elements count as they are read
			b.n += c.count
			b.left += c.count
		}
	}
	return first
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
	c := &b.chunks[ci]
	if c.over || b.finished() {
		b.mu.Unlock()
		return
	}
	c.over = true
	c.payload = nil
	vals := b.recordSafely(*c, record)
	switch {
	case b.red != nil: // a fold has no per-element results to read
	case b.stream:
		for i := c.start; i < c.start+c.count; i++ {
			r := Result[Out]{Index: i}
			if e := b.errs[i]; e != nil {
				r.Err = e
			} else if vals != nil {
				r.Value = vals[i-c.start]
			}
			b.ready = append(b.ready, r)
		}
		b.unread += c.count
	default:
		b.order = append(b.order, ci)
	}
	b.left -= c.count
	b.m.stats.ended.Add(int64(c.count))
	b.inflight--
	b.inflightBytes -= c.size
	b.inflightElems -= c.count
	if b.left == 0 && b.exhausted {
		close(b.done)
	}
	b.signal()
	ended := b.left == 0 && b.exhausted
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
			b.m.log.Error("recording a task's result panicked; its elements fail", "batch", b.id, "task", c.tid, "panic", p, "stack", string(debug.Stack()))
			b.failElements(c, 0, fmt.Errorf("%w: recording the result of task %s panicked: %v", redmap.ErrDecode, c.tid, p))
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
		b.m.batches.unlist(b.id)
		b.stop()
		if b.onEnd != nil {
			b.onEnd()
		}
		if b.isEmpty() {
			b.endSpan(wire.BatchRecord{Outcome: "done"})
			close(b.recorded) // an empty batch ran nothing: no record
			return
		}
		r := b.record()
		b.endSpan(r)
		b.m.history.record(r, b.recorded)
	})
}

// isEmpty reports whether the batch has no element and never will.
func (b *Batch[Out]) isEmpty() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n == 0 && b.exhausted
}

// record returns the batch's final record for the queue's history.
func (b *Batch[Out]) record() wire.BatchRecord {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := wire.BatchRecord{ID: b.id, Manager: b.m.id, Func: b.fn, Priority: b.priority, Worker: b.worker,
		Total: b.n, Done: b.n - b.left, Failed: len(b.errs), Outcome: outcomeOf(b.err, len(b.errs)),
		Started: b.started.UnixMilli(), Ended: time.Now().UnixMilli()}
	if len(b.errs) > 0 {
		r.FailedBy = make(map[string]int)
		for _, e := range b.errs {
			r.FailedBy[causeOf(e.Err)]++
		}
	}
	if b.err != nil {
		r.Reason = b.err.Error()
	}
	return r
}

// failElement records element i's failure; b.mu must be held.
func (b *Batch[Out]) failElement(i, attempt int, cause error, stack string) {
	if b.errs == nil {
		b.errs = make(map[int]*redmap.TaskError)
	}
	if b.out != nil {
		var zero Out
		b.out[i] = zero
	}
	b.errs[i] = &redmap.TaskError{Index: i, Func: b.fn, Attempt: attempt, Err: cause, Stack: stack}
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
	if err == nil && b.red == nil && !wholeFailure(r) {
		b.mu.Lock()
		c := b.chunks[ci]
		b.mu.Unlock()
		if !c.over {
			vals = make([]Out, c.count)
			decodeErr = codec.DecodeElements(r.Values, vals)
		}
	}
	b.closeChunk(ci, func(c chunk) []Out {
		if err != nil {
			b.failElements(c, 0, fmt.Errorf("%w: result: %v", redmap.ErrDecode, err))
			return nil
		}
		b.m.costs.observe(b.fn, r.Nanos, c.count)
		for _, f := range r.Fails {
			if f.Index == -1 {
				b.failElements(c, r.Attempt, failure.Cause(f))
				return nil
			}
		}
		if b.red != nil {
			b.foldPartial(c, r)
			return nil
		}
		if vals == nil || len(vals) != c.count { // cannot happen: chunks do not change
			b.failElements(c, r.Attempt, fmt.Errorf("%w: result of a chunk it did not expect", redmap.ErrDecode))
			return nil
		}
		if !b.stream {
			copy(b.out[c.start:c.start+c.count], vals)
		}
		if err := decodeErr; err != nil {
			bad := 0
			var ee *codec.ElementError
			if errors.As(err, &ee) {
				bad = ee.Index
			}
			// Past an undecodable output the frame cannot be read further.
			for i := bad; i < c.count; i++ {
				b.failElement(c.start+i, r.Attempt, fmt.Errorf("%w: output as %v: %v", redmap.ErrDecode, reflect.TypeFor[Out](), err), "")
			}
		}
		for _, f := range r.Fails {
			cause := failure.Cause(f)
			for i := f.Index; i <= min(f.Last(), c.count-1); i++ {
				b.failElement(c.start+i, r.Attempt, cause, f.Stack)
			}
		}
		return vals
	})
}

// wholeFailure reports whether r fails every element of its task.
func wholeFailure(r *codec.Result) bool {
	for _, f := range r.Fails {
		if f.Index == -1 {
			return true
		}
	}
	return false
}

// foldPartial records the result of chunk c of a batch red folds: its failed
// elements, and its partial (the fold of the others), folded into acc. A
// partial that cannot be decoded or folded in fails the chunk's elements it
// stands for. b.mu must be held.
func (b *Batch[Out]) foldPartial(c chunk, r *codec.Result) {
	failed := make(map[int]bool, len(r.Fails))
	for _, f := range r.Fails {
		cause := failure.Cause(f)
		for i := max(f.Index, 0); i <= min(f.Last(), c.count-1); i++ {
			failed[i] = true
			b.failElement(c.start+i, r.Attempt, cause, f.Stack)
		}
	}
	if len(failed) == c.count {
		return // no partial: every element failed
	}
	var partial [1]Out
	err := codec.DecodeElements(r.Values, partial[:])
	if err != nil {
		err = fmt.Errorf("%w: partial as %v: %v", redmap.ErrDecode, reflect.TypeFor[Out](), err)
	} else if !b.folded {
		b.acc, b.folded = partial[0], true
	} else if acc, ferr := b.fold.Fold(context.Background(), b.acc, partial[0]); ferr != nil {
		err = ferr
		if !errors.Is(err, redmap.ErrReduce) {
			err = fmt.Errorf("%w: folding partials in the manager: %w", redmap.ErrReduce, ferr)
		}
	} else {
		b.acc = acc
	}
	if err != nil {
		for i := range c.count {
			if !failed[i] {
				b.failElement(c.start+i, r.Attempt, err, "")
			}
		}
	}
}

// fail fails every element of chunk ci with cause.
func (b *Batch[Out]) fail(ci, attempt int, cause error) {
	b.closeChunk(ci, func(c chunk) []Out { b.failElements(c, attempt, cause); return nil })
}

// failElements fails every element of c; b.mu must be held.
func (b *Batch[Out]) failElements(c chunk, attempt int, cause error) {
	for i := c.start; i < c.start+c.count; i++ {
		b.failElement(i, attempt, cause, "")
	}
}

// abort ends the batch early with err and withdraws its outstanding tasks.
func (b *Batch[Out]) abort(err error) {
	b.mu.Lock()
	if b.finished() {
		b.mu.Unlock()
		return
	}
	b.err = err
	close(b.done)
	b.signal()
	tids := make([]string, 0, len(b.chunks))
	for _, c := range b.chunks {
		if c.tid != "" && !c.over {
			tids = append(tids, c.tid)
		}
	}
	b.mu.Unlock()
	b.m.withdraw(tids)
	b.release()
}

// function returns the batch's function name, and whether the batch is on
// the public queue (a private one has its own worker, checked at Submit).
func (b *Batch[Out]) function() (string, bool) { return b.fn, b.worker == "" }

// served records whether, at now, some live worker serves the batch's
// function; why says what it means if none does (kept as Progress.Waiting,
// the latest reason). It reports whether the
// batch just began to wait, and whether it has waited past timeout (never,
// if timeout is negative).
func (b *Batch[Out]) served(ok bool, now time.Time, timeout time.Duration, why string) (began, expired bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ok {
		b.unserved, b.waiting = time.Time{}, ""
		return false, false
	}
	if b.unserved.IsZero() {
		b.unserved = now
		began = true
	}
	// The latest reason: it grows more precise as the manager learns more
	// (a worker's types, published after its start, say which field
	// differs).
	b.waiting = why
	return began, timeout >= 0 && now.Sub(b.unserved) >= timeout
}

// failWaiting fails, with cause, every element that has no outcome yet: it
// withdraws the batch's outstanding tasks, fails their chunks, and makes the
// feeder fail what it has not submitted.
func (b *Batch[Out]) failWaiting(cause error) {
	b.mu.Lock()
	b.stopped = cause
	var open []int
	var tids []string
	for ci, c := range b.chunks {
		if !c.over {
			open = append(open, ci)
			if c.tid != "" {
				tids = append(tids, c.tid)
			}
		}
	}
	b.mu.Unlock()
	b.m.withdraw(tids)
	for _, ci := range open {
		b.fail(ci, 0, cause)
	}
}

// snapshot is Progress for the manager's untyped view.
func (b *Batch[Out]) snapshot() Progress { return b.Progress() }

// resubmission returns the payload of chunk ci again, and the worker whose
// private queue it goes to ("" for the public queue).
func (b *Batch[Out]) resubmission(ci int) (wire.Task, string, wire.Lane, error) {
	b.mu.Lock()
	c := b.chunks[ci]
	b.mu.Unlock()
	b.event("task resubmitted", tracing.MessagingMessageID.String(c.tid),
		tracing.Reason.String("Redis lost the task (restarted, flushed or failed over)"))
	if c.payload != nil {
		return wire.Task{ID: c.tid, Payload: c.payload}, b.worker, b.lane, nil
	}
	payload, err := b.in.encode(c.start, c.start+c.count)
	return wire.Task{ID: c.tid, Payload: payload}, b.worker, b.lane, err
}

// calls returns what the batch's tasks call (wire.Calls).
func (b *Batch[Out]) calls() string { return b.lane.Calls }

// typesOf returns the structure of the types of handle name, as the batch
// calls it.
func (b *Batch[Out]) typesOf(name string) []string { return b.types[name] }

// folderOf returns the fold of reducer red (nil if red is).
func folderOf[Out any](red *redmap.Reducer[Out]) engine.Folder[Out] {
	if red == nil {
		return nil
	}
	rt, _ := engine.Lookup(red)
	f, _ := engine.FolderOf[Out](rt) // a Reducer[Out]'s runtime is one
	return f
}
