// Package redmap is what managers and workers share: typed function handles,
// task ids and errors. See the manager and worker packages for the two sides.
//
// Go cannot ship closures, so a function is registered by name on both sides
// from one shared definition:
//
//	// package tasks, imported by the manager program and the worker program
//	var Square = redmap.Func("square", func(ctx context.Context, x int) (int, error) {
//		return x * x, nil
//	})
package redmap

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
	"github.com/redmap/redmap/internal/handler"
)

// Handle is a function registered under a name. The manager uses it to submit
// inputs of type In and decode outputs of type Out; the worker uses it to run
// the function. Build one with Func, once, in a package both sides import.
type Handle[In, Out any] struct {
	name  string
	sig   string
	types []string // the structure of In and Out, one line per leaf
	fn    func(context.Context, In) (Out, error)
}

// Func returns a handle for fn under name. It does not validate: an empty name
// or a nil fn is reported by worker.Handle and by manager.Map, as an error.
func Func[In, Out any](name string, fn func(context.Context, In) (Out, error)) *Handle[In, Out] {
	sig, types := signature(fmt.Sprintf("func(%v) %v", reflect.TypeFor[In](), reflect.TypeFor[Out]()),
		map[string]reflect.Type{"In": reflect.TypeFor[In](), "Out": reflect.TypeFor[Out]()})
	return &Handle[In, Out]{name: name, sig: sig, types: types, fn: fn}
}

// Name returns the name the function is registered under.
func (h *Handle[In, Out]) Name() string { return h.name }

// Signature returns the function's types as "func(In) Out #<fingerprint>",
// the fingerprint hashing their structure: field names, tags and types, at
// every depth. A worker refuses a task whose handle had another signature
// (ErrTypeMismatch, naming the first difference) instead of decoding its
// inputs into the wrong types.
func (h *Handle[In, Out]) Signature() string { return h.sig }

// Validate reports an empty name, a nil function, or an input or output type
// that cannot travel: an interface with methods, which MessagePack cannot
// decode into (it has no way to know the concrete type).
func (h *Handle[In, Out]) Validate() error {
	if h == nil {
		return errors.New("redmap: nil handle")
	}
	return validate(h.name, h.sig, h.fn == nil, reflect.TypeFor[In](), reflect.TypeFor[Out]())
}

// validate refuses an empty name, a nil function, and types MessagePack
// cannot decode into: interfaces with methods, since nothing on the wire says
// which concrete type to build.
func validate(name, sig string, nilFn bool, types ...reflect.Type) error {
	switch {
	case name == "":
		return errors.New("redmap: handle has an empty name")
	case nilFn:
		return fmt.Errorf("redmap: handle %q has a nil function", name)
	}
	for _, t := range types {
		if t.Kind() == reflect.Interface && t.NumMethod() > 0 {
			return fmt.Errorf("%w: %q has type %s: %v is an interface with methods, which cannot be decoded; use a concrete type",
				ErrTypeMismatch, name, sig, t)
		}
		if bad := untravelled(t, nil); bad != nil {
			return fmt.Errorf("%w: %q has type %s: a %v cannot be encoded to travel through Redis", ErrEncode, name, sig, bad)
		}
	}
	return nil
}

// untravelled returns a type inside t that MessagePack cannot encode (a
// channel, a function, an unsafe pointer), or nil.
func untravelled(t reflect.Type, seen []reflect.Type) reflect.Type {
	if slices.Contains(seen, t) {
		return nil
	}
	seen = append(seen, t)
	switch t.Kind() {
	case reflect.Chan, reflect.Func, reflect.UnsafePointer:
		return t
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return untravelled(t.Elem(), seen)
	case reflect.Map:
		if bad := untravelled(t.Key(), seen); bad != nil {
			return bad
		}
		return untravelled(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() && f.Tag.Get("msgpack") != "-" {
				if bad := untravelled(f.Type, seen); bad != nil {
					return bad
				}
			}
		}
	}
	return nil
}

