package manager

import (
	"context"
	"fmt"
	"iter"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/codes"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/cache"
	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/keys"
)

// DefaultAttempts is the attempt budget of a batch without Attempts: each
// element may run up to 3 times, counting runs lost with their worker.
const DefaultAttempts = 3

// Map runs fn on every element of xs on the queue's workers and returns the
// outputs in input order. If some elements failed it returns every output
// (zero values where failed) and a *redmap.BatchError listing each failed
// index with its cause; the other elements complete. If ctx ends first it
// returns nil and ctx.Err(), withdrawing the batch's queued tasks.
//
// Cost: one script call per 1,000 tasks to submit, and about one round trip per
// 1,000 results to collect. At most 4,096 tasks or 64 MiB of payload of a
// batch are in Redis at once; the rest waits in the caller's slice.
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
	m, co, err := on(ctx, m, opts)
	if err != nil {
		return nil, err
	}
	return submit(ctx, m, spec{name: fn.Name(), sig: fn.Signature(), types: types(fn), limit: fn.Limit(), idempotent: idempotentOf(fn)}, elements[In]{xs: xs}, co, (*redmap.Reducer[Out])(nil))
}

// MapWith is Map for a function that takes constant data: constant is
// encoded and stored once in Redis under its BLAKE3 hash (not at all if it
// is already there), each task carries only the hash, and each worker process
// fetches and decodes it once. The batch holds the stored value while it runs
// and releases it when it ends; the value is deleted when no batch holds it.
//
// Cost, on top of Map's: one script call to find the value stored; if it is
// not, one upload of its bytes (one pipeline per 1 MiB of parts, then one script
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
	m, co, err := on(ctx, m, opts)
	if err != nil {
		return nil, err
	}
	sp, err := holdConstant(ctx, m, fn, constant)
	if err != nil {
		m.failed(err)
		return nil, err
	}
	b, err := submit(ctx, m, sp, elements[In]{xs: xs}, co, (*redmap.Reducer[Out])(nil))
	if err != nil {
		m.releaseUnused(sp)
		return nil, err
	}
	return b, nil
}

// holdConstant stores constant for a batch of fn (not at all if it is
// already there) and returns the batch's spec, holding it; the caller
// releases sp.holder if it submits nothing.
func holdConstant[C any](ctx context.Context, m *Manager, fn redmap.AnyHandle, constant C) (spec, error) {
	enc, err := codec.EncodeValue(&constant)
	if err != nil {
		return spec{}, fmt.Errorf("%w: constant of %q: %v", redmap.ErrEncode, fn.Name(), err)
	}
	if err := m.ready(ctx); err != nil {
		return spec{}, err
	}
	var ref cache.Ref
	var holder string
	err = m.faults.riding(ctx, func() error {
		return m.faults.callQueue(fmt.Sprintf("storing the constant of %q", fn.Name()), func() (err error) {
			ref, holder, err = m.holds.take(ctx, enc)
			return err
		})
	})
	if err != nil {
		return spec{}, err
	}
	return spec{name: fn.Name(), sig: fn.Signature(), types: types(fn), limit: fn.Limit(), idempotent: idempotentOf(fn), constant: &ref, holder: holder}, nil
}

// releaseUnused releases the hold of sp's constant, whose batch was not
// submitted. A durable batch's owner keeps it if it may be the batch's, in
// Redis: unless the batch recorded another constant.
func (m *Manager) releaseUnused(sp spec) {
	if m.owned != nil {
		// The same holder id as the batch's (the owner's first), so
		// releasing would drop the batch's hold if the constant is its own,
		// or if that is not known.
		found := m.owned.found
		if found == nil || sp.constant == nil || found.sums[constField] == sp.constant.Hash {
			return
		}
	}
	m.holds.release(sp.holder)
}

// types returns the structure of h's types that its signature fingerprints.
func types(h redmap.AnyHandle) []string {
	return h.Runtime().Types()
}

// idempotentOf reports whether h was declared redmap.Idempotent.
func idempotentOf(h any) bool {
	i, ok := h.(interface{ Idempotent() bool })
	return ok && i.Idempotent()
}

// spec says what a batch runs: the function and, if it takes one, the
// constant and the batch's hold on it.
type spec struct {
	name, sig string
	limit     redmap.Limit // declared with its handle
	// idempotent: its handle was declared redmap.Idempotent, so its
	// batches get backup tasks unless the call says otherwise.
	idempotent bool
	types      []string // the structure the signature fingerprints
	constant   *cache.Ref
	holder     string
	// red, if not nil, is the reducer the tasks name instead of the one
	// the manager folds their outputs with; shuffle is what they carry as
	// a map/reduce by key's (codec.Task.Shuffle). See shuffle.go.
	red     *reducerRef
	shuffle []byte
	// phase is a map/reduce by key's phase the batch runs ("map",
	// "reduce"), or "" for any other batch: it says how its chunks are
	// sized (sizingOf).
	phase string
	// also are more handles the tasks call, as "<name>\t<signature>": a
	// pipeline's steps. The lane lists them, so that only a worker that
	// serves them all takes its tasks.
	also []string
	// bare says the tasks name no reducer, though the manager folds their
	// outputs: a pipeline's chain phase, each of whose tasks returns one.
	bare bool
}

