package manager

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/backoff"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/part"
)

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

// feeder submits a batch's tasks, chunk by chunk, within the window: the
// first window on Submit's goroutine (first), the rest on a goroutine of
// its own as results make room (run). One per batch; it stops when the
// batch's input is all submitted or the batch ends.
type feeder[Out any] struct {
	feederParams
	b     *Batch[Out]
	in    input
	pos   int // elements handled so far: submitted, or failed at encoding
	fixed int // the caller's ChunkSize, or 0 to adapt
	// blindOut is whether tasks cut blind may still be out, and settleFrom
	// when the first of them reported (see settling).
	blindOut   bool
	settleFrom time.Time
	// planned: a durable batch without ChunkSize, cut by plan, its cut
	// plan (cutplan.go), which first reads from what the resume found.
	planned  bool
	plan     *cutPlan
	sizing   sizing // how chunks adapt, if they do
	priority int
	// retryFailed: a durable batch taken over runs again its tasks found
	// failed (RetryFailed).
	retryFailed bool
	sp          spec // what the batch runs
	// limited: the function has a limit in force, so its tasks go to
	// shard 0, where it is enforced; burst, if not 0, caps its chunks.
	limited bool
	burst   int
}

// feederParams is what every feeder of a manager is built from.
type feederParams struct {
	label   string // the manager's ProfileLabel value
	mid     string
	opts    Options
	router  *router
	pending *pendingTasks
	batches *registry
	costs   *costs
	faults  *faults
	running *part.Set // the feeders still submitting, as parts: Close stops them
	// publishTypes stores the structure of a handle's types (see
	// Manager.publishTypes).
	publishTypes func(ctx context.Context, sig string, types []string) error
	// publish publishes the progress of the manager's batches at once,
	// as its keeper does every Poll: an owner's, before its batch's first
	// window, so that operators see the batch from then on (a holder
	// killed before its first Poll leaves its progress, not nothing).
	publish func(ctx context.Context)
	// limitOf returns the limit in force of a spec's function
	// (Manager.limitOf).
	limitOf func(ctx context.Context, sp spec) (wire.Limit, error)

	// A durable batch's owner's (durable.go); nil for a manager: owned is
	// its batch, resume reads what Redis has of it before the first
	// window, and redeliver hands the results it found to the batch.
	owned     *owned
	resume    func(ctx context.Context) error
	redeliver func(entries []string)
}

// window is a set of tasks registered with the batch and ready to submit:
// chunks [first, first+len(tids)) of the batch, of which tasks are to
// send (for a durable batch taken over, those neither delivered nor
// outstanding; else all). bad, if set, is an element just after them that
// could not be encoded.
type window struct {
	first int
	all   []string // the tasks' ids, in chunk order
	tasks []wire.Task
	bad   *redmap.TaskError
	// sums are the sums of a durable batch's tasks submitted for the first
	// time (durableSum), recorded before they are sent.
	sums map[string]string
	// unsent holds the tasks by shard until their shard's submit
	// succeeds, so that a retry sends only what did not go (grouped at the
	// first send: the first window is made before the shards are open).
	unsent map[*shard][]wire.Task
}

func (w window) tids() []string { return w.all }

// cutting is a window as it is cut: its chunks, added to the batch once
// all are cut, and what the batch has out with them (tasks, payload bytes,
// elements out and unread), against the window's bounds.
type cutting struct {
	w                             window
	chunks                        []chunk
	tasks, bytes, elems, maxElems int
}

// full reports whether the window reached one of its bounds.
func (c *cutting) full() bool {
	return c.tasks >= windowTasks || c.bytes >= windowBytes || c.elems >= c.maxElems
}

