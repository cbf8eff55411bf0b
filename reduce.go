package redmap

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"

	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/engine"
)

// Reducer folds two values of T into one: the reduction of a
// manager.MapReduce, which runs on the workers (each folds the outputs of
// each chunk it runs into one partial) and then in the manager (which folds
// the partials as they arrive). Register it on the workers like a function
// (worker.Register), from one definition both sides import.
//
// The function must be associative and commutative: f(a, f(b, c)) =
// f(f(a, b), c) and f(a, b) = f(b, a). The order in which outputs and
// partials meet depends on chunk sizes, which worker runs what, and when
// results arrive, so a reducer that is not commutative (concatenating
// strings, say) gets an unspecified order, which may differ from run to run.
type Reducer[T any] struct {
	name  string
	sig   string
	types []string
	fn    func(context.Context, T, T) (T, error)
}

// Reduce returns a reducer for fn under name. Like Func, it does not
// validate: worker.Register and manager.MapReduce report an empty name or a nil
// fn.
func Reduce[T any](name string, fn func(ctx context.Context, a, b T) (T, error)) *Reducer[T] {
	t := reflect.TypeFor[T]()
	sig, types := signature(fmt.Sprintf("reduce(%v, %v) %v", t, t, t), map[string]reflect.Type{"T": t})
	r := &Reducer[T]{name: name, sig: sig, types: types, fn: fn}
	engine.Register(r, reducerRuntime[T]{r})
	return r
}

// Name returns the name the reducer is registered under.
func (r *Reducer[T]) Name() string { return r.name }

// Signature returns the reducer's types as "reduce(T, T) T #<fingerprint>";
// see Handle.Signature.
func (r *Reducer[T]) Signature() string { return r.sig }

// Validate reports an empty name, a nil function, or a T that cannot travel.
func (r *Reducer[T]) Validate() error {
	if r == nil {
		return errors.New("redmap: nil reducer")
	}
	return validate(r.name, r.sig, r.fn == nil, reflect.TypeFor[T]())
}

func (r *Reducer[T]) handle() {}

// reducerRuntime is the worker's side of a Reducer: a map handle's Reduce
// folds with it (it is an engine.Folder[T]); it runs nothing itself.
type reducerRuntime[T any] struct{ *Reducer[T] }

// Types returns the structure the signature fingerprints.
func (r reducerRuntime[T]) Types() []string { return r.types }

// DecodeConstant reports that a reducer takes no constant data.
func (r reducerRuntime[T]) DecodeConstant([]byte) (any, error) {
	return nil, fmt.Errorf("redmap: %q is a reducer", r.name)
}

// Run fails: a reducer is not a function to map with.
func (r reducerRuntime[T]) Run(context.Context, any, int, []byte, engine.Policy) ([]byte, []codec.Failure) {
	return nil, r.notAFunction()
}

// Reduce fails: a reducer is not a function to map with.
func (r reducerRuntime[T]) Reduce(context.Context, any, int, []byte, engine.Policy, engine.Runtime) ([]byte, []codec.Failure) {
	return nil, r.notAFunction()
}

func (r reducerRuntime[T]) notAFunction() []codec.Failure {
	return []codec.Failure{{Index: -1, Kind: codec.KindUnknownFunc, Msg: fmt.Sprintf("%q is a reducer, not a function", r.name)}}
}

// Fold returns fn(a, b) in the manager, a panic in fn returned as an
// ErrReduce error with its stack.
func (r reducerRuntime[T]) Fold(ctx context.Context, a, b T) (y T, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %q panicked: %v\n%s", ErrReduce, r.name, p, debug.Stack())
		}
	}()
	return r.fn(ctx, a, b)
}

// FoldTask folds b into a on a worker, a failure (an error, or a panic with
// its stack) reported as KindReduce.
func (r reducerRuntime[T]) FoldTask(ctx context.Context, a, b T) (y T, f *codec.Failure) {
	defer func() {
		if p := recover(); p != nil {
			f = &codec.Failure{Kind: codec.KindReduce, Msg: fmt.Sprintf("reducer %q panicked: %v", r.name, p), Stack: string(debug.Stack())}
		}
	}()
	y, err := r.fn(ctx, a, b)
	if err != nil {
		return y, &codec.Failure{Kind: codec.KindReduce, Msg: fmt.Sprintf("reducer %q: %v", r.name, err)}
	}
	return y, nil
}

var _ engine.Folder[int] = reducerRuntime[int]{}

var _ AnyHandle = (*Reducer[int])(nil)
