package manager

import (
	"context"
	"iter"

	"github.com/redmap/redmap"
)

// MapReduce runs fn on every element of xs on the queue's workers and folds
// the outputs with red, a reducer the workers register too: each worker folds
// the outputs of each chunk it runs into one partial, only partials travel
// back through Redis, and the manager folds them as they arrive. The manager
// holds no output, only the fold.
//
// red must be associative and commutative (see redmap.Reducer): the order in
// which outputs and partials are folded is unspecified. Each partial is
// counted exactly once, whatever workers die, stall or run a chunk again:
// the same guarantees as Map's, for partials.
//
// If an element's function fails, or red fails to fold its output in
// (ErrReduce), the element is left out of the fold and MapReduce returns the
// fold of the others with a *redmap.BatchError naming each failed index; with
// no failure it returns the exact fold. An empty xs folds to the zero value.
// If ctx ends first it returns ctx.Err().
//
// Cost: as Map's to submit; back, one result of one value per chunk instead
// of one output per element (see README, "Map/reduce").
func MapReduce[In, Out any](ctx context.Context, m *Manager, fn *redmap.Handle[In, Out], red *redmap.Reducer[Out], xs []In, opts ...CallOption) (Out, error) {
	var zero Out
	if err := validReduce(fn, red); err != nil {
		return zero, err
	}
	m, co, err := on(ctx, m, opts)
	if err != nil {
		return zero, err
	}
	b, err := submit(ctx, m, spec{name: fn.Name(), sig: fn.Signature(), types: types(fn), limit: fn.Limit(), idempotent: idempotentOf(fn)}, elements[In]{xs: xs}, co, red)
	if err != nil {
		return zero, err
	}
	return b.reduced(ctx)
}

// MapReduceWith is MapReduce for a function that takes constant data; see
// MapWith for how the constant is stored and shared.
func MapReduceWith[C, In, Out any](ctx context.Context, m *Manager, fn *redmap.HandleWith[C, In, Out], constant C, red *redmap.Reducer[Out], xs []In, opts ...CallOption) (Out, error) {
	var zero Out
	if err := validReduce(fn, red); err != nil {
		return zero, err
	}
	m, co, err := on(ctx, m, opts)
	if err != nil {
		return zero, err
	}
	sp, err := holdConstant(ctx, m, fn, constant)
	if err != nil {
		m.failed(err)
		return zero, err
	}
	b, err := submit(ctx, m, sp, elements[In]{xs: xs}, co, red)
	if err != nil {
		m.releaseUnused(sp)
		return zero, err
	}
	return b.reduced(ctx)
}

// validReduce reports an invalid handle or reducer (a nil one included).
func validReduce[Out any](fn redmap.AnyHandle, red *redmap.Reducer[Out]) error {
	if err := fn.Validate(); err != nil {
		return err
	}
	return red.Validate()
}

// MapReduceSeq is MapReduce over a sequence of any length, read as the
// window has room (see SubmitSeq); only the fold is kept.
func MapReduceSeq[In, Out any](ctx context.Context, m *Manager, fn *redmap.Handle[In, Out], red *redmap.Reducer[Out], seq iter.Seq[In], opts ...CallOption) (Out, error) {
	var zero Out
	if err := validReduce(fn, red); err != nil {
		return zero, err
	}
	m, co, err := on(ctx, m, opts)
	if err != nil {
		return zero, err
	}
	b, err := submit(ctx, m, spec{name: fn.Name(), sig: fn.Signature(), types: types(fn), limit: fn.Limit(), idempotent: idempotentOf(fn)}, elements[In]{seq: seq}, co, red)
	if err != nil {
		return zero, err
	}
	return b.reduced(ctx)
}
