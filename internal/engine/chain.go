package engine

import (
	"context"
	"fmt"
	"math"
	"reflect"

	"github.com/redmap/redmap/codec"
)

// A pipeline (manager.From) runs its steps on the workers. The steps
// between two by-key steps run in one task, one after the other, on
// values in the worker's memory: a step's outputs are the next one's
// inputs with no encoding between them. A by-key step (Boundary) ends a
// task's chain with partials in Redis, as a map/reduce by key's map task
// does; the reduce task of each partition folds them and runs the steps
// after it on the pairs.

// KV is a key with its value: a by-key step's output, the next step's
// input (redmap.KV).
type KV[K comparable, V any] struct {
	Key   K `msgpack:"k"`
	Value V `msgpack:"v"`
}

// Step is a function as a step of a pipeline runs it on a worker.
type Step interface {
	// In and Out are the types of its input and output elements.
	In() reflect.Type
	Out() reflect.Type
	// Decode decodes a frame of count inputs into a []In; an element that
	// does not decode fails with every later one (see decodeInputs).
	Decode(count int, input []byte) (any, *codec.Failure)
	// Apply runs the step on each element of xs, a []In, under p, and
	// returns its outputs (a []Out), the index in xs of the element each
	// came from, and the elements that failed.
	Apply(ctx context.Context, xs any, p Policy) (ys any, from []int, fails []codec.Failure)
	// Pages encodes ys, a []Out, as pages of about page bytes, one at
	// least (DecodePage reads one); all on one page if page <= 0.
	Pages(ys any, page int) ([][]byte, error)
}

// Boundary is an emitter as a pipeline's by-key step runs it: the map side
// ends a task's chain, the reduce side folds a partition and starts the
// next chain on its pairs, a []KV[K, V].
type Boundary interface {
	In() reflect.Type
	Out() reflect.Type // KV[K, V]
	Decode(count int, input []byte) (any, *codec.Failure)
	// CombineValues runs the emitter on each of xs (a []In) under p, folds
	// the pairs of each key with red, and cuts them into parts partials,
	// as Shuffler.Combine does (nil partials if no element succeeded).
	CombineValues(ctx context.Context, xs any, p Policy, red *Runtime, parts int) (partials [][]byte, keys int, fails []codec.Failure)
	// FoldValues folds partials (of one partition) per key with red into a
	// []KV[K, V].
	FoldValues(ctx context.Context, partials [][]byte, red *Runtime) (any, *codec.Failure)
	// KeyOf prints the key of element i of kvs, a []KV[K, V], for an error.
	KeyOf(kvs any, i int) string
	Pages(kvs any, page int) ([][]byte, error)
}

// Step returns the runtime's Step, if it is a function of one input that
// can run in a pipeline (redmap.Func, redmap.FlatMap).
func (rt *Runtime) Step() (Step, bool) {
	s, ok := rt.step.(Step)
	return s, ok
}

// Boundary returns the runtime's Boundary, if it is an emitter's.
func (rt *Runtime) Boundary() (Boundary, bool) {
	b, ok := rt.shuffle.(Boundary)
	return b, ok
}

// Flat returns the runtime of a function that emits zero or more outputs
// of Out for each input of In (redmap.FlatMap). It runs only as a step of
// a pipeline.
func Flat[In, Out any](name, sig string, types []string, fn func(context.Context, In, func(Out)) error) *Runtime {
	return &Runtime{name: name, sig: sig, types: types, step: flatStep[In, Out]{fn: fn},
		run: func(context.Context, any, int, []byte, Policy, *Runtime) ([]byte, []codec.Failure) {
			return nil, []codec.Failure{{Index: -1, Kind: codec.KindUnknownFunc,
				Msg: fmt.Sprintf("%q is a flat map: it runs as a step of a pipeline (manager.From), not a map", name)}}
		}}
}

// mapStep is the Step of a function of In to Out.
type mapStep[In, Out any] struct {
	fn func(context.Context, In) (Out, error)
}