// sizingOf is how the chunks of a batch running sp are sized: a reduce
// phase's (one partition a task, fixed) learn nothing.
func sizingOf(sp spec) sizing {
	switch sp.phase {
	case "map":
		return mapSizing(sp.name)
	case "reduce":
		return sizing{}
	}
	return plainSizing(sp.name)
}

// elements is a batch's input: a slice xs, or a sequence seq if it is not
// nil.
type elements[In any] struct {
	xs  []In
	seq iter.Seq[In]
}

// submit submits a batch of els with call options co (callOptionsOf); with
// a reducer red, its outputs are folded (MapReduce) rather than kept.
func submit[In, Out any](ctx context.Context, m *Manager, sp spec, els elements[In], co callOptions, red *redmap.Reducer[Out]) (*Batch[Out], error) {
	b, err := submitOn(ctx, m, sp, els, co, red)
	if err != nil {
		m.failed(err)
		return nil, err
	}
	if m.owned != nil {
		b.settled = m.settle(b.done, b.recorded, b.leftInRedis)
	}
	return b, nil
}

// submitOn is submit on m, a manager or a durable batch's owner.
func submitOn[In, Out any](ctx context.Context, m *Manager, sp spec, els elements[In], co callOptions, red *redmap.Reducer[Out]) (*Batch[Out], error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := m.ready(ctx); err != nil {
		return nil, err
	}
	if co.worker != "" {
		if err := keys.CheckWorker(co.worker); err != nil {
			return nil, fmt.Errorf("manager: OnWorker: %w", err)
		}
		if err := m.awaitWorker(ctx, co.worker); err != nil {
			return nil, err
		}
	}
	b, f := prepare(ctx, m, sp, els, co, red)
	if n, known := b.in.length(); known && n == 0 {
		close(b.done)
		b.release()
		return b, nil
	}
	m.batches.list(b.id, b)
	if err := f.first(ctx, sp, red); err != nil {
		b.span.SetStatus(codes.Error, err.Error())
		b.span.End()
		return nil, err
	}
	return b, nil
}

// prepare makes a batch of fn over els and its feeder: the task every chunk
// copies, how a chunk's elements are encoded, and the input they are read
// from.
func prepare[In, Out any](ctx context.Context, m *Manager, sp spec, els elements[In], co callOptions, red *redmap.Reducer[Out]) (*Batch[Out], *feeder[Out]) {
	stream := els.seq != nil
	b := newBatch[Out](m.env, m.batchSeq.Add(1), sp.name, len(els.xs), red, stream)
	b.costKey = sizingOf(sp).key
	b.worker = co.worker
	b.priority = co.priority
	b.call = co.call
	b.bk.on = backupsOn(sp, co)
	b.types = callTypes(sp, red)
	reduce, reduceSig := reductionOf(sp, red)
	calls := wire.Calls(sp.name, sp.sig, reduce, reduceSig)
	for _, h := range sp.also {
		calls += "\n" + h
	}
	b.lane = wire.Lane{Name: m.id + "." + strconv.FormatUint(b.seq, 36), Calls: calls}
	if !stream {
		// Room for the batch's chunks (and their completion order) at the
		// size known now (the feeder may size them otherwise as it learns
		// the cost): a batch of 100,000 one-element tasks otherwise spends
		// a tenth of its manager's CPU growing the slices.
		size := co.chunk
		if size == 0 {
			size = m.costs.chunkSize(sizingOf(sp), len(els.xs))
		}
		room := min(len(els.xs)/size+1, 1<<20)
		b.feed.chunks = make([]chunk, 0, room)
		if red == nil {
			b.outs.order = make([]int, 0, room)
		}
	}
	task := codec.Task{Func: sp.name, Sig: sp.sig, Attempts: co.attempts, Timeout: co.timeout.Milliseconds(), Retry: co.retry, Seed: co.seed, Waits: co.waits, Call: co.call,
		Reduce: reduce, ReduceSig: reduceSig, Shuffle: sp.shuffle}
	task.Trace = b.startSpan(ctx, m.opts.Queue)
	var solo string
	if !stream && red == nil && sp.shuffle == nil && m.owned == nil && m.opts.History >= 0 && len(els.xs) > 0 {
		// Should the batch be one task, the task's finish writes its
		// record (Batch.solo). A reduction's is the manager's to write, as
		// a durable batch's.
		b.solo = &wire.Solo{Record: b.published().Record(b.id, m.id),
			Keep: m.opts.History, AgeMs: m.opts.HistoryAge.Milliseconds()}
		solo = wire.EncodeSolo(*b.solo)
	}
	if sp.constant != nil {
		task.Const, task.ConstSize = sp.constant.Hash, sp.constant.Size
		b.onEnd = func() { m.holds.release(sp.holder) }
	}
	enc := taskEncoder[In](b, task, solo, m.opts.MaxInputSize)
	if stream {
		b.in = newSeqInput(els.seq, enc)
	} else {
		b.in = &sliceInput[In]{xs: els.xs, enc: enc}
	}
	f := &feeder[Out]{feederParams: m.feeding, b: b, in: b.in, fixed: co.chunk, sizing: sizingOf(sp), priority: co.priority,
		retryFailed: co.retryFailed}
	f.planned = m.owned != nil && co.chunk == 0 // cut by its plan, read at the resume (first)
	return b, f
}