// window encodes the next tasks that fit in the window and registers them. It
// stops at an element that cannot be encoded, returning it as bad.
func (f *feeder[Out]) window() (window, error) {
	c := f.startCutting()
	from := f.pos
	// Cut blind, a window is a few tasks that measure the cost; the rest
	// waits for it (run).
	blind := f.blind()
	if blind {
		f.blindOut, f.settleFrom = true, time.Time{}
	}
	for cut := 0; !c.full() && (!blind || cut < measureTasks); cut++ {
		end := f.chunkEnd()
		if end == f.pos {
			break // the input ended
		}
		payload, err := f.in.encode(f.pos, end)
		if err != nil {
			if !errors.As(err, &c.w.bad) {
				return c.w, err
			}
			if err := f.cutBeforeBad(&c, from); err != nil {
				return c.w, err
			}
			break
		}
		if f.fixed == 0 {
			f.costs.observeSize(f.sizing.key, len(payload), end-f.pos)
		}
		if err := f.add(&c, end, payload); err != nil {
			// Nothing of the window is registered: the feeder fails its
			// elements and the rest with err (giveUp).
			f.pos = from
			return window{}, err
		}
	}
	f.recordPlan(&c.w)
	w := c.w
	w.first = f.b.addChunks(c.chunks...)
	f.in.submitted(f.pos)
	// Register before submitting: a fast worker's result may arrive before
	// the submit call returns.
	if err := f.pending.add(f.b, w.tids(), w.first); err != nil {
		return w, err
	}
	if f.owned != nil {
		f.redeliverFound(w.all)
	}
	return w, nil
}

// startCutting starts a window from what the batch has out (a stream of
// outputs also bounds its elements out and unread), with room for its
// tasks at the chunk size known now (the size may change within it; append
// grows then): grown one by one, these slices were a third of what a batch
// of 100,000 one-element tasks allocated.
func (f *feeder[Out]) startCutting() cutting {
	var c cutting
	c.tasks, c.bytes, c.elems, c.maxElems = f.b.inFlight()
	if c.maxElems < 0 {
		c.maxElems = math.MaxInt
	}
	n, known := f.in.length()
	if !known || n <= f.pos {
		return c
	}
	size := f.fixed
	if size == 0 {
		size = f.costs.chunkSize(f.sizing, n)
	}
	if est := min(windowTasks-c.tasks, (n-f.pos)/max(size, 1)+1); est > 0 {
		c.chunks = make([]chunk, 0, est)
		c.w.all = make([]string, 0, est)
		if f.owned == nil {
			c.w.tasks = make([]wire.Task, 0, est)
		}
	}
	return c
}

// chunkEnd returns where the next chunk ends: at the caller's ChunkSize,
// the plan's or the cost's size, capped by the function's burst; f.pos if
// the input has no more.
func (f *feeder[Out]) chunkEnd() int {
	n, known := f.in.length()
	if known && f.pos >= n {
		return f.pos
	}
	if !known {
		n = math.MaxInt / 2 // a sequence: size by cost alone
	}
	size := f.fixed
	switch {
	case f.plan != nil:
		size = f.plan.next(f.costs, f.sizing, n)
	case size == 0:
		size = f.costs.chunkSize(f.sizing, n)
	}
	if f.burst > 0 {
		size = min(size, f.burst) // a task takes its elements' tokens at once
	}
	return f.in.next(f.pos, size)
}

// cutBeforeBad cuts the elements before c.w.bad, an element that could
// not be encoded, as a chunk of their own, and moves past it: it fails
// alone. from is where the window started.
func (f *feeder[Out]) cutBeforeBad(c *cutting, from int) error {
	if bad := c.w.bad.Index; bad > f.pos {
		good, err := f.in.encode(f.pos, bad)
		if err != nil {
			return err
		}
		if err := f.add(c, bad, good); err != nil {
			f.pos = from
			c.w = window{}
			return err
		}
	}
	f.pos = c.w.bad.Index + 1
	return nil
}

