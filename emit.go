package redmap

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/redmap/redmap/internal/engine"
)

// Emitter is the map side of a map/reduce by key (manager.ReduceByKey): a
// function that emits key/value pairs for each element, any number of
// them. Build one with Emit, once, in a package both sides import, and
// register it on the workers like a function (worker.Register).
//
// On a worker, each task's pairs are combined per key with the call's
// reducer, cut into partitions by a stable hash of the key, and stored in
// Redis; a reduce task per partition then folds each key's partials. The
// manager receives each partition's reduced pairs.
//
// fn must call emit only before it returns. An element whose fn fails
// (an error, a panic, a timeout) contributes none of its pairs, whatever it
// emitted before failing. fn should be deterministic: if a task runs
// twice (its worker died), each partition keeps the pairs of one of its
// runs.
type Emitter[In any, K comparable, V any] struct {
	rt    *engine.Runtime // what runs it on a worker, and folds it on a manager
	name  string
	sig   string
	types []string
	fn    func(context.Context, In, func(K, V)) error
	opts  handleOptions
}

// Emit returns an emitter for fn under name, with options opts (a Limit);
// see Emitter. Like Func, it does not validate: worker.Register and
// manager.ReduceByKey report an empty name or a nil fn.
func Emit[In any, K comparable, V any](name string, fn func(ctx context.Context, x In, emit func(K, V)) error, opts ...Option) *Emitter[In, K, V] {
	in, k, v := reflect.TypeFor[In](), reflect.TypeFor[K](), reflect.TypeFor[V]()
	sig, types := signature(fmt.Sprintf("emit(%v) (%v, %v)", in, k, v), map[string]reflect.Type{"In": in, "K": k, "V": v})
	e := &Emitter[In, K, V]{name: name, sig: sig, types: types, fn: fn, opts: options(opts)}
	e.rt = engine.Emit(name, sig, types, fn)
	return e
}

// Name returns the name the emitter is registered under.
func (e *Emitter[In, K, V]) Name() string { return e.name }

// Signature returns the emitter's types as "emit(In) (K, V) #<fingerprint>";
// see Handle.Signature.
func (e *Emitter[In, K, V]) Signature() string { return e.sig }

// Limit returns the fleet-wide limit declared with the emitter; see
// Handle.Limit.
func (e *Emitter[In, K, V]) Limit() Limit { return e.opts.limit }

// Validate reports an empty name, a nil function, a limit that cannot be
// enforced, or a type that cannot travel (see Handle.Validate).
func (e *Emitter[In, K, V]) Validate() error {
	if e == nil {
		return errors.New("redmap: nil emitter")
	}
	if err := e.opts.limit.Validate(); err != nil {
		return fmt.Errorf("%w (emitter %q)", err, e.name)
	}
	if bad := byIdentity(reflect.TypeFor[K]()); bad != nil {
		return fmt.Errorf("%w: emitter %q has key type %v, which holds a %v: keys compare by value once decoded, a %v does not (two equal keys from two tasks would stay two)",
			ErrTypeMismatch, e.name, reflect.TypeFor[K](), bad, bad)
	}
	return validate(e.name, e.sig, e.fn == nil, reflect.TypeFor[In](), reflect.TypeFor[K](), reflect.TypeFor[V]())
}

// byIdentity returns a type inside key type t that Go compares by identity
// or by dynamic type (a pointer, a channel, an interface), or nil: a key
// decoded from a partial is a new value, so only keys compared by value
// meet their equals from other tasks.
func byIdentity(t reflect.Type) reflect.Type {
	switch t.Kind() {
	case reflect.Pointer, reflect.Chan, reflect.Interface, reflect.UnsafePointer:
		return t
	case reflect.Array:
		return byIdentity(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if bad := byIdentity(t.Field(i).Type); bad != nil {
				return bad
			}
		}
	}
	return nil
}

// Runtime is the handle's side in redmap's engine, which the manager and
// worker packages run it by; it seals AnyHandle, since no package outside
// redmap can name its type. nil for a nil handle.
func (e *Emitter[In, K, V]) Runtime() *engine.Runtime {
	if e == nil {
		return nil
	}
	return e.rt
}

var _ AnyHandle = (*Emitter[int, string, int])(nil)
