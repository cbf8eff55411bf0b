package manager

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/cache"
	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/backoff"
	"github.com/redmap/redmap/internal/handler"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/keys"
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
	seed     uint64
	seeded   bool
	priority int
}

// The range of Priority, and the priority of a batch without it.
const (
	MinPriority     = keys.MinPriority
	MaxPriority     = keys.MaxPriority
	DefaultPriority = keys.DefaultPriority
)

// Priority sets the batch's priority, from MinPriority (1) to MaxPriority
// (5); default DefaultPriority (3). A worker always takes the public tasks
// of a higher priority first, so a batch submitted while a long batch of
// lower priority runs waits only for the tasks workers already took (see
// README, "Priorities"). A worker takes its private queue (OnWorker) before
// any public task, whatever the priorities.
func Priority(p int) CallOption { return func(o *callOptions) { o.priority = p } }

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

// ChunkSize fixes how many elements travel in one task. Without it, the size
// adapts to the function's cost as workers measure it, aiming at about 2 ms of
// work per task (at most 8,192 elements, and at least 16 tasks per batch that
// has the elements); while the cost is unknown, tasks carry up to 8.
func ChunkSize(n int) CallOption { return func(o *callOptions) { o.chunk = n } }

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
	return submit(ctx, m, spec{name: fn.Name(), sig: fn.Signature(), types: types(fn)}, elements[In]{xs: xs}, opts, (*redmap.Reducer[Out])(nil))
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
	sp, err := holdConstant(ctx, m, fn, constant)
	if err != nil {
		return nil, err
	}
	b, err := submit(ctx, m, sp, elements[In]{xs: xs}, opts, (*redmap.Reducer[Out])(nil))
	if err != nil {
		m.release(sp.holder)
		return nil, err
	}
	return b, nil
}

// holdConstant stores constant for a batch of fn (not at all if it is
// already there) and returns the batch's spec, holding it; the caller
// releases sp.holder if it submits nothing.
func holdConstant[C any](ctx context.Context, m *Manager, fn redmap.Handler, constant C) (spec, error) {
	enc, err := codec.EncodeValue(&constant)
	if err != nil {
		return spec{}, fmt.Errorf("%w: constant of %q: %v", redmap.ErrEncode, fn.Name(), err)
	}
	if err := m.ready(ctx); err != nil {
		return spec{}, err
	}
	var ref cache.Ref
	var holder string
	err = m.riding(ctx, func() error {
		started := time.Now()
		ref, holder, err = m.hold(ctx, enc)
		if err != nil {
			return m.redisError(fmt.Sprintf("storing the constant of %q", fn.Name()), started, err)
		}
		return nil
	})
	if err != nil {
		return spec{}, err
	}
	return spec{name: fn.Name(), sig: fn.Signature(), types: types(fn), constant: &ref, holder: holder}, nil
}

// types returns the structure of h's types that its signature fingerprints.
func types(h redmap.Handler) []string {
	rt, _ := handler.Of(h)
	return rt.Types()
}

// spec says what a batch runs: the function and, if it takes one, the
// constant and the batch's hold on it.
type spec struct {
	name, sig string
	types     []string // the structure the signature fingerprints
	constant  *cache.Ref
	holder    string
}

// elements is a batch's input: a slice xs, or a sequence seq if it is not
// nil.
type elements[In any] struct {
	xs  []In
	seq iter.Seq[In]
}