// add cuts elements [f.pos, end), encoded as payload, as the window's next
// task.
func (f *feeder[Out]) add(c *cutting, end int, payload []byte) error {
	seq := f.router.nextSeq
	if f.b.worker != "" || f.limited || f.b.soloChunk(f.pos, end) {
		// A private batch's tasks, a limited function's (its limit is
		// enforced where it lives), and a batch's only task (its finish
		// writes the batch's record: Batch.solo) go to shard 0.
		seq = f.router.nextPrivateSeq
	}
	tid := id.TaskIn(f.mid, seq(), f.b.seq, end-f.pos, f.priority, DefaultPriority)
	ch := chunk{start: f.pos, count: end - f.pos, size: len(payload), tid: tid}
	send := true
	if f.owned != nil {
		var err error
		if send, err = f.taken(&c.w, ch, payload); err != nil {
			return err
		}
	}
	if !f.in.reencodes() {
		ch.payload = payload
	}
	c.chunks = append(c.chunks, ch)
	c.w.all = append(c.w.all, tid)
	if send {
		c.w.tasks = append(c.w.tasks, wire.Task{ID: tid, Payload: payload})
	}
	c.tasks++
	c.bytes += len(payload)
	c.elems += end - f.pos
	f.pos = end
	return nil
}

// recordPlan records a changed cut plan with the window's sums: with the
// tasks cut by it.
func (f *feeder[Out]) recordPlan(w *window) {
	if f.plan == nil || !f.plan.changed {
		return
	}
	if w.sums == nil {
		w.sums = make(map[string]string)
	}
	w.sums[cutField] = f.plan.String()
	f.plan.changed = false
}

// taken checks chunk c of a durable batch, of task payload payload,
// against what its resume found, and says whether to send it: not if its
// result was delivered or it is outstanding. A task submitted before with
// another input fails the window with ErrDurableMismatch; one submitted
// for the first time has its sum recorded with the window.
func (f *feeder[Out]) taken(w *window, c chunk, payload []byte) (send bool, err error) {
	sum, constant, err := durableSum(payload, f.opts.MaxFrame)
	if err != nil {
		return false, fmt.Errorf("manager: durable batch %q: %w", f.owned.name, err)
	}
	found := f.owned.found
	// By the task's place, not its size: a takeover cut into other
	// chunks has other sums under the same names, and is refused.
	key := id.Unsized(c.tid)
	was, ok := found.sums[key]
	switch {
	case ok && was != sum:
		return false, mismatch(f.owned.name, c.tid, c.start, c.count)
	case !ok:
		if w.sums == nil {
			w.sums = make(map[string]string)
		}
		w.sums[key] = sum
		w.sums[shardsField] = strconv.Itoa(len(f.router.list()))
		if _, had := found.sums[startedField]; !had {
			w.sums[startedField] = strconv.FormatInt(f.b.started.UnixMilli(), 10)
		}
		if constant != "" {
			w.sums[constField] = constant
		}
	}
	return !found.known(c.tid), nil
}

// redeliverFound hands the batch the results its resume found of tasks
// tids, now registered, and what the collectors put aside of them meanwhile.
func (f *feeder[Out]) redeliverFound(tids []string) {
	var entries []string
	for _, tid := range tids {
		entries = append(entries, f.owned.found.registered(tid)...)
	}
	if len(entries) > 0 {
		f.redeliver(entries)
	}
}

