package manager

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/engine"
	"github.com/redmap/redmap/internal/failure"
)

// outputs is what a batch gives back: its outputs in input order (a
// slice's), the results of a stream not yet read, or the fold of the
// outputs (MapReduce); and its failed elements. Its batch's mu guards it.
type outputs[Out any] struct {
	fn     string // the function, for the elements' errors
	stream bool   // results are read once, as they come (ready), not kept in out

	out    []Out                // the outputs, in input order; nil if red folds them or for a stream
	ready  []Result[Out]        // a stream's results not yet read, in completion order
	red    *redmap.Reducer[Out] // folds the outputs (MapReduce), or nil
	fold   engine.Folder[Out]   // with red: its fold, in the manager
	acc    Out                  // with red: the fold of the partials so far
	folded bool                 // with red: acc holds a fold
	errs   map[int]*redmap.TaskError
	order  []int // indexes of the chunks over, in completion order (a slice's)
	// names says Out names elements that failed in it (stepFailer): a
	// pipeline task's output. Those are stepErrs, which count among the
	// batch's failed elements as errs do, but for keys (keyFails of
	// them): a reduce stage's batch counts its partitions, and the keys
	// that failed after its fold apart (wire.BatchRecord.FailedKeys). The
	// pipeline, not batchError, returns them to its caller.
	names    bool
	stepErrs []*redmap.TaskError
	keyFails int
}

// stepFailer is an output that names elements of a pipeline that failed
// in the task that gave it (wire.MapSummary, wire.ChainOut,
// wire.ReduceOutput): by their index in the pipeline's input, or past a
// by-key step by their key.
type stepFailer interface{ StepFails() []wire.StepFail }

// namesFailures reports whether an Out is a stepFailer.
func namesFailures[Out any]() bool {
	var zero Out
	_, ok := any(zero).(stepFailer)
	return ok
}

// failed is how many of the batch's elements failed (a reduce stage's:
// partitions whose reduce failed), its failed keys left out.
func (o *outputs[Out]) failed() int { return len(o.errs) + len(o.stepErrs) - o.keyFails }

// failures is how many failures the batch has: failed elements, and a
// reduce stage's failed keys.
func (o *outputs[Out]) failures() int { return len(o.errs) + len(o.stepErrs) }

// failSteps records the elements that v, an output or partial of a result
// r, names failed (see stepFailer).
func (o *outputs[Out]) failSteps(v Out, r *codec.Result) {
	if !o.names {
		return
	}
	for _, f := range any(v).(stepFailer).StepFails() {
		cause := failure.Cause(codec.Failure{Kind: codec.Kind(f.Kind), Msg: f.Msg})
		last := f.Index
		if f.Index >= 0 && f.Through > f.Index {
			last = f.Through // a run
		}
		for i := f.Index; i <= last; i++ {
			o.stepErrs = append(o.stepErrs, &redmap.TaskError{Index: i, Key: f.Key, Stage: f.Stage, Attempt: r.Attempt, Err: cause, Stack: f.Stack, Worker: r.Worker})
			if i < 0 {
				o.keyFails++ // a key, past a by-key step: no element of the batch
			}
		}
	}
}

// folderOf returns the fold of reducer red (nil if red is).
func folderOf[Out any](red *redmap.Reducer[Out]) engine.Folder[Out] {
	if red == nil {
		return nil
	}
	f, _ := engine.FolderOf[Out](red.Runtime()) // a Reducer[Out]'s runtime is one
	return f
}

// keep makes chunk ci's outcome readable: a stream's results join ready
// (vals its outputs, nil where all failed), a slice's chunk joins the
// completion order; a fold has nothing per element to read.
func (o *outputs[Out]) keep(ci int, c chunk, vals []Out) {
	switch {
	case o.red != nil:
	case o.stream:
		for i := c.start; i < c.start+c.count; i++ {
			r := Result[Out]{Index: i}
			if e := o.errs[i]; e != nil {
				r.Err = e
			} else if vals != nil {
				r.Value = vals[i-c.start]
			}
			o.ready = append(o.ready, r)
		}
	default:
		o.order = append(o.order, ci)
	}
}

// result returns element i's result, of a slice's batch.
func (o *outputs[Out]) result(i int) Result[Out] {
	r := Result[Out]{Index: i, Value: o.out[i]}
	if e := o.errs[i]; e != nil {
		r.Err = e
	}
	return r
}

// batchError returns the failed elements of a batch of n elements as a
// *redmap.BatchError, or nil if none failed; cut says why its feeder
// stopped reading a sequence early, if it did.
func (o *outputs[Out]) batchError(n int, cut error) error {
	var err error
	if len(o.errs) > 0 {
		be := &redmap.BatchError{Total: n, Failed: make([]*redmap.TaskError, 0, len(o.errs))}
		for _, e := range o.errs {
			be.Failed = append(be.Failed, e)
		}
		sort.Slice(be.Failed, func(i, j int) bool { return be.Failed[i].Index < be.Failed[j].Index })
		err = be
	}
	if cut != nil {
		// A streamed batch whose feeder gave up: what it read has its
		// outcome, and what it did not read is not part of the batch.
		err = errors.Join(err, fmt.Errorf("manager: reading the input stopped after element %d: %w", n, cut))
	}
	return err
}