func (h *Handle[In, Out]) runtime() handler.Runtime { return handleRuntime[In, Out]{h} }

// handleRuntime is the worker's side of a Handle (see handler.Runtime).
type handleRuntime[In, Out any] struct{ *Handle[In, Out] }

// Types returns the structure the signature fingerprints.
func (h handleRuntime[In, Out]) Types() []string { return h.types }

// DecodeConstant reports that a Handle takes no constant data.
func (h handleRuntime[In, Out]) DecodeConstant([]byte) (any, error) {
	return nil, fmt.Errorf("redmap: %q takes no constant data", h.name)
}

// Run decodes a frame of count inputs, calls the function on each in turn and
// returns the frame of outputs with the elements that failed. A panic in the
// function fails its element only (ErrPanic, with the stack). A Handle
// ignores constant.
func (h handleRuntime[In, Out]) Run(ctx context.Context, _ any, count int, input []byte, p handler.Policy) ([]byte, []codec.Failure) {
	return runElements(ctx, count, input, p, h.fn)
}

// Reduce is Run folding the outputs with r (see handler.Runtime).
func (h handleRuntime[In, Out]) Reduce(ctx context.Context, _ any, count int, input []byte, p handler.Policy, r handler.Runtime) ([]byte, []codec.Failure) {
	return reduceElements(ctx, count, input, p, h.fn, r)
}

// eachElement is the body of every handle's Run and Reduce: it decodes the
// count inputs of frame input and calls fn on each in turn, under policy p,
// passing each output to sink; it returns the failed elements: those whose
// run failed, whose sink failed, or that could not be decoded.
func eachElement[In, Out any](ctx context.Context, count int, input []byte, p handler.Policy, fn func(context.Context, In) (Out, error), sink func(i int, y Out) *codec.Failure) []codec.Failure {
	var fails []codec.Failure
	xs := make([]In, count)
	decoded := count
	decodeErr := codec.DecodeElements(input, xs)
	if decodeErr != nil {
		decoded = 0
		var ee *codec.ElementError
		if errors.As(decodeErr, &ee) {
			decoded = ee.Index
		}
	}
	ctx, e := withElements(ctx, p.Seed)
	for i := range decoded {
		y, f := call(ctx, p, fn, xs[i], func() { e.at(p.Start + i) })
		if f == nil {
			f = sink(i, y)
		}
		if f != nil {
			f.Index = i
			fails = append(fails, *f)
		}
	}
	// An element that does not decode leaves the stream unreadable after it,
	// so it and every later element of the task fail.
	for i := decoded; i < count; i++ {
		fails = append(fails, codec.Failure{Index: i, Kind: codec.KindDecode,
			Msg: fmt.Sprintf("input as %v: %v", reflect.TypeFor[In](), decodeErr)})
	}
	return fails
}

// runElements runs fn over the inputs and encodes their outputs, one frame,
// each failure staying with its element.
func runElements[In, Out any](ctx context.Context, count int, input []byte, p handler.Policy, fn func(context.Context, In) (Out, error)) ([]byte, []codec.Failure) {
	ys := make([]Out, count)
	fails := eachElement(ctx, count, input, p, fn, func(i int, y Out) *codec.Failure { ys[i] = y; return nil })
	// Outputs of a type with a fast path, and nothing failed: one frame at
	// once (a failed element's zero value would decode as a value, not nil).
	if len(fails) == 0 {
		if frame, ok, err := codec.EncodeOutputs(ys); ok && err == nil {
			return frame, nil
		}
	}
	out := codec.NewOutputEncoder(count)
	failed := make(map[int]bool, len(fails))
	for _, f := range fails {
		failed[f.Index] = true
	}
	for i := range count {
		if failed[i] {
			out.AddNil()
			continue
		}
		if err := out.Add(&ys[i]); err != nil {
			fails = append(fails, codec.Failure{Index: i, Kind: codec.KindEncode, Msg: fmt.Sprintf("output as %v: %v", reflect.TypeFor[Out](), err)})
			out.AddNil()
		}
	}
	slices.SortFunc(fails, func(a, b codec.Failure) int { return a.Index - b.Index })
	return out.Bytes(), fails
}

