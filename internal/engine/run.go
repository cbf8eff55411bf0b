package engine

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"slices"
	"time"

	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/backoff"
)

// Folder is a reducer of T, as a map's runtime with outputs of type T and
// the manager see it.
type Folder[T any] interface {
	// FoldTask folds b into a on a worker, a failure (an error, or a panic
	// with its stack) reported as codec.KindReduce.
	FoldTask(ctx context.Context, a, b T) (T, *codec.Failure)
	// Fold folds b into a in the manager, a panic returned as an error.
	Fold(ctx context.Context, a, b T) (T, error)
}

// Run decodes a frame of count inputs, calls fn on each in turn under
// policy p and returns the frame of outputs with the elements that failed,
// each failure staying with its element. A panic in fn fails its element
// only (codec.KindPanic, with the stack).
func Run[In, Out any](ctx context.Context, count int, input []byte, p Policy, fn func(context.Context, In) (Out, error)) ([]byte, []codec.Failure) {
	ys := make([]Out, count)
	fails := each(ctx, count, input, p, fn, func(i int, y Out) *codec.Failure { ys[i] = y; return nil })
	// Outputs of a type with a fast path, and nothing failed: one frame at
	// once (a failed element's zero value would decode as a value, not nil).
	if len(fails) == 0 {
		if frame, ok, err := codec.EncodeOutputs(ys); ok && err == nil {
			return frame, nil
		}
	}
	out := codec.NewOutputEncoder(count)
	// fails are in index order (each goes through the elements in turn), so
	// one pass tells the failed elements apart, runs included, without a
	// set as large as the task.
	var unencodable []codec.Failure
	next := 0
	for i := range count {
		for next < len(fails) && fails[next].Last() < i {
			next++
		}
		if next < len(fails) && fails[next].Index <= i {
			out.AddNil()
			continue
		}
		if err := out.Add(&ys[i]); err != nil {
			unencodable = append(unencodable, codec.Failure{Index: i, Kind: codec.KindEncode, Msg: fmt.Sprintf("output as %v: %v", reflect.TypeFor[Out](), err)})
			out.AddNil()
		}
	}
	if len(unencodable) > 0 {
		fails = append(fails, unencodable...)
		slices.SortFunc(fails, func(a, b codec.Failure) int { return a.Index - b.Index })
	}
	return out.Bytes(), fails
}

// Reduce runs fn over the inputs as Run does and folds their outputs with
// r, a reducer of Out, into one partial: a frame of one value, or of none if
// every element failed. An output the reducer fails to fold in fails its
// element (codec.KindReduce) and is left out.
func Reduce[In, Out any](ctx context.Context, count int, input []byte, p Policy, fn func(context.Context, In) (Out, error), r *Runtime) ([]byte, []codec.Failure) {
	red, ok := FolderOf[Out](r)
	if !ok {
		return nil, []codec.Failure{{Index: -1, Kind: codec.KindTypeMismatch,
			Msg: fmt.Sprintf("reducer %q (%s) does not fold the function's output type %v", r.Name(), r.Signature(), reflect.TypeFor[Out]())}}
	}
	var acc Out
	folded := false
	fails := each(ctx, count, input, p, fn, func(_ int, y Out) *codec.Failure {
		if !folded {
			acc, folded = y, true
			return nil
		}
		z, f := red.FoldTask(ctx, acc, y)
		if f == nil {
			acc = z
		}
		return f
	})
	if !folded {
		return codec.NewOutputEncoder(0).Bytes(), fails
	}
	out := codec.NewOutputEncoder(1)
	if err := out.Add(&acc); err != nil {
		return nil, []codec.Failure{{Index: -1, Kind: codec.KindEncode, Msg: fmt.Sprintf("partial as %v: %v", reflect.TypeFor[Out](), err)}}
	}
	return out.Bytes(), fails
}

