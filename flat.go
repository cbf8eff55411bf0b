package redmap

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/redmap/redmap/internal/engine"
)

// KV is a key with its value: what a by-key step of a pipeline
// (manager.ByKey) hands the step after it, one per key.
type KV[K comparable, V any] = engine.KV[K, V]

// FlatHandle is a function that emits zero or more outputs for each
// element: a flat map, or a filter (emit the element, or not). It runs as
// a step of a pipeline (manager.FlatThen). Build one with FlatMap, once,
// in a package both sides import, and register it on the workers
// (worker.Register).
//
// fn must call emit only before it returns. An element whose fn fails (an
// error, a panic, a timeout) contributes none of its outputs, whatever it
// emitted before failing.
type FlatHandle[In, Out any] struct {
	rt    *engine.Runtime
	name  string
	sig   string
	types []string
	fn    func(context.Context, In, func(Out)) error
	opts  handleOptions
}

// FlatMap returns a flat map for fn under name, with options opts (a
// Limit, Idempotent); see FlatHandle. Like Func, it does not validate.
func FlatMap[In, Out any](name string, fn func(ctx context.Context, x In, emit func(Out)) error, opts ...Option) *FlatHandle[In, Out] {
	in, out := reflect.TypeFor[In](), reflect.TypeFor[Out]()
	sig, types := signature(fmt.Sprintf("flat(%v) %v", in, out), map[string]reflect.Type{"In": in, "Out": out})
	h := &FlatHandle[In, Out]{name: name, sig: sig, types: types, fn: fn, opts: options(opts)}
	h.rt = engine.Flat(name, sig, types, fn)
	return h
}

// Name returns the name the flat map is registered under.
func (h *FlatHandle[In, Out]) Name() string { return h.name }

// Signature returns the flat map's types as "flat(In) Out #<fingerprint>";
// see Handle.Signature.
func (h *FlatHandle[In, Out]) Signature() string { return h.sig }

// Limit returns the fleet-wide limit declared with the flat map; see
// Handle.Limit. A pipeline enforces the limit of the step its tasks are
// named after (see manager.From).
func (h *FlatHandle[In, Out]) Limit() Limit { return h.opts.limit }

// Idempotent reports whether the flat map was declared Idempotent; see
// Handle.Idempotent.
func (h *FlatHandle[In, Out]) Idempotent() bool { return h.opts.idempotent }

// Validate reports an empty name, a nil function, a limit that cannot be
// enforced, or a type that cannot travel (see Handle.Validate).
func (h *FlatHandle[In, Out]) Validate() error {
	if h == nil {
		return errors.New("redmap: nil flat map")
	}
	if err := h.opts.limit.Validate(); err != nil {
		return fmt.Errorf("%w (flat map %q)", err, h.name)
	}
	return validate(h.name, h.sig, h.fn == nil, reflect.TypeFor[In](), reflect.TypeFor[Out]())
}

// Runtime is the flat map's side in redmap's engine; see Handle.Runtime.
func (h *FlatHandle[In, Out]) Runtime() *engine.Runtime {
	if h == nil {
		return nil
	}
	return h.rt
}

var _ AnyHandle = (*FlatHandle[int, int])(nil)
