package redmap

import (
	"context"
	"errors"
	"fmt"
	"reflect"

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
	rt    *engine.Runtime // what runs it on a worker, and folds it on a manager
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
	r.rt = engine.Fold(name, sig, types, fn, ErrReduce)
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

// Runtime is the handle's side in redmap's engine, which the manager and
// worker packages run it by; it seals AnyHandle, since no package outside
// redmap can name its type. nil for a nil handle.
func (r *Reducer[T]) Runtime() *engine.Runtime {
	if r == nil {
		return nil
	}
	return r.rt
}

// Limit returns the zero Limit: a limit belongs to the function a batch
// maps, not to its reducer.
func (r *Reducer[T]) Limit() Limit { return Limit{} }

var _ AnyHandle = (*Reducer[int])(nil)