// backupsOn says whether a call's batch has backup tasks: for a function
// declared idempotent, or as the call says; never for a private batch, nor
// under a limit (a copy would spend the limit's budget twice; take.lua
// drops the copies of a function an operator limited).
func backupsOn(sp spec, co callOptions) bool {
	on := sp.idempotent
	if co.backups != nil {
		on = *co.backups
	}
	return on && co.worker == "" && sp.limit.IsZero()
}

// reductionOf returns the name and signature of the reducer a call's
// tasks name: the spec's own (a stage's), else red (MapReduce); none for a
// bare spec, or without a reducer.
func reductionOf[Out any](sp spec, red *redmap.Reducer[Out]) (name, sig string) {
	switch {
	case sp.bare:
		return "", ""
	case sp.red != nil:
		return sp.red.name, sp.red.sig
	case red != nil:
		return red.Name(), red.Signature()
	}
	return "", ""
}

// callTypes returns the structure of each handle a call names (its
// function's and its reducers', bare or not), by name.
func callTypes[Out any](sp spec, red *redmap.Reducer[Out]) map[string][]string {
	ts := map[string][]string{sp.name: sp.types}
	if red != nil {
		ts[red.Name()] = types(red)
	}
	if sp.red != nil {
		ts[sp.red.name] = sp.red.types
	}
	return ts
}

// taskEncoder returns how b's elements xs from index start are encoded:
// as a copy of task carrying them (and, for a solo batch's one task, its
// record solo). The batch keeps its input (or, for a sequence, the
// payload) to submit again if Redis loses its data.
func taskEncoder[In, Out any](b *Batch[Out], task codec.Task, solo string, maxInput int) encoder[In] {
	return func(xs []In, start int) ([]byte, error) {
		frame, err := codec.EncodeElements(xs, maxInput)
		if err != nil {
			return nil, inputError(task.Func, start, err)
		}
		t := task
		t.Count, t.Input, t.Start = len(xs), frame, start
		if b.soloChunk(start, start+len(xs)) {
			t.Record = solo
		}
		if t.Trace != nil {
			t.Sent = time.Now().UnixMicro()
		}
		payload, err := codec.EncodeTask(&t)
		if err != nil {
			return nil, fmt.Errorf("manager: encoding a task of %q: %w", task.Func, err)
		}
		return payload, nil
	}
}

// SubmitSeq submits fn over the elements of seq, a sequence of any length,
// and returns at once with the running batch. The feeder reads seq as the
// window has room (at most 4,096 tasks or 64 MiB in Redis, as for Submit) and
// while fewer than 262,144 results wait to be read, so an input far larger
// than memory streams through a manager of bounded heap. Read the results
// with the batch's Results (completion order) or Ordered (input order), each
// result once; breaking out of either, or ending ctx, cancels the batch and
// stops reading seq. Wait returns no outputs for a streamed batch, only its
// error: a *redmap.BatchError of the failed elements, or why it ended early.
// Len counts the elements read so far.
//
// seq is read on the caller's goroutine for the first window and on the
// feeder's after; it must not be read elsewhere meanwhile. Submit's errors
// apply to the first window.
func SubmitSeq[In, Out any](ctx context.Context, m *Manager, fn *redmap.Handle[In, Out], seq iter.Seq[In], opts ...CallOption) (*Batch[Out], error) {
	if err := fn.Validate(); err != nil {
		return nil, err
	}
	m, co, err := on(ctx, m, opts)
	if err != nil {
		return nil, err
	}
	return submit(ctx, m, spec{name: fn.Name(), sig: fn.Signature(), types: types(fn), limit: fn.Limit(), idempotent: idempotentOf(fn)}, elements[In]{seq: seq}, co, (*redmap.Reducer[Out])(nil))
}