// submit queues a window's tasks. On failure it withdraws them, or, if Redis
// is unreachable, forgets them: nothing can be withdrawn from a Redis we
// cannot reach; what was queued runs to a discarded result, and its task set
// entries go with the manager's keys.
func (f *feeder[Out]) submit(ctx context.Context, w *window) error {
	if len(w.tasks) == 0 {
		return nil
	}
	err := f.faults.riding(ctx, func() error { return f.send(ctx, w) })
	if err == nil {
		return nil
	}
	if errors.Is(err, redmap.ErrUnavailable) || f.owned != nil {
		// A durable batch's tasks stay in Redis for the next call.
		f.pending.forget(w.tids())
	} else {
		f.b.env.tasks.withdraw(w.tids())
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// send makes one attempt to queue what of a window is not queued yet, one
// submit per shard (at once, if several), and says what went wrong.
func (f *feeder[Out]) send(ctx context.Context, w *window) error {
	if len(w.sums) > 0 {
		err := f.faults.callQueue(fmt.Sprintf("recording the inputs of durable batch %q", f.owned.name), func() error {
			return f.router.queue().AddSums(ctx, &broker.AddSumsParams{Owner: f.mid, Sums: w.sums, TTL: f.opts.KeyTTL})
		})
		if err != nil {
			return err
		}
		maps.Copy(f.owned.found.sums, w.sums) // what Redis has now (see releaseUnused)
		w.sums = nil
	}
	if w.unsent == nil {
		w.unsent = f.router.tasksByShard(w.tasks)
	}
	var mu sync.Mutex
	var sent []*shard
	rest := make(map[*shard][]wire.Task) // of a shard's submit that made progress, what it did not queue
	err := eachShard(maps.Clone(w.unsent), func(s *shard, tasks []wire.Task) error {
		s.sendMu.RLock()
		defer s.sendMu.RUnlock()
		var count int64
		var intact bool
		err := f.faults.call(s, fmt.Sprintf("submitting %q", f.b.fn), func() (err error) {
			var got *broker.SubmitResult
			if got, err = s.rdb.Submit(ctx, &broker.SubmitParams{Manager: f.mid, Worker: f.b.worker, Lane: f.b.lane, Tasks: tasks, TTL: f.opts.KeyTTL, Expect: wire.Expect{Count: s.acked.Load(), Epoch: *s.epoch.Load()}}); err == nil {
				count, intact = got.Count, got.Intact
			}
			return err
		})
		if part := (*broker.PartlySubmitted)(nil); errors.As(err, &part) {
			// A call that made progress: Redis answers, and what it
			// queued is not sent again.
			s.outage.up()
			s.submitted(part.Count, part.Intact)
			mu.Lock()
			rest[s] = tasks[part.Queued:]
			mu.Unlock()
		}
		if err != nil {
			return err
		}
		s.outage.up()
		s.submitted(count, intact)
		mu.Lock()
		sent = append(sent, s)
		mu.Unlock()
		return nil
	})
	for _, s := range sent {
		delete(w.unsent, s)
	}
	maps.Copy(w.unsent, rest)
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
		room, progress, finished, stopped := b.room()
		if finished {
			return
		}
		if stopped != nil {
			f.giveUp(stopped)
			return
		}
		if !room || f.measuring() {
			<-progress
			continue
		}
		if d := f.settling(); d > 0 {
			select {
			case <-progress:
			case <-time.After(d):
			}
			continue
		}
		if lim, err := f.limitOf(ctx, f.sp); err == nil {
			f.limit(lim) // else the last known stands: the submit meets the outage
		}
		w, err := f.window()
		if err == nil {
			err = f.sendRetrying(ctx, &w)
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

// blind reports whether the feeder sizes chunks by a cost not yet
// measured.
func (f *feeder[Out]) blind() bool {
	if f.plan != nil && f.plan.decided() {
		return false
	}
	return f.fixed == 0 && f.sizing.key != "" && !f.costs.known(f.sizing)
}

// measuring reports whether the feeder waits for the cost its tasks out
// will measure before it cuts more: tasks cut blind are few and small, so
// that the rest of the batch is cut to the cost. With none out (all lost,
// say, or failed before they ran) it cuts a few more blind.
func (f *feeder[Out]) measuring() bool {
	if !f.blind() {
		return false
	}
	inflight, _, _, _ := f.b.inFlight()
	return inflight > 0
}

// settleFor bounds how long the feeder waits, after the first of a
// batch's blind tasks reported its cost, for the others to report theirs
// (settling).
const settleFor = 50 * time.Millisecond

// settling returns how much longer the feeder waits before it cuts the
// rest of the batch to the cost measured: while tasks it cut blind are
// still out, up to settleFor after the first reported. The first task a
// worker runs is often its slowest (a cold start, a starved core: a first
// task of 8 squares once measured 300 µs an element under -race, and the
// rest of 30,000 went in 2,355 tasks); with the others' reports the cost
// is the least of them (costs.observe).
func (f *feeder[Out]) settling() time.Duration {
	if !f.blindOut {
		return 0
	}
	inflight, _, _, _ := f.b.inFlight()
	if f.settleFrom.IsZero() {
		f.settleFrom = time.Now()
	}
	left := settleFor - time.Since(f.settleFrom)
	if inflight == 0 || left <= 0 {
		f.blindOut = false
		return 0
	}
	return left
}

// limit applies lim, the limit in force of the batch's function, to the
// windows to come.
func (f *feeder[Out]) limit(lim wire.Limit) {
	f.limited = lim.Rate > 0 || lim.Concurrency > 0
	f.burst = 0
	if lim.Rate > 0 {
		f.burst = lim.Burst
	}
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

func (f *feeder[Out]) sendRetrying(ctx context.Context, w *window) error {
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
			retry = f.router.outageLength() < f.opts.RedisTimeout
		case errors.Is(err, redmap.ErrRedisFull):
			if full.IsZero() {
				full = time.Now()
			}
			retry = time.Since(full) < f.opts.RedisTimeout
		}
		if !retry {
			if err != nil {
				f.pending.forget(w.tids())
			}
			return err
		}
		if !bo.Wait(ctx) {
			f.pending.forget(w.tids())
			return ctx.Err()
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

// first submits the batch's first window, so that what can go wrong at
// once (an input too large, Redis unreachable or full) is Submit's error,
// with nothing left queued, then starts feeding the rest. The context hook
// is set first, so that ending ctx at any point withdraws what was queued.
func (f *feeder[Out]) first(ctx context.Context, sp spec, red *redmap.Reducer[Out]) error {
	b := f.b
	b.ctx = ctx
	b.stop = context.AfterFunc(ctx, func() { b.abort(ctx.Err()) })
	err := f.resumeDurable(ctx)
	if err == nil && f.owned != nil && f.owned.found.cancelled != "" {
		// An operator cancelled the batch while no manager held it: every
		// element fails so, and the batch ends, deleting its keys.
		f.cancelled(cancelledFor(f.owned.found.cancelled))
		return nil
	}
	if err == nil && f.owned != nil {
		f.publish(ctx)
	}
	var w window
	if err == nil {
		w, err = f.firstWindow(ctx, sp, red)
	}
	if err != nil {
		f.pending.forget(w.tids()) // what submit did not withdraw was never sent
		f.batches.unlist(b.id)
		b.stop()
		f.in.stop()
		return err
	}
	if f.allRead() {
		f.in.stop()
		b.exhaust(nil)
		return nil
	}
	if !f.running.Go(pprof.WithLabels(ctx, pprof.Labels(ProfileLabel, f.label)), func(ctx context.Context) {
		defer f.in.stop()
		f.run(ctx)
	}) { // Close came first
		f.in.stop()
		b.abort(redmap.ErrClosed)
	}
	return nil
}

// resumeDurable reads, for a durable batch, what Redis has of it before
// its first window (the shards open, then the resume), and makes its cut
// plan from what the resume found, if it is cut by plan.
func (f *feeder[Out]) resumeDurable(ctx context.Context) error {
	if f.owned != nil {
		err := f.faults.riding(ctx, func() error { return f.openShards(ctx) })
		if err == nil {
			err = f.faults.riding(ctx, func() error { return f.resume(ctx) })
		}
		if err != nil {
			return err
		}
		f.b.resumedFrom(f.owned.found.sums[startedField])
		if f.retryFailed {
			if n := f.owned.found.dropFailed(f.opts.MaxFrame); n > 0 {
				f.b.env.log.Info("running again the tasks of a durable batch that failed while no call held it (RetryFailed)",
					"batch", f.owned.name, "tasks", n)
			}
		}
	}
	if !f.planned {
		return nil
	}
	n, known := f.in.length()
	var err error
	if f.plan, err = newCutPlan(f.owned.found.sums[cutField], n, !known); err != nil {
		return fmt.Errorf("%w: durable batch %q: %v", redmap.ErrDurableMismatch, f.owned.name, strings.TrimPrefix(err.Error(), "manager: "))
	}
	return nil
}

// firstWindow cuts the first window and submits it: the structure of the
// call's types is published only once the window is good, so that a
// refused Submit leaves nothing in Redis. It returns the window cut, if
// any, with what went wrong.
func (f *feeder[Out]) firstWindow(ctx context.Context, sp spec, red *redmap.Reducer[Out]) (window, error) {
	// Ridden out as the other calls of a first window are: on a Cluster
	// whose shard-0 master was just killed this was the one call that
	// failed the submit at once (make chaos-cluster, 5 minutes: 46,230
	// elements failed with ErrUnavailable).
	var lim wire.Limit
	err := f.faults.riding(ctx, func() (err error) {
		lim, err = f.limitOf(ctx, sp)
		return err
	})
	if err != nil {
		return window{}, err
	}
	f.sp = sp
	f.limit(lim)
	w, err := f.window()
	if err == nil && w.bad != nil {
		err = w.bad
	}
	if err == nil {
		err = f.publishTypesOf(ctx, sp, red)
	}
	if err == nil {
		err = f.faults.riding(ctx, func() error { return f.openShards(ctx) })
	}
	if err == nil {
		err = f.submit(ctx, &w)
	}
	return w, err
}

// publishTypesOf publishes the structure of the types of the call's
// handle and of its reducer, if it has one.
func (f *feeder[Out]) publishTypesOf(ctx context.Context, sp spec, red *redmap.Reducer[Out]) error {
	publish := func(sig string, types []string) error {
		return f.faults.riding(ctx, func() error { return f.publishTypes(ctx, sig, types) })
	}
	err := publish(sp.sig, sp.types)
	switch {
	case err == nil && sp.red != nil:
		err = publish(sp.red.sig, sp.red.types)
	case err == nil && red != nil:
		err = publish(red.Signature(), types(red))
	}
	return err
}

// cancelled ends a durable batch an operator cancelled while no manager
// held it: a slice's elements all fail with cause; a sequence, unread,
// ends with it. The cancel recorded it with what ran: this call writes no
// record.
func (f *feeder[Out]) cancelled(cause error) {
	f.in.stop()
	f.b.mu.Lock()
	f.b.cancelRecorded = true
	f.b.mu.Unlock()
	if n, known := f.in.length(); known {
		if n > 0 {
			f.b.failUnsubmitted(0, n, 0, cause)
		}
		f.b.exhaust(nil)
		return
	}
	f.b.cancel(cause)
}

// openShards opens the queue's other shards before the manager's first
// submit (see router.openAll).
func (f *feeder[Out]) openShards(ctx context.Context) error {
	var other error // not Redis's: a shard's name, say
	err := f.faults.callQueue("publishing the queue's shard names", func() error {
		err := f.router.openAll(ctx)
		var rc redisCall
		if errors.As(err, &rc) {
			return rc.err
		}
		other = err
		return nil
	})
	return cmp.Or(err, other)
}

// cancelledFor is the cause of the elements of a durable batch an operator
// cancelled for reason while no manager held it: ErrCancelled, with the
// reason if it says more ("redmap cancel" gives none: its reason is
// ErrCancelled's own words).
func cancelledFor(reason string) error {
	if strings.Contains(redmap.ErrCancelled.Error(), reason) {
		return redmap.ErrCancelled
	}
	return fmt.Errorf("%w: %s", redmap.ErrCancelled, reason)
}
