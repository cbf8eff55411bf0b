package redmap

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/redmap/redmap/internal/engine"
)

// HandleWith is a function that takes, besides each element, one constant
// value of type C shared by the whole batch: a model, a lookup table. The
// manager stores the constant once in the object cache (manager.MapWith);
// each worker process fetches and decodes it once. Build one with FuncWith.
type HandleWith[C, In, Out any] struct {
	rt    *engine.Runtime // what runs it on a worker, and folds it on a manager
	name  string
	sig   string
	types []string
	fn    func(context.Context, C, In) (Out, error)
	opts  handleOptions
}

// FuncWith returns a handle for fn under name, with options opts (a
// Limit); see Func.
func FuncWith[C, In, Out any](name string, fn func(context.Context, C, In) (Out, error), opts ...Option) *HandleWith[C, In, Out] {
	sig, types := signature(fmt.Sprintf("func(%v, %v) %v", reflect.TypeFor[C](), reflect.TypeFor[In](), reflect.TypeFor[Out]()),
		map[string]reflect.Type{"C": reflect.TypeFor[C](), "In": reflect.TypeFor[In](), "Out": reflect.TypeFor[Out]()})
	h := &HandleWith[C, In, Out]{name: name, sig: sig, types: types, fn: fn, opts: options(opts)}
	h.rt = engine.MapWith(name, sig, types, fn)
	return h
}

// Name returns the name the function is registered under.
func (h *HandleWith[C, In, Out]) Name() string { return h.name }

// Signature returns the function's types as "func(C, In) Out #<fingerprint>";
// see Handle.Signature.
func (h *HandleWith[C, In, Out]) Signature() string { return h.sig }

// Validate reports an empty name, a nil function, or a type that cannot
// travel (see Handle.Validate).
func (h *HandleWith[C, In, Out]) Validate() error {
	if h == nil {
		return errors.New("redmap: nil handle")
	}
	if err := h.opts.limit.Validate(); err != nil {
		return fmt.Errorf("%w (handle %q)", err, h.name)
	}
	return validate(h.name, h.sig, h.fn == nil, reflect.TypeFor[C](), reflect.TypeFor[In](), reflect.TypeFor[Out]())
}

// Limit returns the fleet-wide limit declared with the function; see
// Handle.Limit.
func (h *HandleWith[C, In, Out]) Limit() Limit { return h.opts.limit }

// Runtime is the handle's side in redmap's engine, which the manager and
// worker packages run it by; it seals AnyHandle, since no package outside
// redmap can name its type. nil for a nil handle.
func (h *HandleWith[C, In, Out]) Runtime() *engine.Runtime {
	if h == nil {
		return nil
	}
	return h.rt
}