// In implements Step.
func (mapStep[In, Out]) In() reflect.Type { return reflect.TypeFor[In]() }

// Out implements Step.
func (mapStep[In, Out]) Out() reflect.Type { return reflect.TypeFor[Out]() }

// Decode implements Step.
func (mapStep[In, Out]) Decode(count int, input []byte) (any, *codec.Failure) {
	return decodeInputs[In](count, input)
}

// Apply implements Step.
func (s mapStep[In, Out]) Apply(ctx context.Context, xs any, p Policy) (any, []int, []codec.Failure) {
	in, ok := xs.([]In)
	if !ok {
		return nil, nil, []codec.Failure{mismatched(xs, reflect.TypeFor[In]())}
	}
	ys := make([]Out, 0, len(in))
	from := make([]int, 0, len(in))
	fails := runEach(ctx, in, p, s.fn, func(i int, y Out) *codec.Failure {
		ys = append(ys, y)
		from = append(from, i)
		return nil
	})
	return ys, from, fails
}

// Pages implements Step.
func (mapStep[In, Out]) Pages(ys any, page int) ([][]byte, error) { return pagesOf[Out](ys, page) }

// flatStep is the Step of a function that emits outputs of Out.
type flatStep[In, Out any] struct {
	fn func(context.Context, In, func(Out)) error
}

// In implements Step.
func (flatStep[In, Out]) In() reflect.Type { return reflect.TypeFor[In]() }

// Out implements Step.
func (flatStep[In, Out]) Out() reflect.Type { return reflect.TypeFor[Out]() }

// Decode implements Step.
func (flatStep[In, Out]) Decode(count int, input []byte) (any, *codec.Failure) {
	return decodeInputs[In](count, input)
}

// Apply implements Step.
func (s flatStep[In, Out]) Apply(ctx context.Context, xs any, p Policy) (any, []int, []codec.Failure) {
	in, ok := xs.([]In)
	if !ok {
		return nil, nil, []codec.Failure{mismatched(xs, reflect.TypeFor[In]())}
	}
	var ys []Out
	var from []int
	// An element's outputs count only if its run succeeds; they are kept
	// apart until then, in a buffer reused unless a run may be abandoned
	// (Policy.Abandon), which may emit on after it was given up.
	var buf []Out
	reuse := p.Timeout <= 0 || p.Abandon <= 0
	run := func(ctx context.Context, x In) ([]Out, error) {
		var out []Out
		if reuse {
			out = buf[:0]
		}
		err := s.fn(ctx, x, func(y Out) { out = append(out, y) })
		if reuse {
			buf = out
		}
		return out, err
	}
	fails := runEach(ctx, in, p, run, func(i int, out []Out) *codec.Failure {
		ys = append(ys, out...)
		for range out {
			from = append(from, i)
		}
		return nil
	})
	return ys, from, fails
}

// Pages implements Step.
func (flatStep[In, Out]) Pages(ys any, page int) ([][]byte, error) { return pagesOf[Out](ys, page) }

// mismatched is the failure of a step handed elements of another type than
// its input's: a chain the worker's steps do not fit (CheckChain refuses
// it first).
func mismatched(xs any, want reflect.Type) codec.Failure {
	return codec.Failure{Index: -1, Kind: codec.KindTypeMismatch, Msg: fmt.Sprintf("a step of input %v was handed %T", want, xs)}
}

// CheckChain reports the first step of steps whose input type is not the
// output type of what comes before it (in, the type of the chain's input),
// and returns the chain's output type.
func CheckChain(in reflect.Type, steps []Step, names []string) (reflect.Type, error) {
	for i, s := range steps {
		if s.In() != in {
			return nil, fmt.Errorf("step %q takes %v, but what comes before it gives %v", names[i], s.In(), in)
		}
		in = s.Out()
	}
	return in, nil
}

// ChainFail is an element that failed in a chain: the step it failed in
// (an index into the chain's steps, or len(steps) for the Boundary after
// them), the index in the chain's input of the element it came from, and
// why.
type ChainFail struct {
	Step   int
	Origin int
	codec.Failure
}

