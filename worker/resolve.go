package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/cache"
	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/backoff"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/engine"
)

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
	// withdrawn: the task was found no longer wanted once it had run (a
	// map task about to store its partials): it has no result to report.
	withdrawn bool
	// stepFails are the elements of a pipeline's task that failed in one of
	// its steps, by the function of that step: they travel in the task's
	// output (wire.StepFail), not as its failures, and are counted as
	// those are (Worker.execute).
	stepFails []funcFails
}

// funcFails are elements that failed in function fn.
type funcFails struct {
	fn    string
	fails []codec.Failure
}

// maxRetryAfter caps one wait an element makes for a redmap.RetryAfter.
const maxRetryAfter = 10 * time.Minute

// throttle tells fn's limit that its service asked for d of quiet (see
// redmap.RetryAfter): if it has a rate, no worker starts an element of it
// for d. One script call on shard 0; a failure is logged.
func (w *Worker) throttle(ctx context.Context, fn string, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := w.source.first.Throttle(ctx, &broker.ThrottleParams{Func: fn, Quiet: d}); err != nil {
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
	theirs, err := w.source.first.Types(ctx, &broker.TypesParams{Sig: sig})
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
			broker.Transient(err) && !errors.As(err, &bad) && !errors.Is(err, redmap.ErrConstantCorrupt)
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

// runtime returns the runtime registered as name (a "function" or a
// "reducer", what says), or the failure of the whole task if there is none
// or the manager called it with another signature, sig.
func (w *Worker) runtime(ctx context.Context, what, name, sig string) (*engine.Runtime, *codec.Failure) {
	w.mu.RLock()
	rt := w.runtimes[name]
	w.mu.RUnlock()
	switch {
	case rt == nil:
		return nil, wholeFailure(codec.KindUnknownFunc, "worker %s has no %s %q", w.opts.ID, what, name)
	case rt.Signature() != sig:
		return nil, wholeFailure(codec.KindTypeMismatch, "%s", w.mismatch(ctx, rt, name, sig))
	}
	return rt, nil
}
