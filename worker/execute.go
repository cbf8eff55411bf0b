package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/cache"
	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/backoff"
	"github.com/redmap/redmap/internal/engine"
	"github.com/redmap/redmap/internal/rdb"
	"github.com/redmap/redmap/internal/tracing"
	"github.com/redmap/redmap/internal/wire"
)

// execute runs one task and returns its encoded result: it resolves the task
// (decode, function, constant), runs the function over its elements, and
// encodes what came out. It never fails: a task that cannot be resolved or
// run yields a result saying why, so its manager learns of it and the worker
// carries on.
//
// A panic anywhere on that path outside the function (whose own panics
// fail their element) fails the task whole, with the stage it happened in
// and the stack, and the worker goes on: bytes in Redis that some check
// missed must cost one task, not the process, and a poison task must not
// kill a worker per attempt.
func (w *Worker) execute(ctx context.Context, t wire.Taken) (done wire.Done) {
	stage := codec.KindDecode
	span := tracing.NoSpan
	var c resolved
	defer func() {
		if p := recover(); p != nil {
			stack := string(debug.Stack())
			w.log.ErrorContext(ctx, "a task's path panicked outside its function; the task fails", "task", t.ID, "while", stage.String(), "panic", p, "stack", stack)
			w.counters.failed.Add(1)
			w.perFunc.ran(w.metricName(c.task.Func), c.task.Count, []codec.Failure{{Index: -1}})
			res := &codec.Result{Task: t.ID, Attempt: t.Attempt, Fails: []codec.Failure{{Index: -1, Kind: stage,
				Msg: fmt.Sprintf("worker %s panicked in its %s step: %v", w.opts.ID, stage, p), Stack: truncate(stack, maxStack)}},
				Worker: w.opts.ID}
			b, _ := codec.EncodeResult(res) // small and well-formed: cannot fail
			span.End()
			done = wire.Done{ID: t.ID, Result: b, Shard: t.Shard}
		}
	}()
	res := &codec.Result{Task: t.ID, Attempt: t.Attempt}
	start := time.Now()
	if engine.Logger(ctx) != w.log { // the executors' context carries it already
		ctx = engine.WithLogger(ctx, w.log) // for redmap.Logger
	}
	task, fail := w.decode(t)
	if fail == nil {
		c.task = *task
		if !task.Call.IsZero() { // what the call says of its batch, on each line the function logs
			ctx = engine.WithLogger(ctx, engine.Logger(ctx).With(task.Call.LogArgs()...))
		}
		if len(task.Trace) > 0 {
			ctx, span = w.startSpan(ctx, t, task)
		}
		fail = w.resolve(ctx, t, &c)
	}
	if fail != nil {
		res.Fails = []codec.Failure{*fail}
	} else {
		if span.IsRecording() {
			c.policy.OnRetry = retryEvent(span, c.policy.OnRetry)
			c.policy.OnWait = waitEvent(span, c.policy.OnWait)
		}
		stage = codec.KindPanic
		if len(c.task.Shuffle) > 0 {
			res.Values, res.Fails = w.shuffle(ctx, &c, t)
		} else {
			res.Values, res.Fails = c.h.Run(ctx, c.constant, c.task.Count, c.task.Input, c.policy, c.reducer)
		}
	}
	stage = codec.KindEncode
	elapsed := time.Since(start)
	res.Nanos = elapsed.Nanoseconds()
	fn := w.metricName(c.task.Func)
	w.perFunc.duration.WithLabelValues(fn).Observe(elapsed.Seconds())
	switch {
	case ctx.Err() != nil:
		// Its batch was cancelled (or its manager is gone): the function
		// failing with "context canceled" is not its failure, and the
		// result will be discarded.
	case len(res.Fails) > 0:
		w.counters.failed.Add(1)
		w.failures.Note(c.task.Func, t.ID, res.Fails)
		w.perFunc.ran(fn, c.task.Count, res.Fails)
	default:
		w.counters.succeeded.Add(1)
		w.perFunc.ran(fn, c.task.Count, nil)
	}
	solo := w.solo(ctx, t, task)
	res.Recorded = solo != nil
	if len(res.Fails) > 0 {
		res.Worker = w.opts.ID // for operators: who failed its elements
	}
	b, err := codec.EncodeResult(res)
	if err == nil && len(b) > w.opts.MaxFrame {
		err = fmt.Errorf("%w (worker.Options.MaxFrame raises the limit)", &codec.SizeError{What: "result", Size: len(b), Limit: w.opts.MaxFrame})
	}
	if err != nil {
		kind := codec.KindEncode
		if errors.Is(err, codec.ErrTooLarge) {
			kind = codec.KindTooLarge
		}
		res = &codec.Result{Task: t.ID, Attempt: t.Attempt, Fails: []codec.Failure{{Index: -1, Kind: kind, Msg: err.Error()}},
			Recorded: solo != nil, Worker: w.opts.ID}
		b, _ = codec.EncodeResult(res) // small and well-formed: cannot fail
	}
	endSpan(span, c.task.Count, res.Fails)
	done = wire.Done{ID: t.ID, Result: b, Shard: t.Shard}
	if solo != nil {
		done.Record = wire.EncodeRecord(wire.Complete(solo.Record, c.task.Count, res.Fails, time.Now().UnixMilli()))
		done.Keep, done.AgeMs = solo.Keep, solo.AgeMs
	}
	return done
}