// RunChain runs xs, the chain's input, through steps in turn, and returns
// the last one's outputs, the index in xs of the element each came from,
// and every element that failed on the way, which the later steps do not
// see.
func RunChain(ctx context.Context, steps []Step, xs any, p Policy) (ys any, from []int, fails []ChainFail) {
	// origin[i] is the index in xs of element i of the current step's input.
	var origin []int
	ys = xs
	for k, s := range steps {
		out, f, fs := s.Apply(ctx, ys, p)
		for _, fl := range fs {
			fails = append(fails, Trace(k, fl, origin)...)
		}
		if out == nil {
			return nil, nil, fails // the whole step failed (a mismatch)
		}
		if origin != nil {
			for i, j := range f {
				f[i] = origin[j]
			}
		}
		ys, origin = out, f
	}
	if origin == nil {
		origin = identity(reflect.ValueOf(xs).Len())
	}
	return ys, origin, fails
}

// Trace maps failure f of step k, indexed into its input, to the chain's
// input through origin (nil: the step's input is the chain's), a run
// split where its elements come from elements apart.
func Trace(k int, f codec.Failure, origin []int) []ChainFail {
	if f.Index < 0 || origin == nil {
		return []ChainFail{{Step: k, Origin: f.Index, Failure: f}}
	}
	var out []ChainFail
	for i := f.Index; i <= f.Last(); i++ {
		g := f
		g.Index, g.Through = i, 0
		o := origin[i]
		if n := len(out); n > 0 && out[n-1].Origin == o {
			continue // two outputs of one element failed alike: it failed
		}
		out = append(out, ChainFail{Step: k, Origin: o, Failure: g})
	}
	return out
}

func identity(n int) []int {
	ix := make([]int, n)
	for i := range ix {
		ix[i] = i
	}
	return ix
}

// pageFrame is a page of a pipeline's outputs: their count and their
// frame (codec.EncodeElements).
type pageFrame struct {
	N int    `msgpack:"n"`
	F []byte `msgpack:"f"`
}

// pagesOf encodes ys, a []T, as pages of about page bytes each, one at
// least: it sizes each page from the bytes an element took on the one
// before.
func pagesOf[T any](ys any, page int) ([][]byte, error) {
	all, ok := ys.([]T)
	if !ok {
		return nil, fmt.Errorf("pages of %v: handed %T", reflect.TypeFor[T](), ys)
	}
	encode := func(part []T) ([]byte, error) {
		f, err := codec.EncodeElements(part, 0)
		if err != nil {
			return nil, err
		}
		return codec.EncodeValue(&pageFrame{N: len(part), F: f})
	}
	if len(all) == 0 || page <= 0 {
		b, err := encode(all)
		return [][]byte{b}, err
	}
	var pages [][]byte
	per := 64 // elements on the first page, to measure them
	for len(all) > 0 {
		n := min(per, len(all))
		b, err := encode(all[:n])
		if err != nil {
			return nil, err
		}
		pages = append(pages, b)
		perElem := max(float64(len(b))/float64(n), 1)
		per = int(min(max(float64(page)/perElem, 1), math.MaxInt32))
		all = all[n:]
	}
	return pages, nil
}

// DecodePage decodes a page Pages wrote, with codec's checks.
func DecodePage[T any](b []byte) ([]T, error) {
	f, err := codec.DecodeValue[pageFrame](b)
	if err != nil {
		return nil, err
	}
	// Every element takes a byte at least: a count above the bytes is a
	// lie, refused before anything is allocated for it.
	if f.N < 0 || f.N > len(f.F) {
		return nil, fmt.Errorf("%w: page: %d elements in %d bytes", codec.ErrCorrupt, f.N, len(f.F))
	}
	ys := make([]T, f.N)
	if err := codec.DecodeElements(f.F, ys); err != nil {
		return nil, err
	}
	return ys, nil
}
