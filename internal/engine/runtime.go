package engine

import (
	"context"
	"fmt"
	"reflect"
	"runtime/debug"

	"github.com/redmap/redmap/codec"
)

// Runtime is a handle as a worker runs it, and a reducer as the manager
// folds with it: package redmap makes one per handle (Map, MapWith, Fold)
// and registers it; a worker calls it directly, its calls going straight
// into this package's Run and Reduce.
type Runtime struct {
	name, sig string
	types     []string // the structure the signature fingerprints, one line per leaf
	// constant decodes a batch's constant data; nil if the handle takes none.
	constant func(b []byte) (any, error)
	// run runs the function over a task's elements, folding the outputs
	// with red if it is not nil.
	run     func(ctx context.Context, constant any, count int, input []byte, p Policy, red *Runtime) ([]byte, []codec.Failure)
	fold    any // a reducer's Folder[T]; nil for a function
	shuffle any // an emitter's Shuffler; nil for anything else
	step    any // a pipeline's Step (see chain.go); nil for anything else
}

// Name returns the name the handle is registered under.
func (rt *Runtime) Name() string { return rt.name }

// Signature returns the handle's signature.
func (rt *Runtime) Signature() string { return rt.sig }

// Types returns the structure the signature fingerprints, one line per leaf.
func (rt *Runtime) Types() []string { return rt.types }

// DecodeConstant decodes a batch's constant data for Run.
func (rt *Runtime) DecodeConstant(b []byte) (any, error) {
	switch {
	case rt.constant != nil:
		return rt.constant(b)
	case rt.fold != nil:
		return nil, fmt.Errorf("redmap: %q is a reducer", rt.name)
	}
	return nil, fmt.Errorf("redmap: %q takes no constant data", rt.name)
}

// Run runs the function over a frame of count inputs, with the decoded
// constant data if the function takes any, under policy p, and returns the
// frame of outputs and the elements that failed. With a reducer red (not
// nil) it folds the outputs instead of returning them: the frame it
// returns holds one value, the fold of every output whose element did not
// fail, or none if all failed.
func (rt *Runtime) Run(ctx context.Context, constant any, count int, input []byte, p Policy, red *Runtime) ([]byte, []codec.Failure) {
	return rt.run(ctx, constant, count, input, p, red)
}

// Map returns the runtime of a function of In to Out.
func Map[In, Out any](name, sig string, types []string, fn func(context.Context, In) (Out, error)) *Runtime {
	return &Runtime{name: name, sig: sig, types: types, step: mapStep[In, Out]{fn: fn},
		run: func(ctx context.Context, _ any, count int, input []byte, p Policy, red *Runtime) ([]byte, []codec.Failure) {
			return runOrReduce(ctx, count, input, p, fn, red)
		}}
}

// MapWith returns the runtime of a function of In to Out that takes a
// batch's constant of type C besides each element.
func MapWith[C, In, Out any](name, sig string, types []string, fn func(context.Context, C, In) (Out, error)) *Runtime {
	decode := func(b []byte) (any, error) {
		c, err := codec.DecodeValue[C](b)
		if err != nil {
			return nil, fmt.Errorf("redmap: constant as %v: %w", reflect.TypeFor[C](), err)
		}
		return c, nil
	}
	return &Runtime{name: name, sig: sig, types: types, constant: decode,
		run: func(ctx context.Context, constant any, count int, input []byte, p Policy, red *Runtime) ([]byte, []codec.Failure) {
			c, ok := constant.(C)
			if !ok {
				return nil, []codec.Failure{{Index: -1, Kind: codec.KindTypeMismatch,
					Msg: fmt.Sprintf("constant is %T, want %v", constant, reflect.TypeFor[C]())}}
			}
			return runOrReduce(ctx, count, input, p, func(ctx context.Context, x In) (Out, error) { return fn(ctx, c, x) }, red)
		}}
}

// Fold returns the runtime of a reducer of T: a map's Reduce folds with it,
// and the manager (FolderOf); it runs nothing itself. A panic in fn, folding
// in the manager, is an error wrapping errReduce (redmap.ErrReduce).
func Fold[T any](name, sig string, types []string, fn func(ctx context.Context, a, b T) (T, error), errReduce error) *Runtime {
	return &Runtime{name: name, sig: sig, types: types, fold: folder[T]{name: name, fn: fn, errReduce: errReduce},
		run: func(context.Context, any, int, []byte, Policy, *Runtime) ([]byte, []codec.Failure) {
			return nil, []codec.Failure{{Index: -1, Kind: codec.KindUnknownFunc, Msg: fmt.Sprintf("%q is a reducer, not a function", name)}}
		}}
}

// FolderOf returns rt's fold, if rt is a reducer of T.
func FolderOf[T any](rt *Runtime) (Folder[T], bool) {
	f, ok := rt.fold.(Folder[T])
	return f, ok
}

// runOrReduce is Run, or Reduce with red if it is not nil.
func runOrReduce[In, Out any](ctx context.Context, count int, input []byte, p Policy, fn func(context.Context, In) (Out, error), red *Runtime) ([]byte, []codec.Failure) {
	if red != nil {
		return Reduce(ctx, count, input, p, fn, red)
	}
	return Run(ctx, count, input, p, fn)
}

// folder is the Folder of a reducer's function.
type folder[T any] struct {
	name      string
	fn        func(ctx context.Context, a, b T) (T, error)
	errReduce error
}

// Fold returns fn(a, b) in the manager, a panic in fn returned as an
// errReduce error with its stack.
func (r folder[T]) Fold(ctx context.Context, a, b T) (y T, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %q panicked: %v\n%s", r.errReduce, r.name, p, debug.Stack())
		}
	}()
	return r.fn(ctx, a, b)
}

// FoldTask folds b into a on a worker, a failure (an error, or a panic with
// its stack) reported as KindReduce.
func (r folder[T]) FoldTask(ctx context.Context, a, b T) (y T, f *codec.Failure) {
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