// solo returns the history record task (decoded from t, nil if it did not
// decode) carries for the finish to complete and write, if it is its
// batch's only task (codec.Task.Record), and nil otherwise: also when the
// record does not decode, when the task was taken from a shard other than
// the queue's first, where the history is not, or when its batch was
// cancelled (its result will be discarded). The manager then writes the
// record itself.
func (w *Worker) solo(ctx context.Context, t wire.Taken, task *codec.Task) *wire.Solo {
	if task == nil || task.Record == "" || t.Shard != 0 || ctx.Err() != nil {
		return nil
	}
	s, err := wire.DecodeSolo(task.Record)
	if err != nil {
		w.log.WarnContext(ctx, "a task's history record does not decode; its manager writes it", "task", t.ID, "err", err)
		return nil
	}
	return &s
}

// resolved is a task resolved, ready to run: its function, reducer (nil for a
// plain map), constant and policy.
type resolved struct {
	task     codec.Task
	h        *engine.Runtime
	reducer  *engine.Runtime
	constant any
	policy   engine.Policy
}

// decode decodes task t's envelope; one that does not decode fails whole,
// with the reason.
func (w *Worker) decode(t wire.Taken) (*codec.Task, *codec.Failure) {
	task, err := codec.DecodeTask(t.Payload, w.opts.MaxFrame)
	if errors.Is(err, codec.ErrTooLarge) {
		return nil, wholeFailure(codec.KindTooLarge, "task: %v", err)
	}
	if err != nil {
		return nil, wholeFailure(codec.KindDecode, "task: %v", err)
	}
	return task, nil
}

// maxRetryAfter caps one wait an element makes for a redmap.RetryAfter.
const maxRetryAfter = 10 * time.Minute

// throttle tells fn's limit that its service asked for d of quiet (see
// redmap.RetryAfter): if it has a rate, no worker starts an element of it
// for d. One script call on shard 0; a failure is logged.
func (w *Worker) throttle(ctx context.Context, fn string, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := w.source.first.Throttle(ctx, fn, d); err != nil {
		w.failed("pause the rate of "+fn, err)
	}
}

// maxStack caps the stack a failure carries.
const maxStack = 16 << 10

// truncate cuts s to at most n bytes, saying so.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "\n… (cut)"
}

