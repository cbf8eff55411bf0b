package redmap

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/engine"
)

// HandleWith is a function that takes, besides each element, one constant
// value of type C shared by the whole batch: a model, a lookup table. The
// manager stores the constant once in the object cache (manager.MapWith);
// each worker process fetches and decodes it once. Build one with FuncWith.
type HandleWith[C, In, Out any] struct {
	name  string
	sig   string
	types []string
	fn    func(context.Context, C, In) (Out, error)
}

// FuncWith returns a handle for fn under name; see Func.
func FuncWith[C, In, Out any](name string, fn func(context.Context, C, In) (Out, error)) *HandleWith[C, In, Out] {
	sig, types := signature(fmt.Sprintf("func(%v, %v) %v", reflect.TypeFor[C](), reflect.TypeFor[In](), reflect.TypeFor[Out]()),
		map[string]reflect.Type{"C": reflect.TypeFor[C](), "In": reflect.TypeFor[In](), "Out": reflect.TypeFor[Out]()})
	h := &HandleWith[C, In, Out]{name: name, sig: sig, types: types, fn: fn}
	engine.Register(h, withRuntime[C, In, Out]{h})
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
	return validate(h.name, h.sig, h.fn == nil, reflect.TypeFor[C](), reflect.TypeFor[In](), reflect.TypeFor[Out]())
}

func (h *HandleWith[C, In, Out]) handle() {}

// withRuntime is the worker's side of a HandleWith (see engine.Runtime).
type withRuntime[C, In, Out any] struct{ *HandleWith[C, In, Out] }

// Types returns the structure the signature fingerprints.
func (h withRuntime[C, In, Out]) Types() []string { return h.types }

// DecodeConstant decodes a batch's constant data as a C.
func (h withRuntime[C, In, Out]) DecodeConstant(b []byte) (any, error) {
	c, err := codec.DecodeValue[C](b)
	if err != nil {
		return nil, fmt.Errorf("redmap: constant as %v: %w", reflect.TypeFor[C](), err)
	}
	return c, nil
}

// Run runs the function over a frame of count inputs with constant, which
// must be a C (from DecodeConstant).
func (h withRuntime[C, In, Out]) Run(ctx context.Context, constant any, count int, input []byte, p engine.Policy) ([]byte, []codec.Failure) {
	fn, fail := h.bind(constant)
	if fail != nil {
		return nil, fail
	}
	return engine.Run(ctx, count, input, p, fn)
}

// Reduce is Run folding the outputs with r (see engine.Runtime).
func (h withRuntime[C, In, Out]) Reduce(ctx context.Context, constant any, count int, input []byte, p engine.Policy, r engine.Runtime) ([]byte, []codec.Failure) {
	fn, fail := h.bind(constant)
	if fail != nil {
		return nil, fail
	}
	return engine.Reduce(ctx, count, input, p, fn, r)
}

// bind returns the function with constant bound, or the failure of the whole
// task if constant is not a C.
func (h withRuntime[C, In, Out]) bind(constant any) (func(context.Context, In) (Out, error), []codec.Failure) {
	c, ok := constant.(C)
	if !ok {
		return nil, []codec.Failure{{Index: -1, Kind: codec.KindTypeMismatch,
			Msg: fmt.Sprintf("constant is %T, want %v", constant, reflect.TypeFor[C]())}}
	}
	return func(ctx context.Context, x In) (Out, error) { return h.fn(ctx, c, x) }, nil
}