// reduceElements runs fn over the inputs and folds their outputs with r, a
// reducer of Out, into one partial: a frame of one value, or of none if
// every element failed. An output the reducer fails to fold in fails its
// element (ErrReduce) and is left out.
func reduceElements[In, Out any](ctx context.Context, count int, input []byte, p handler.Policy, fn func(context.Context, In) (Out, error), r handler.Runtime) ([]byte, []codec.Failure) {
	red, ok := r.(folder[Out])
	if !ok {
		return nil, []codec.Failure{{Index: -1, Kind: codec.KindTypeMismatch,
			Msg: fmt.Sprintf("reducer %q (%s) does not fold the function's output type %v", r.Name(), r.Signature(), reflect.TypeFor[Out]())}}
	}
	var acc Out
	folded := false
	fails := eachElement(ctx, count, input, p, fn, func(_ int, y Out) *codec.Failure {
		if !folded {
			acc, folded = y, true
			return nil
		}
		z, f := red.fold(ctx, acc, y)
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

// call runs fn on one input under policy p: a timed-out run, a Retryable
// error, or with p.Retry any error or panic, runs again while attempts are
// left, after a short pause. What still fails becomes a failure. start is
// called before each attempt.
func call[In, Out any](ctx context.Context, p handler.Policy, fn func(context.Context, In) (Out, error), x In, start func()) (Out, *codec.Failure) {
	bo := backoff.Backoff{Min: 20 * time.Millisecond, Max: time.Second}
	for attempt := 1; ; attempt++ {
		start()
		y, f, retryable := callOnce(ctx, p.Timeout, fn, x)
		if f == nil {
			return y, nil
		}
		again := f.Kind == codec.KindTimeout || retryable || (p.Retry && (f.Kind == codec.KindError || f.Kind == codec.KindPanic))
		if !again || attempt >= p.Attempts || ctx.Err() != nil {
			if attempt > 1 {
				f.Msg = fmt.Sprintf("attempt %d: %s", attempt, f.Msg)
			}
			return y, f
		}
		if p.OnRetry != nil {
			p.OnRetry()
		}
		bo.Wait(ctx)
	}
}

// callOnce runs fn once, turning a returned error, a panic or a run past the
// timeout into a failure, and saying whether the error was marked Retryable.
func callOnce[In, Out any](ctx context.Context, timeout time.Duration, fn func(context.Context, In) (Out, error), x In) (y Out, f *codec.Failure, retryable bool) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	defer func() {
		if p := recover(); p != nil {
			f = &codec.Failure{Kind: codec.KindPanic, Msg: fmt.Sprint(p), Stack: string(debug.Stack())}
		}
	}()
	y, err := fn(ctx, x)
	switch {
	case err == nil:
		return y, nil, false
	case timeout > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded):
		return y, &codec.Failure{Kind: codec.KindTimeout, Msg: fmt.Sprintf("ran past its timeout of %v: %v", timeout, err)}, false
	}
	return y, &codec.Failure{Kind: codec.KindError, Msg: err.Error()}, IsRetryable(err)
}

// Handler is any handle, *Handle or *HandleWith, as a worker registers it
// (worker.Worker.Handle, worker.Main). Only this package's handles implement
// it.
type Handler interface {
	// Name returns the name the function is registered under.
	Name() string
	// Signature returns the function's types and their fingerprint.
	Signature() string
	// Validate reports a handle that cannot be registered or called.
	Validate() error
	runtime() handler.Runtime
}

var (
	_ Handler = (*Handle[int, int])(nil)
	_ Handler = (*HandleWith[int, int, int])(nil)
)

func init() {
	handler.Of = func(h any) (handler.Runtime, bool) {
		x, ok := h.(Handler)
		if !ok || x == nil {
			return nil, false
		}
		return x.runtime(), true
	}
}