// failElement records element i's failure, on the manager's side or by a
// worker of an earlier release.
func (o *outputs[Out]) failElement(i, attempt int, cause error, stack string) {
	o.failElementBy(i, attempt, cause, stack, "")
}

// failElementBy records element i's failure in an attempt of worker wid.
func (o *outputs[Out]) failElementBy(i, attempt int, cause error, stack, wid string) {
	if o.errs == nil {
		o.errs = make(map[int]*redmap.TaskError)
	}
	if o.out != nil {
		var zero Out
		o.out[i] = zero
	}
	o.errs[i] = &redmap.TaskError{Index: i, Func: o.fn, Attempt: attempt, Err: cause, Stack: stack, Worker: wid}
}

// failElements fails every element of c.
func (o *outputs[Out]) failElements(c chunk, attempt int, cause error) {
	for i := c.start; i < c.start+c.count; i++ {
		o.failElement(i, attempt, cause, "")
	}
}

// record records the result r of chunk c, whose outputs vals were decoded
// (decodeErr if they could not all be), and returns them for a stream (nil
// where all failed); a slice's go to out.
func (o *outputs[Out]) record(c chunk, r *codec.Result, vals []Out, decodeErr error) []Out {
	for _, f := range r.Fails {
		if f.Index == -1 {
			for i := c.start; i < c.start+c.count; i++ {
				o.failElementBy(i, r.Attempt, failure.Cause(f), "", r.Worker)
			}
			return nil
		}
	}
	if o.red != nil {
		o.foldPartial(c, r)
		return nil
	}
	if vals == nil || len(vals) != c.count { // cannot happen: chunks do not change
		o.failElements(c, r.Attempt, fmt.Errorf("%w: result of a chunk it did not expect", redmap.ErrDecode))
		return nil
	}
	if !o.stream {
		copy(o.out[c.start:c.start+c.count], vals)
	}
	for _, v := range vals {
		o.failSteps(v, r)
	}
	if decodeErr != nil {
		bad := 0
		var ee *codec.ElementError
		if errors.As(decodeErr, &ee) {
			bad = ee.Index
		}
		// Past an undecodable output the frame cannot be read further.
		for i := bad; i < c.count; i++ {
			o.failElement(c.start+i, r.Attempt, fmt.Errorf("%w: output as %v: %v", redmap.ErrDecode, reflect.TypeFor[Out](), decodeErr), "")
		}
	}
	for _, f := range r.Fails {
		cause := failure.Cause(f)
		for i := f.Index; i <= min(f.Last(), c.count-1); i++ {
			o.failElementBy(c.start+i, r.Attempt, cause, f.Stack, r.Worker)
		}
	}
	return vals
}

// foldPartial records the result of chunk c of a batch red folds: its failed
// elements, and its partial (the fold of the others), folded into acc. A
// partial that cannot be decoded or folded in fails the chunk's elements it
// stands for.
func (o *outputs[Out]) foldPartial(c chunk, r *codec.Result) {
	failed := make(map[int]bool, len(r.Fails))
	for _, f := range r.Fails {
		cause := failure.Cause(f)
		for i := max(f.Index, 0); i <= min(f.Last(), c.count-1); i++ {
			failed[i] = true
			o.failElementBy(c.start+i, r.Attempt, cause, f.Stack, r.Worker)
		}
	}
	if len(failed) == c.count {
		return // no partial: every element failed
	}
	var partial [1]Out
	err := codec.DecodeElements(r.Values, partial[:])
	if err == nil {
		o.failSteps(partial[0], r)
	}
	if err != nil {
		err = fmt.Errorf("%w: partial as %v: %v", redmap.ErrDecode, reflect.TypeFor[Out](), err)
	} else if !o.folded {
		o.acc, o.folded = partial[0], true
	} else if acc, ferr := o.fold.Fold(context.Background(), o.acc, partial[0]); ferr != nil {
		err = ferr
		if !errors.Is(err, redmap.ErrReduce) {
			err = fmt.Errorf("%w: folding partials in the manager: %w", redmap.ErrReduce, ferr)
		}
	} else {
		o.acc = acc
	}
	if err != nil {
		for i := range c.count {
			if !failed[i] {
				o.failElement(c.start+i, r.Attempt, err, "")
			}
		}
	}
}

// wholeFailure reports whether r fails every element of its task.
func wholeFailure(r *codec.Result) bool {
	for _, f := range r.Fails {
		if f.Index == -1 {
			return true
		}
	}
	return false
}
