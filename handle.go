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
	"slices"

	"github.com/redmap/redmap/internal/engine"
	"github.com/redmap/redmap/internal/keys"
)

// Handle is a function registered under a name. The manager uses it to submit
// inputs of type In and decode outputs of type Out; the worker uses it to run
// the function. Build one with Func, once, in a package both sides import.
type Handle[In, Out any] struct {
	rt    *engine.Runtime // what runs it on a worker, and folds it on a manager
	name  string
	sig   string
	types []string // the structure of In and Out, one line per leaf
	fn    func(context.Context, In) (Out, error)
	opts  handleOptions
}

// Func returns a handle for fn under name, with options opts (a Limit). It
// does not validate: an empty name, a nil fn or a bad limit is reported by
// worker.Register and by manager.Map, as an error.
func Func[In, Out any](name string, fn func(context.Context, In) (Out, error), opts ...Option) *Handle[In, Out] {
	sig, types := signature(fmt.Sprintf("func(%v) %v", reflect.TypeFor[In](), reflect.TypeFor[Out]()),
		map[string]reflect.Type{"In": reflect.TypeFor[In](), "Out": reflect.TypeFor[Out]()})
	h := &Handle[In, Out]{name: name, sig: sig, types: types, fn: fn, opts: options(opts)}
	h.rt = engine.Map(name, sig, types, fn)
	return h
}

// Name returns the name the function is registered under.
func (h *Handle[In, Out]) Name() string { return h.name }

// Signature returns the function's types as "func(In) Out #<fingerprint>",
// the fingerprint hashing their structure: field names, tags and types, at
// every depth. A worker refuses a task whose handle had another signature
// (ErrTypeMismatch, naming the first difference) instead of decoding its
// inputs into the wrong types.
func (h *Handle[In, Out]) Signature() string { return h.sig }

// Limit returns the fleet-wide limit declared with the function (the zero
// Limit if none). What an operator set in Redis wins over it.
func (h *Handle[In, Out]) Limit() Limit { return h.opts.limit }

// Validate reports an empty name, a nil function, a limit that cannot be
// enforced, or an input or output type that cannot travel: an interface
// with methods, which MessagePack cannot decode into (it has no way to know
// the concrete type).
func (h *Handle[In, Out]) Validate() error {
	if h == nil {
		return errors.New("redmap: nil handle")
	}
	if err := h.opts.limit.Validate(); err != nil {
		return fmt.Errorf("%w (handle %q)", err, h.name)
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
	case keys.CheckFunc(name) != nil:
		return fmt.Errorf("redmap: handle: %w", keys.CheckFunc(name))
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

// Runtime is the handle's side in redmap's engine, which the manager and
// worker packages run it by; it seals AnyHandle, since no package outside
// redmap can name its type. nil for a nil handle.
func (h *Handle[In, Out]) Runtime() *engine.Runtime {
	if h == nil {
		return nil
	}
	return h.rt
}

// AnyHandle is any handle, *Handle or *HandleWith, as a worker registers it
// (worker.Worker.Register, worker.Main). Only this package's handles implement
// it.
type AnyHandle interface {
	// Name returns the name the function is registered under.
	Name() string
	// Signature returns the function's types and their fingerprint.
	Signature() string
	// Validate reports a handle that cannot be registered or called.
	Validate() error
	// Limit returns the fleet-wide limit declared with the function (the
	// zero Limit if none, and for a reducer).
	Limit() Limit
	// Runtime is the handle's side in redmap's engine, made with the
	// handle: what the worker runs and the manager folds by. Its type is
	// internal, which seals the interface: only this package's handles
	// implement it.
	Runtime() *engine.Runtime
}

var (
	_ AnyHandle = (*Handle[int, int])(nil)
	_ AnyHandle = (*HandleWith[int, int, int])(nil)
)
