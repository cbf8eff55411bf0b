package engine

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"sync/atomic"

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
	// Pages encodes ys, a []Out, as pages of about page bytes, one at
	// least (DecodePage reads one); all on one page if page <= 0.
	Pages(ys any, page int) ([][]byte, error)
	// bind returns the step as step k of a chain run on one element: a
	// func(context.Context, In) error that hands each of its outputs to
	// next, a func(context.Context, Out) error, and fails with the first
	// error of either. It notes in st a failure (an error or a panic) of
	// its own.
	bind(k int, st *chainState, next any) any
	// collector is a chain's end that keeps the step's outputs.
	collector() (end chainEnd, result func() any)
	driver
}

// driver runs a chain over a task's elements: the chain's first step,
// which knows its input type (see drive).
type driver interface {
	drive(ctx context.Context, xs any, p Policy, build func() *chainRun) (fails []ChainFail, abort *codec.Failure)
}

// Boundary is an emitter as a pipeline's by-key step runs it: the map side
// ends a task's chain, the reduce side folds a partition and starts the
// next chain on its pairs, a []KV[K, V].
type Boundary interface {
	In() reflect.Type
	Out() reflect.Type // KV[K, V]
	Decode(count int, input []byte) (any, *codec.Failure)
	// CombineChain runs each of xs (the input of steps, or of the emitter
	// if there are none) through steps and the emitter, as one run under p
	// per element, folds the pairs of each key with red, and cuts them
	// into parts partials, as Shuffler.Combine does (nil partials if no
	// element succeeded). A fold that fails fails every element.
	CombineChain(ctx context.Context, steps []Step, xs any, p Policy, red *Runtime, parts int) (partials [][]byte, keys int, fails []ChainFail)
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

// Pages implements Step.
func (mapStep[In, Out]) Pages(ys any, page int) ([][]byte, error) { return pagesOf[Out](ys, page) }

func (s mapStep[In, Out]) bind(k int, st *chainState, next any) any {
	nx := next.(func(context.Context, Out) error)
	return func(ctx context.Context, x In) error {
		defer st.panicked(k)
		y, err := s.fn(ctx, x)
		if err != nil {
			st.failed(k)
			return err
		}
		return nx(ctx, y)
	}
}

func (mapStep[In, Out]) collector() (chainEnd, func() any) { return collect[Out]() }

func (mapStep[In, Out]) drive(ctx context.Context, xs any, p Policy, build func() *chainRun) ([]ChainFail, *codec.Failure) {
	return drive[In](ctx, xs, p, build)
}

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

// Pages implements Step.
func (flatStep[In, Out]) Pages(ys any, page int) ([][]byte, error) { return pagesOf[Out](ys, page) }

func (s flatStep[In, Out]) bind(k int, st *chainState, next any) any {
	nx := next.(func(context.Context, Out) error)
	return func(ctx context.Context, x In) error {
		defer st.panicked(k)
		// An output that fails downstream fails the element: the outputs
		// it emits after it are not run.
		var failed error
		err := s.fn(ctx, x, func(y Out) {
			if failed == nil {
				failed = nx(ctx, y)
			}
		})
		if failed != nil {
			return failed
		}
		if err != nil {
			st.failed(k)
		}
		return err
	}
}

func (flatStep[In, Out]) collector() (chainEnd, func() any) { return collect[Out]() }

func (flatStep[In, Out]) drive(ctx context.Context, xs any, p Policy, build func() *chainRun) ([]ChainFail, *codec.Failure) {
	return drive[In](ctx, xs, p, build)
}

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

// ChainFail is an element of a chain's input that failed: the step it
// failed in (an index into the chain's steps, or len(steps) for the
// Boundary after them), and why. Its Failure's Index (through Through, a
// run of elements that failed alike) is the element's index in the
// chain's input; -1 for a chain that could not run at all.
type ChainFail struct {
	Step int
	codec.Failure
}

// The steps of a chain run fused: for each element of the chain's input,
// one run (under the task's Policy: its timeout, retries and panic
// recovery) calls the first step, which hands each output straight to the
// next step, and so on to the chain's end, which holds what the last step
// gives until the run succeeds. No step's outputs are gathered between
// steps, and a step's output is never boxed: the chain is bound once, its
// seams type-asserted once (bind). An element whose run fails in any step
// fails whole, naming that step; nothing of it reaches the end.

// chainState is what one bound chain notes as it runs: the step that
// failed, the first to note it in a run (a step that fails an output it
// handed on fails with its next step's error, which that step noted). A
// run that succeeds notes nothing. It is atomic because a run abandoned
// past its timeout (Policy.Abandon) goes on on a goroutine of its own.
type chainState struct{ at atomic.Int32 }

// failed notes that step k failed, if no step did before in this run.
func (st *chainState) failed(k int) { st.at.CompareAndSwap(-1, int32(k)) }

// panicked, deferred by step k's run, notes that it panicked if it did
// (its own function, not a step after it: that one noted it first), and
// panics on: the run's recover makes the failure, with the stack, which
// still holds the first panic's frames.
func (st *chainState) panicked(k int) {
	if p := recover(); p != nil {
		st.failed(k)
		panic(p)
	}
}

// reset makes st note the next run's failure.
func (st *chainState) reset() { st.at.Store(-1) }

// chainEnd makes the end of a chain for one bound chain: its sink, a
// func(context.Context, T) error for what the last step gives (or for the
// emitter's input, where the end runs the emitter as step k), and what it
// does once a run failed (drop) or succeeded (keep: a failure there fails
// the task).
type chainEnd func(k int, st *chainState) (sink any, drop func(), keep func() *codec.Failure)

// chainRun is one bound chain.
type chainRun struct {
	head any // func(context.Context, In) error
	st   *chainState
	drop func()
	keep func() *codec.Failure
}

// bindChain binds steps to end.
func bindChain(steps []Step, end chainEnd) *chainRun {
	st := &chainState{}
	sink, drop, keep := end(len(steps), st)
	for k := len(steps) - 1; k >= 0; k-- {
		sink = steps[k].bind(k, st, sink)
	}
	return &chainRun{head: sink, st: st, drop: drop, keep: keep}
}

// collect is the end that keeps the outputs of T of the runs that
// succeed, in the order of their elements.
func collect[T any]() (chainEnd, func() any) {
	var ys []T
	end := func(_ int, _ *chainState) (any, func(), func() *codec.Failure) {
		var out []T
		sink := func(_ context.Context, y T) error {
			out = append(out, y)
			return nil
		}
		drop := func() { out = out[:0] }
		keep := func() *codec.Failure {
			ys = append(ys, out...)
			out = out[:0]
			return nil
		}
		return sink, drop, keep
	}
	return end, func() any {
		if ys == nil {
			ys = []T{}
		}
		return ys
	}
}

// drive runs a chain on each element of xs, a []T, under p: one bound
// chain (build) for all of them, or, where a run may be abandoned and go
// on, one for each element. It returns the elements that failed, and, if
// an end failed to keep a run's outputs, that failure, after which it
// runs no more.
func drive[T any](ctx context.Context, xs any, p Policy, build func() *chainRun) ([]ChainFail, *codec.Failure) {
	in, ok := xs.([]T)
	if !ok {
		f := mismatched(xs, reflect.TypeFor[T]())
		return []ChainFail{{Failure: f}}, nil
	}
	type elem struct {
		x    T
		r    *chainRun
		head func(context.Context, T) error
	}
	fn := func(ctx context.Context, el elem) (struct{}, error) {
		el.r.drop() // what a failed attempt before this one left
		el.r.st.reset()
		return struct{}{}, el.head(ctx, el.x)
	}
	ctx, e := withElements(ctx, p.Seed)
	fresh := p.Timeout > 0 && p.Abandon > 0
	var c *callers[elem, struct{}]
	if fresh {
		c = &callers[elem, struct{}]{ctx: ctx, fn: fn}
		defer c.close()
	}
	var fails []ChainFail
	var r *chainRun
	var head func(context.Context, T) error
	for i := range in {
		if r == nil || fresh {
			r = build()
			head = r.head.(func(context.Context, T) error)
		}
		_, f := runElement(ctx, p, fn, elem{x: in[i], r: r, head: head}, p.Start+i, func() { e.at(p.Start + i) }, c)
		if f == nil {
			if f := r.keep(); f != nil {
				return fails, f
			}
			continue
		}
		step := max(int(r.st.at.Load()), 0) // none noted: a run abandoned before it failed, say
		f.Index = i
		if n := len(fails); n == 0 || fails[n-1].Step != step || !fails[n-1].Extend(f) {
			fails = append(fails, ChainFail{Step: step, Failure: *f})
		}
	}
	return fails, nil
}

// lenOf is the length of xs, a slice; 0 if it is none.
func lenOf(xs any) int {
	if v := reflect.ValueOf(xs); v.Kind() == reflect.Slice {
		return v.Len()
	}
	return 0
}

// RunChain runs each element of xs, the input of steps, through them (see
// drive), and returns the outputs of the last step (a []Out) of the
// elements that succeeded, and those that failed; xs itself if there is
// no step.
func RunChain(ctx context.Context, steps []Step, xs any, p Policy) (ys any, fails []ChainFail) {
	if len(steps) == 0 {
		return xs, nil
	}
	end, result := steps[len(steps)-1].collector()
	fails, _ = steps[0].drive(ctx, xs, p, func() *chainRun { return bindChain(steps, end) })
	return result(), fails
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