// submit submits a batch of els; with a reducer red, its outputs are folded
// (MapReduce) rather than kept.
func submit[In, Out any](ctx context.Context, m *Manager, sp spec, els elements[In], opts []CallOption, red *redmap.Reducer[Out]) (*Batch[Out], error) {
	var co callOptions
	for _, o := range opts {
		o(&co)
	}
	switch {
	case co.chunk < 0:
		return nil, fmt.Errorf("manager: ChunkSize %d is negative", co.chunk)
	case co.attempts < 0:
		return nil, fmt.Errorf("manager: Attempts %d is negative", co.attempts)
	case co.timeout < 0:
		return nil, fmt.Errorf("manager: Timeout %v is negative", co.timeout)
	case co.priority != 0 && (co.priority < MinPriority || co.priority > MaxPriority):
		return nil, fmt.Errorf("manager: Priority %d is outside %d to %d", co.priority, MinPriority, MaxPriority)
	}
	if co.priority == 0 {
		co.priority = DefaultPriority
	}
	if co.attempts == 0 {
		co.attempts = DefaultAttempts
	}
	if !co.seeded {
		co.seed = rand.Uint64()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := m.ready(ctx); err != nil {
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

	stream := els.seq != nil
	b := newBatch[Out](m, sp.name, len(els.xs), red, stream)
	b.worker = co.worker
	b.priority = co.priority
	if !stream {
		// Room for the batch's chunks (and their completion order) at the
		// size known now (the feeder may size them otherwise as it learns
		// the cost): a batch of 100,000 one-element tasks otherwise spends
		// a tenth of its manager's CPU growing the slices.
		size := co.chunk
		if size == 0 {
			size = m.chunkSize(sp.name, len(els.xs))
		}
		room := min(len(els.xs)/size+1, 1<<20)
		b.chunks = make([]chunk, 0, room)
		if red == nil {
			b.order = make([]int, 0, room)
		}
	}
	task := codec.Task{Func: sp.name, Sig: sp.sig, Attempts: co.attempts, Timeout: co.timeout.Milliseconds(), Retry: co.retry, Seed: co.seed}
	if red != nil {
		task.Reduce, task.ReduceSig = red.Name(), red.Signature()
	}
	if sp.constant != nil {
		task.Const, task.ConstSize = sp.constant.Hash, sp.constant.Size
		b.onEnd = func() { m.release(sp.holder) }
	}
	// enc builds the payload of elements xs from index start; the batch
	// keeps its input (or, for a sequence, the payload) to submit again if
	// Redis loses its data.
	enc := func(xs []In, start int) ([]byte, error) {
		frame, err := codec.EncodeElements(xs, m.opts.MaxInputSize)
		if err != nil {
			return nil, inputError(sp.name, start, err)
		}
		t := task
		t.Count, t.Input, t.Start = len(xs), frame, start
		payload, err := codec.EncodeTask(&t)
		if err != nil {
			return nil, fmt.Errorf("manager: encoding a task of %q: %w", sp.name, err)
		}
		return payload, nil
	}
	if stream {
		b.in = newSeqInput(els.seq, enc)
	} else {
		b.in = &sliceInput[In]{xs: els.xs, enc: enc}
	}
	f := &feeder[Out]{m: m, b: b, in: b.in, fixed: co.chunk, priority: co.priority}
	if n, known := b.in.length(); known && n == 0 {
		close(b.done)
		b.release()
		return b, nil
	}
	m.list(b.id, b)

	// The first window is submitted here, so that what can go wrong at once
	// (an input too large, Redis unreachable or full) is Submit's error, with
	// nothing left queued. The context hook is set first, so that ending ctx
	// at any point withdraws what was queued.
	b.stop = context.AfterFunc(ctx, func() { b.abort(ctx.Err()) })
	w, err := f.window()
	if err == nil && w.bad != nil {
		err = w.bad
	}
	if err == nil {
		// Only now that the first window is good: a refused Submit leaves
		// nothing in Redis.
		err = m.riding(ctx, func() error { return m.publishTypes(ctx, sp.sig, sp.types) })
	}
	if err == nil && red != nil {
		err = m.riding(ctx, func() error { return m.publishTypes(ctx, red.Signature(), types(red)) })
	}
	if err == nil {
		err = m.riding(ctx, func() error { return m.openShards(ctx) })
	}
	if err == nil {
		err = f.submit(ctx, w)
	}
	if err != nil {
		m.forget(w.tids()) // what submit did not withdraw was never sent
		m.unlist(b.id)
		b.stop()
		f.in.stop()
		return nil, err
	}
	if f.allRead() {
		f.in.stop()
		b.exhaust(nil)
		return b, nil
	}
	m.feeders.Add(1)
	go func() {
		defer m.feeders.Done()
		defer f.in.stop()
		f.run(ctx)
	}()
	return b, nil
}

// Bounds of a batch's in-flight window: tasks and payload bytes submitted and
// not yet delivered. Past them, the rest of the input waits in the manager's
// memory (as the caller's slice), so huge inputs stream through Redis. The
// feeder tops the window up when it is half empty.
const (
	windowTasks = 4096
	windowBytes = 64 << 20
)

// maxUnread bounds a stream's elements in flight plus its results not yet
// read: past it, the feeder submits no more until results are read, so the
// manager's memory (and Redis's) stays bounded whatever the stream's length
// and however slow its reader.
const maxUnread = 1 << 18

// feeder submits a batch's tasks, chunk by chunk, within the window.
type feeder[Out any] struct {
	m        *Manager
	b        *Batch[Out]
	in       input
	pos      int // elements handled so far: submitted, or failed at encoding
	fixed    int // the caller's ChunkSize, or 0 to adapt
	priority int
}

// window is a set of tasks registered with the batch and ready to submit:
// chunks [first, first+len(tasks)) of the batch. bad, if set, is an element
// just after them that could not be encoded.
type window struct {
	first int
	tasks []rdb.Task
	bad   *redmap.TaskError
	// unsent holds the tasks by shard until their shard's submit
	// succeeds, so that a retry sends only what did not go (grouped at the
	// first send: the first window is made before the shards are open).
	unsent *map[*shard][]rdb.Task
}

func (w window) tids() []string {
	tids := make([]string, len(w.tasks))
	for i, t := range w.tasks {
		tids[i] = t.ID
	}
	return tids
}

// window encodes the next tasks that fit in the window and registers them. It
// stops at an element that cannot be encoded, returning it as bad.
func (f *feeder[Out]) window() (window, error) {
	b := f.b
	b.mu.Lock()
	inflight, bytes := b.inflight, b.inflightBytes
	// A stream of outputs also bounds its elements out and unread.
	elems, maxElems := b.inflightElems+b.unread, math.MaxInt
	if b.stream && b.red == nil {
		maxElems = maxUnread
	}
	b.mu.Unlock()
	var w window
	var chunks []chunk
	add := func(end int, payload []byte) {
		tid := id.TaskAt(f.m.id, f.m.nextSeq(f.b.worker != ""), f.priority, DefaultPriority)
		c := chunk{start: f.pos, count: end - f.pos, size: len(payload), tid: tid}
		if !f.in.reencodes() {
			c.payload = payload
		}
		chunks = append(chunks, c)
		w.tasks = append(w.tasks, rdb.Task{ID: tid, Payload: payload})
		inflight++
		bytes += len(payload)
		elems += end - f.pos
		f.pos = end
	}
	for inflight < windowTasks && bytes < windowBytes && elems < maxElems {
		n, known := f.in.length()
		if known && f.pos >= n {
			break
		}
		size := f.fixed
		if size == 0 {
			if !known {
				n = math.MaxInt / 2 // a sequence: size by cost alone
			}
			size = f.m.chunkSize(b.fn, n)
		}
		end := f.in.next(f.pos, size)
		if end == f.pos {
			break // the sequence ended
		}
		payload, err := f.in.encode(f.pos, end)
		if err != nil {
			if !errors.As(err, &w.bad) {
				return w, err
			}
			// Send the elements before the bad one; it fails alone.
			if bad := w.bad.Index; bad > f.pos {
				good, err := f.in.encode(f.pos, bad)
				if err != nil {
					return w, err
				}
				add(bad, good)
			}
			f.pos = w.bad.Index + 1
			break
		}
		add(end, payload)
	}
	w.first = b.addChunks(chunks...)
	f.in.submitted(f.pos)
	w.unsent = new(map[*shard][]rdb.Task)
	// Register before submitting: a fast worker's result may arrive before
	// the submit call returns.
	return w, f.m.register(b, w.tids(), w.first)
}

// submit queues a window's tasks. On failure it withdraws them, or, if Redis
// is unreachable, forgets them: nothing can be withdrawn from a Redis we
// cannot reach; what was queued runs to a discarded result, and its task set
// entries go with the manager's keys.
func (f *feeder[Out]) submit(ctx context.Context, w window) error {
	if len(w.tasks) == 0 {
		return nil
	}
	err := f.m.riding(ctx, func() error { return f.send(ctx, w) })
	if err == nil {
		return nil
	}
	if errors.Is(err, redmap.ErrUnavailable) {
		f.m.forget(w.tids())
	} else {
		f.m.withdraw(w.tids())
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// send makes one attempt to queue what of a window is not queued yet, one
// submit per shard (at once, if several), and says what went wrong.
func (f *feeder[Out]) send(ctx context.Context, w window) error {
	m := f.m
	if *w.unsent == nil {
		*w.unsent = m.tasksByShard(w.tasks)
	}
	var mu sync.Mutex
	var sent []*shard
	err := eachShard(maps.Clone(*w.unsent), func(s *shard, tasks []rdb.Task) error {
		s.sendMu.RLock()
		defer s.sendMu.RUnlock()
		if m.hooks.send != nil {
			m.hooks.send()
		}
		started := time.Now()
		count, intact, err := s.rdb.Submit(ctx, m.id, f.b.worker, tasks, m.opts.KeyTTL, rdb.Expect{Count: s.acked.Load(), Epoch: *s.epoch.Load()})
		if err != nil {
			return m.shardError(s, fmt.Sprintf("submitting %q", f.b.fn), started, err)
		}
		s.outage.up()
		s.submitted(count, intact)
		mu.Lock()
		sent = append(sent, s)
		mu.Unlock()
		return nil
	})
	for _, s := range sent {
		delete(*w.unsent, s)
	}
	return err
}

// run submits the rest of the batch, a window at a time, as results make
// room, until all is submitted or the batch ends. A window Redis cannot take
// is tried again while the manager's outage of Redis lasts less than
// RedisTimeout (a full Redis: for RedisTimeout from the first refusal, as
// results draining may free memory). If it gives up, or Redis refuses the
// command for good, the window's elements and every element not yet
// submitted fail with the error at once, so the batch ends, every element
// accounted for.
func (f *feeder[Out]) run(ctx context.Context) {
	b := f.b
	for !f.allRead() {
		b.mu.Lock()
		room := b.inflight <= windowTasks/2 && b.inflightBytes <= windowBytes/2 &&
			(!b.stream || b.red != nil || b.inflightElems+b.unread <= maxUnread/2)
		progress, finished, stopped := b.watch(), b.finished(), b.stopped
		b.mu.Unlock()
		if finished {
			return
		}
		if stopped != nil {
			f.giveUp(stopped)
			return
		}
		if !room {
			<-progress
			continue
		}
		w, err := f.window()
		if err == nil {
			err = f.sendRetrying(ctx, w)
		}
		if w.bad != nil {
			b.failUnsubmitted(w.bad.Index, 1, 0, w.bad.Err)
		}
		if err != nil {
			for ci := w.first; ci < w.first+len(w.tasks); ci++ {
				b.fail(ci, 0, err)
			}
			f.giveUp(err)
			return
		}
	}
	b.exhaust(nil)
}

// allRead reports whether every element of the input has its chunk.
func (f *feeder[Out]) allRead() bool {
	n, known := f.in.length()
	return known && f.pos >= n
}

// giveUp ends the batch's input with err: the elements of a slice not yet
// submitted fail with it; a sequence is read no further, and the batch's
// error says so.
func (f *feeder[Out]) giveUp(err error) {
	if n, known := f.in.length(); known {
		if f.pos < n {
			f.b.failUnsubmitted(f.pos, n-f.pos, 0, err)
			f.pos = n
		}
		f.b.exhaust(nil)
		return
	}
	f.b.exhaust(err)
}

func (f *feeder[Out]) sendRetrying(ctx context.Context, w window) error {
	if len(w.tasks) == 0 {
		return nil
	}
	full := time.Time{} // when Redis first refused the window at maxmemory
	var bo backoff.Backoff
	for {
		err := f.send(ctx, w)
		retry := false
		switch {
		case err == nil || f.b.isFinished() || ctx.Err() != nil:
		case errors.Is(err, redmap.ErrUnavailable):
			retry = f.m.outageLength() < f.m.opts.RedisTimeout
		case errors.Is(err, redmap.ErrRedisFull):
			if full.IsZero() {
				full = time.Now()
			}
			retry = time.Since(full) < f.m.opts.RedisTimeout
		}
		if !retry {
			if err != nil {
				f.m.forget(w.tids())
			}
			return err
		}
		if !bo.Wait(ctx) {
			f.m.forget(w.tids())
			return ctx.Err()
		}
	}
}

// riding runs op, a step of Submit, again with backoff while it fails with
// ErrUnavailable, until the outage has lasted RedisTimeout (by the
// manager's outage clock, or since op first failed): a Cluster failing over
// or a Redis restarting delays a Submit as it delays a running batch, and an
// outage already older than RedisTimeout fails it at once.
func (m *Manager) riding(ctx context.Context, op func() error) error {
	var bo backoff.Backoff
	var first time.Time
	for {
		err := op()
		if err == nil || !errors.Is(err, redmap.ErrUnavailable) || ctx.Err() != nil {
			return err
		}
		if first.IsZero() {
			first = time.Now()
		}
		if m.outageLength() >= m.opts.RedisTimeout || time.Since(first) >= m.opts.RedisTimeout {
			return err
		}
		if !bo.Wait(ctx) {
			return err
		}
	}
}

// inputError says which element of a batch could not be submitted.
func inputError(fn string, start int, err error) error {
	idx := start
	var ee *codec.ElementError
	if errors.As(err, &ee) {
		idx += ee.Index
		err = ee.Err
	}
	cause := fmt.Errorf("%w (manager.Options.MaxInputSize raises the limit)", err)
	if !errors.Is(err, redmap.ErrTooLarge) {
		cause = fmt.Errorf("%w: %v", redmap.ErrEncode, err)
	}
	return &redmap.TaskError{Index: idx, Func: fn, Err: cause}
}