// each is the body of Run and Reduce: it decodes the count inputs of frame
// input and calls fn on each in turn, under policy p, passing each output to
// sink; it returns the failed elements: those whose run failed, whose sink
// failed, or that could not be decoded.
func each[In, Out any](ctx context.Context, count int, input []byte, p Policy, fn func(context.Context, In) (Out, error), sink func(i int, y Out) *codec.Failure) []codec.Failure {
	xs, decodeFail := decodeInputs[In](count, input)
	fails := runEach(ctx, xs, p, fn, sink)
	if decodeFail != nil {
		fails = append(fails, *decodeFail)
	}
	return fails
}

// decodeInputs decodes a frame of count inputs. An element that does not
// decode leaves the stream unreadable after it, so it and every later
// element fail: xs holds those before it, and the failure is their run.
func decodeInputs[In any](count int, input []byte) ([]In, *codec.Failure) {
	xs := make([]In, count)
	decodeErr := codec.DecodeElements(input, xs)
	if decodeErr == nil {
		return xs, nil
	}
	decoded := 0
	var ee *codec.ElementError
	if errors.As(decodeErr, &ee) {
		decoded = ee.Index
	}
	return xs[:decoded], &codec.Failure{Index: decoded, Through: count - 1, Kind: codec.KindDecode,
		Msg: fmt.Sprintf("input as %v: %v", reflect.TypeFor[In](), decodeErr)}
}

// runEach calls fn on each of xs in turn, under policy p, passing each
// output to sink, and returns the failed elements: those whose run or sink
// failed, in index order, alike neighbours as runs.
func runEach[In, Out any](ctx context.Context, xs []In, p Policy, fn func(context.Context, In) (Out, error), sink func(i int, y Out) *codec.Failure) []codec.Failure {
	var fails []codec.Failure
	ctx, e := withElements(ctx, p.Seed)
	var c *callers[In, Out]
	if p.Timeout > 0 && p.Abandon > 0 {
		c = &callers[In, Out]{ctx: ctx, fn: fn}
		defer c.close()
	}
	for i := range xs {
		y, f := runElement(ctx, p, fn, xs[i], p.Start+i, func() { e.at(p.Start + i) }, c)
		if f == nil {
			f = sink(i, y)
		}
		if f != nil {
			f.Index = i
			if n := len(fails); n == 0 || !fails[n-1].Extend(f) {
				fails = append(fails, *f)
			}
		}
	}
	return fails
}

// runElement runs fn on one input under policy p: a timed-out run, a
// Retryable error, or with p.Retry any error or panic, runs again while
// attempts are left, after a short pause; an abandoned run does not. What
// still fails becomes a failure. index is x's batch index; start is called
// before each attempt; c, if not nil, makes the calls (see callers).
func runElement[In, Out any](ctx context.Context, p Policy, fn func(context.Context, In) (Out, error), x In, index int, start func(), c *callers[In, Out]) (Out, *codec.Failure) {
	bo := backoff.Backoff{Min: 20 * time.Millisecond, Max: time.Second}
	waits := 0
	for attempt := 1; ; attempt++ {
		start()
		o := runOnce(ctx, p, index, fn, x, c)
		y, f, retryable, after := o.y, o.f, o.retryable, o.after
		if f == nil {
			return y, nil
		}
		if o.abandoned {
			// Its function ignores its context: another run would most
			// likely be abandoned too, each one left running.
			if attempt > 1 {
				f.Msg = fmt.Sprintf("attempt %d: %s", attempt, f.Msg)
			}
			return y, f
		}
		if after >= 0 {
			// A rationed service said when to come back: wait, and run
			// again without spending the attempt.
			if waits >= p.Waits || ctx.Err() != nil {
				f.Kind = codec.KindThrottled
				f.Msg = fmt.Sprintf("still refused after %d waits (RetryAfter): %s", waits, f.Msg)
				return y, f
			}
			waits++
			if p.OnWait != nil {
				after = p.OnWait(index, after)
			}
			if !backoff.Sleep(ctx, max(after, time.Millisecond)) {
				f.Kind = codec.KindThrottled
				f.Msg = fmt.Sprintf("cancelled while waiting after a RetryAfter: %s", f.Msg)
				return y, f
			}
			attempt--
			continue
		}
		again := f.Kind == codec.KindTimeout || retryable || (p.Retry && (f.Kind == codec.KindError || f.Kind == codec.KindPanic))
		if !again || attempt >= p.Attempts || ctx.Err() != nil {
			if attempt > 1 {
				f.Msg = fmt.Sprintf("attempt %d: %s", attempt, f.Msg)
			}
			return y, f
		}
		if p.OnRetry != nil {
			p.OnRetry(index, attempt, f)
		}
		bo.Wait(ctx)
	}
}