// wholeFailure is the failure of a whole task.
func wholeFailure(kind codec.Kind, format string, args ...any) *codec.Failure {
	return &codec.Failure{Index: -1, Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

// lostBudget is how many lost runs fail a task of attempt budget n (0: no
// limit) with ErrLost: n, but never before the task ran once alone, as a
// suspect (wire.SuspectAfter losses), unless n is 1. A poison pill's
// neighbour may lose two attempts beside it before the pill is a suspect;
// with a budget of 2 it would then fail without ever running alone, so a
// budget of 2 allows a third run, alone: a pill then costs three worker
// deaths, and its neighbours nothing.
func lostBudget(n int) int {
	if n >= 2 {
		return max(n, wire.SuspectAfter+1)
	}
	return n
}

// resolve finds what task c.task (decoded from t) calls: the registered
// function of the same signature, and its constant data (memoized), and
// fills in c. A task that cannot be resolved fails whole, with the reason.
func (w *Worker) resolve(ctx context.Context, t wire.Taken, c *resolved) (fail *codec.Failure) {
	whole := wholeFailure
	task := &c.task
	var err error
	budget := lostBudget(task.Attempts)
	if budget > 0 && t.Attempt >= budget {
		why := ""
		if budget != task.Attempts {
			why = fmt.Sprintf(", raised to %d so that it ran alone, as a suspect, before it failed", budget)
		}
		return whole(codec.KindLost, "lost %d times (each worker running it died or stalled past its lease); the attempt budget is %d%s",
			t.Attempt, task.Attempts, why)
	}
	if c.h, fail = w.runtime(ctx, "function", task.Func, task.Sig); fail != nil {
		return fail
	}
	if task.Reduce != "" {
		if c.reducer, fail = w.runtime(ctx, "reducer", task.Reduce, task.ReduceSig); fail != nil {
			return fail
		}
	}
	if task.Const != "" {
		ref := cache.Ref{Hash: task.Const, Size: task.ConstSize}
		c.constant, err = w.constant(ctx, ref, c.h)
		switch {
		case errors.Is(err, redmap.ErrConstantCorrupt):
			return whole(codec.KindConstCorrupt, "%v", err)
		case errors.Is(err, redmap.ErrConstantMissing):
			return whole(codec.KindConstMissing, "%v", err)
		case errors.Is(err, codec.ErrCorrupt):
			return whole(codec.KindDecode, "%v", err)
		case err != nil:
			return whole(codec.KindConstMissing, "fetching constant %s: %v", ref, err)
		}
	}
	// What is left of the budget for this run and its retries; a run
	// lostBudget allows past the budget runs once, not retried.
	runs := task.Attempts - t.Attempt
	if task.Attempts > 0 {
		runs = max(runs, 1)
	}
	fn := task.Func // not task: c would escape, a few hundred bytes a task
	c.policy = engine.Policy{
		Attempts: runs,
		Timeout:  time.Duration(task.Timeout) * time.Millisecond,
		Retry:    task.Retry,
		OnRetry:  func(int, int, *codec.Failure) { w.counters.retried.Add(1) },
		Seed:     task.Seed,
		Start:    task.Start,
		Waits:    cmp.Or(task.Waits, engine.DefaultWaits),
		OnWait: func(_ int, d time.Duration) time.Duration {
			d = min(d, maxRetryAfter)
			w.counters.throttled.Add(1)
			w.throttle(ctx, fn, d)
			return d
		},
	}
	if grace := w.opts.AbandonGrace; grace > 0 && c.policy.Timeout > 0 {
		tid, timeout := t.ID, c.policy.Timeout
		c.policy.Abandon = grace
		c.policy.OnAbandon = func(index int) func() {
			return w.abandon(ctx, tid, "func", fn, "element", index, "after", "its timeout", "timeout", timeout, "abandon_grace", grace)
		}
	}
	return nil
}

// mismatch says how worker's handle h differs from the one the manager
// called name with (signature sig): the signatures, and the first field that
// differs, from the structure the manager published (one HGET per signature,
// remembered).
func (w *Worker) mismatch(ctx context.Context, h *engine.Runtime, name, sig string) string {
	msg := fmt.Sprintf("worker %s has %q as %s, the manager called it as %s", w.opts.ID, name, h.Signature(), sig)
	if d, ok := w.mismatches.Load(sig); ok {
		return msg + d.(string)
	}
	theirs, err := w.source.first.Types(ctx, sig)
	if err != nil || theirs == nil {
		return msg // not remembered: the manager's types may be published later
	}
	d := ""
	if diff := engine.Difference(theirs, h.Types(), "the manager", "the worker"); diff != "" {
		d = ": " + diff
	}
	w.mismatches.Store(sig, d)
	return msg + d
}

// constantWait bounds how long a task waits for its constant while Redis
// cannot give it: an outage (a Cluster master failing over, the object's
// slot unreachable) or the object missing (its master failed over before
// the upload reached the replica, or Redis lost its data; the batch's
// manager stores it again within one Poll of seeing it gone).
const constantWait = 30 * time.Second

// constant returns ref's value, decoded for h, from the memo or Redis. A
// transient Redis error or a missing object is tried again, with backoff,
// for up to constantWait, or until ctx ends (the task no longer wanted);
// then it is returned, and fails the task.
func (w *Worker) constant(ctx context.Context, ref cache.Ref, h *engine.Runtime) (any, error) {
	var bo backoff.Backoff
	deadline := time.Now().Add(constantWait)
	decode := func(b []byte) (any, error) {
		v, err := h.DecodeConstant(b)
		if err != nil {
			err = decodeError{err}
		}
		return v, err
	}
	for logged := false; ; {
		v, err := w.memo.Get(ctx, ref, h.Signature(), decode)
		var bad decodeError
		healing := errors.Is(err, redmap.ErrConstantMissing) ||
			rdb.Transient(err) && !errors.As(err, &bad) && !errors.Is(err, redmap.ErrConstantCorrupt)
		if err == nil || !healing || ctx.Err() != nil || time.Now().After(deadline) {
			return v, err
		}
		if !logged {
			w.log.WarnContext(ctx, "cannot fetch a task's constant; trying again", "ref", ref, "err", err, "for", constantWait)
			logged = true
		}
		if !bo.Wait(ctx) {
			return v, err
		}
	}
}

// decodeError is a constant's bytes that do not decode: waiting does not
// heal it.
type decodeError struct{ error }

func (e decodeError) Unwrap() error { return e.error }