// outcome is what one run of a function came to.
type outcome[Out any] struct {
	y         Out
	f         *codec.Failure // nil if it succeeded
	retryable bool           // its error was marked Retryable
	after     time.Duration  // the wait its error asked for if marked RetryAfter, else -1
	abandoned bool           // it did not return within p.Abandon of its timeout
}

// runOnce runs fn once on x, the element of batch index index, under p's
// timeout: a returned error, a panic or a run past the timeout becomes a
// failure. With a timeout and c (p.Abandon), it runs on c's goroutine, and
// is abandoned if it has not returned p.Abandon after its timeout.
func runOnce[In, Out any](ctx context.Context, p Policy, index int, fn func(context.Context, In) (Out, error), x In, c *callers[In, Out]) outcome[Out] {
	if p.Timeout <= 0 {
		return call(ctx, 0, fn, x)
	}
	if c != nil {
		return c.call(p, index, x)
	}
	ctx, cancel := context.WithTimeout(ctx, p.Timeout)
	defer cancel()
	return call(ctx, p.Timeout, fn, x)
}

// call runs fn once under ctx, whose deadline, if any, is the run's
// timeout, turning a returned error, a panic or a run past the timeout
// into a failure, and saying whether the error was marked Retryable, and
// the wait it asked for if it was marked RetryAfter.
func call[In, Out any](ctx context.Context, timeout time.Duration, fn func(context.Context, In) (Out, error), x In) (o outcome[Out]) {
	o.after = -1
	defer func() {
		if p := recover(); p != nil {
			o.f = &codec.Failure{Kind: codec.KindPanic, Msg: fmt.Sprint(p), Stack: string(debug.Stack())}
		}
	}()
	y, err := fn(ctx, x)
	o.y = y
	switch {
	case err == nil:
		return o
	case timeout > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded):
		o.f = &codec.Failure{Kind: codec.KindTimeout, Msg: fmt.Sprintf("ran past its timeout of %v: %v", timeout, err)}
		return o
	}
	if d, ok := RetryAfterOf(err); ok {
		o.after = max(d, 0)
	}
	o.f = &codec.Failure{Kind: codec.KindError, Msg: err.Error()}
	o.retryable = IsRetryable(err)
	return o
}

// Retryable marks err as worth another attempt (redmap.Retryable).
func Retryable(err error) error {
	if err == nil {
		return nil
	}
	return &retryable{err}
}

type retryable struct{ err error }

func (r *retryable) Error() string { return r.err.Error() }
func (r *retryable) Unwrap() error { return r.err }

// IsRetryable reports whether err was marked with Retryable.
func IsRetryable(err error) bool {
	var r *retryable
	return errors.As(err, &r)
}

// RetryAfter marks err as a refusal that asks to be retried after d
// (redmap.RetryAfter).
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		err = errors.New("retry after " + d.String())
	}
	return &retryAfter{err: err, d: d}
}

type retryAfter struct {
	err error
	d   time.Duration
}

func (r *retryAfter) Error() string { return r.err.Error() }
func (r *retryAfter) Unwrap() error { return r.err }

// RetryAfterOf reports whether err was marked with RetryAfter, and its
// wait.
func RetryAfterOf(err error) (time.Duration, bool) {
	var r *retryAfter
	if !errors.As(err, &r) {
		return 0, false
	}
	return r.d, true
}
