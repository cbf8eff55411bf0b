package worker

import (
	"context"
	"fmt"
	"reflect"
	"slices"

	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/engine"
)

// The tasks of a pipeline (manager.From; wire.Pipe): a map/reduce by key's
// tasks that run the pipeline's narrow steps besides their phase, one
// after the other on values in this process's memory. A map task runs its
// steps on its elements and the by-key step's emitter on their outputs; a
// reduce task folds its partition and runs its steps on the pairs, and then
// the next by-key step's emitter, or stores their outputs as the
// partition's output. A pipeline's element failures travel in the task's
// summary (wire.StepFail, naming the step and, past a by-key step, the
// key), not as the task's failures, which are left for a task that fails
// whole; the worker counts them as it does those (Worker.execute), and
// the manager as its batch's failed elements.

// pipeTask runs task c of a pipeline.
func (w *Worker) pipeTask(ctx context.Context, c *resolved, sh *wire.Shuffle, t wire.Taken) ([]byte, []codec.Failure) {
	steps, names, fail := w.steps(ctx, sh.Pipe.Steps)
	if fail != nil {
		return nil, []codec.Failure{*fail}
	}
	switch sh.Phase {
	case wire.PhaseChain:
		return w.chainTask(ctx, c, sh, steps, names)
	case wire.PhaseMap:
		return w.pipeMap(ctx, c, sh, steps, names, t)
	}
	return w.pipeReduce(ctx, c, sh, steps, names)
}

// steps resolves a pipe's steps: each registered, with the manager's
// signature, and a function of one input.
func (w *Worker) steps(ctx context.Context, ss []wire.Step) ([]engine.Step, []string, *codec.Failure) {
	steps := make([]engine.Step, len(ss))
	names := make([]string, len(ss))
	for i, s := range ss {
		rt, f := w.runtime(ctx, "function", s.Name, s.Sig)
		if f != nil {
			return nil, nil, f
		}
		st, ok := rt.Step()
		if !ok {
			return nil, nil, wholeFailure(codec.KindTypeMismatch, "%q cannot be a step of a pipeline: it is not a function of one input (redmap.Func) or a flat map (redmap.FlatMap)", s.Name)
		}
		steps[i], names[i] = st, s.Name
	}
	return steps, names, nil
}

// chainFits checks that steps take in and that their output is out (nil:
// any), or says how they do not.
func chainFits(in reflect.Type, steps []engine.Step, names []string, out reflect.Type, outName string) *codec.Failure {
	got, err := engine.CheckChain(in, steps, names)
	if err == nil && out != nil && got != out {
		err = fmt.Errorf("worker: %q takes %v, but the step before it gives %v", outName, out, got)
	}
	if err != nil {
		return wholeFailure(codec.KindTypeMismatch, "this worker's steps do not chain: %v", err)
	}
	return nil
}

// chainTask runs a task of a pipeline with no by-key step: its steps on
// its elements, returning their outputs as one page (wire.ChainOut).
func (w *Worker) chainTask(ctx context.Context, c *resolved, sh *wire.Shuffle, steps []engine.Step, names []string) ([]byte, []codec.Failure) {
	if f := chainFits(steps[0].In(), steps, names, nil, ""); f != nil {
		return nil, []codec.Failure{*f}
	}
	base := sh.Base + c.task.Start
	xs, decodeFail := steps[0].Decode(c.task.Count, c.task.Input)
	ys, cf := engine.RunChain(ctx, steps, xs, c.policy)
	fails, whole := headFails(cf, sh.Pipe, decodeFail, base)
	if whole != nil {
		return nil, []codec.Failure{*whole}
	}
	pages, err := steps[len(steps)-1].Pages(ys, 0)
	if err != nil {
		return nil, whole1(codec.KindEncode, "outputs of %q: %v", names[len(names)-1], err)
	}
	c.noteSteps(sh.Pipe, fails)
	return oneOutput(&wire.ChainOut{Start: base, N: reflect.ValueOf(ys).Len(), Page: pages[0], Fails: fails})
}

// pipeMap runs a map task of a pipeline: its steps on its elements, then
// the by-key step's emitter, whose partials it stores as a map/reduce by
// key's map task does (combine).
func (w *Worker) pipeMap(ctx context.Context, c *resolved, sh *wire.Shuffle, steps []engine.Step, names []string, t wire.Taken) ([]byte, []codec.Failure) {
	b, ok := c.h.Boundary()
	if !ok {
		return nil, whole1(codec.KindTypeMismatch, "%q is not an emitter (redmap.Emit): it cannot be a by-key step", c.task.Func)
	}
	in, first := b.In(), engine.Step(nil)
	if len(steps) > 0 {
		in, first = steps[0].In(), steps[0]
	}
	if f := chainFits(in, steps, names, b.In(), c.task.Func); f != nil {
		return nil, []codec.Failure{*f}
	}
	var xs any
	var decodeFail *codec.Failure
	if first != nil {
		xs, decodeFail = first.Decode(c.task.Count, c.task.Input)
	} else {
		xs, decodeFail = b.Decode(c.task.Count, c.task.Input)
	}
	partials, keys, cf := b.CombineChain(ctx, steps, xs, c.policy, c.reducer, sh.Parts)
	base := sh.Base + c.task.Start
	fails, whole := headFails(cf, sh.Pipe, decodeFail, base)
	if whole != nil {
		return nil, []codec.Failure{*whole}
	}
	sum := wire.MapSummary{Fails: fails}
	if partials != nil {
		if w.withdrawn(ctx, c, t) {
			return nil, nil
		}
		if err := w.retryRedis(ctx, "store a map task's partials", func(ctx context.Context) error {
			return w.spill.StorePartials(ctx, &broker.StorePartialsParams{Shuffle: sh, Field: wire.Range(base, c.task.Count), Partials: partials})
		}); err != nil {
			return nil, []codec.Failure{{Index: 0, Through: c.task.Count - 1, Kind: codec.KindError,
				Msg: fmt.Sprintf("storing the task's partials in Redis: %v", err)}}
		}
		sum.Ranges, sum.Keys = []int{base, c.task.Count}, keys
		for _, p := range partials {
			sum.Bytes += int64(len(p))
		}
	}
	// Noted once nothing can fail the task whole, which would stand for
	// its elements.
	c.noteSteps(sh.Pipe, fails)
	return oneOutput(&sum)
}

// headFails turns the failures of a task's chain over its elements (and
// the frame's decode failure) into a pipeline's failed elements, indexed in
// its input (base is the index of the task's first element). A failure of
// a whole step (a mismatch) is returned as the task's.
func headFails(cf []engine.ChainFail, pipe *wire.Pipe, decodeFail *codec.Failure, base int) ([]wire.StepFail, *codec.Failure) {
	var fails []wire.StepFail
	if decodeFail != nil {
		stage := pipe.Stage
		if len(pipe.Steps) > 0 {
			stage = pipe.Steps[0].Stage
		}
		f := *decodeFail
		fails = append(fails, wire.StepFail{Stage: stage, Index: base + f.Index, Through: base + f.Last(), Kind: int(f.Kind), Msg: f.Msg})
	}
	for _, f := range cf {
		if f.Index < 0 {
			return nil, wholeFailure(f.Kind, "%s", f.Msg)
		}
		sf := wire.StepFail{Stage: stageOf(pipe, f.Step, pipe.Stage), Index: base + f.Index, Kind: int(f.Kind), Msg: f.Msg, Stack: truncate(f.Stack, maxStack)}
		if f.Last() > f.Index {
			sf.Through = base + f.Last()
		}
		fails = append(fails, sf)
	}
	return fails, nil
}

// noteSteps keeps fails, elements of pipeline task c that failed in its
// steps, by the function of the step each failed in: one of pipe's steps,
// the next by-key step's emitter, or else the task's own function (its
// by-key step). A failure past a by-key step (of a key) is one element.
func (c *resolved) noteSteps(pipe *wire.Pipe, fails []wire.StepFail) {
	for _, f := range fails {
		fn := c.task.Func
		for _, s := range pipe.Steps {
			if s.Stage == f.Stage {
				fn = s.Name
			}
		}
		if pipe.Next != nil && pipe.Next.Emit.Stage == f.Stage {
			fn = pipe.Next.Emit.Name
		}
		cf := codec.Failure{Index: max(f.Index, 0), Kind: codec.Kind(f.Kind), Msg: f.Msg, Stack: f.Stack}
		if f.Index >= 0 && f.Through > f.Index {
			cf.Through = f.Through
		}
		i := slices.IndexFunc(c.stepFails, func(g funcFails) bool { return g.fn == fn })
		if i < 0 {
			i = len(c.stepFails)
			c.stepFails = append(c.stepFails, funcFails{fn: fn})
		}
		c.stepFails[i].fails = append(c.stepFails[i].fails, cf)
	}
}

// stageOf is the number of step k of pipe's steps, or after if k is past
// them (the by-key step after them).
func stageOf(pipe *wire.Pipe, k, after int) int {
	if k < len(pipe.Steps) {
		return pipe.Steps[k].Stage
	}
	return after
}

// oneOutput is a task's output frame of one value, v.
func oneOutput(v any) ([]byte, []codec.Failure) {
	out := codec.NewOutputEncoder(1)
	if err := out.Add(v); err != nil {
		return nil, whole1(codec.KindEncode, "summary: %v", err)
	}
	return out.Bytes(), nil
}

// pipeReduce runs a reduce task of a pipeline: for each partition, its
// partials folded per key, the steps run on the pairs, and their outputs
// either handed to the next by-key step (its partials stored under the
// partition's range) or stored as the partition's output. A partition
// missing some partials says which, and stores nothing.
func (w *Worker) pipeReduce(ctx context.Context, c *resolved, sh *wire.Shuffle, steps []engine.Step, names []string) ([]byte, []codec.Failure) {
	b, ok := c.h.Boundary()
	if !ok {
		return nil, whole1(codec.KindTypeMismatch, "%q is not an emitter (redmap.Emit): it cannot be a by-key step", c.task.Func)
	}
	next := sh.Pipe.Next
	var nb engine.Boundary
	var nred *engine.Runtime
	var pager interface {
		Pages(ys any, page int) ([][]byte, error)
	} = b
	if len(steps) > 0 {
		pager = steps[len(steps)-1]
	}
	var want reflect.Type
	if next != nil {
		rt, f := w.runtime(ctx, "function", next.Emit.Name, next.Emit.Sig)
		if f == nil {
			nred, f = w.runtime(ctx, "reducer", next.Reduce.Name, next.Reduce.Sig)
		}
		if f != nil {
			return nil, []codec.Failure{*f}
		}
		if nb, ok = rt.Boundary(); !ok {
			return nil, whole1(codec.KindTypeMismatch, "%q is not an emitter (redmap.Emit): it cannot be a by-key step", next.Emit.Name)
		}
		want = nb.In()
	}
	if f := chainFits(b.Out(), steps, names, want, nameOf(next)); f != nil {
		return nil, []codec.Failure{*f}
	}
	return w.eachPartition(ctx, c, sh, func(in wire.ReduceInput, partials [][]byte, page int, res *wire.ReduceOutput) *codec.Failure {
		failed := func(kind codec.Kind, format string, args ...any) *codec.Failure {
			return &codec.Failure{Kind: kind, Msg: fmt.Sprintf(format, args...)}
		}
		kvs, f := b.FoldValues(ctx, partials, c.reducer)
		if f != nil {
			return failed(f.Kind, "partition %d: %s", in.Part, f.Msg)
		}
		var store func(ctx context.Context) error
		var cf []engine.ChainFail
		if next != nil {
			var partials [][]byte
			var keys int
			partials, keys, cf = nb.CombineChain(ctx, steps, kvs, c.policy, nred, next.Shuffle.Parts)
			if partials != nil {
				res.Next, res.Keys = true, keys
				for _, p := range partials {
					res.Bytes += int64(len(p))
				}
				store = func(ctx context.Context) error {
					return w.spill.StorePartials(ctx, &broker.StorePartialsParams{Shuffle: &next.Shuffle, Field: wire.Range(in.Part, 1), Partials: partials})
				}
			}
		} else {
			var ys any
			ys, cf = engine.RunChain(ctx, steps, kvs, c.policy)
			pages, err := pager.Pages(ys, page)
			if err != nil {
				return failed(codec.KindEncode, "partition %d's outputs: %v", in.Part, err)
			}
			res.Keys, res.Pages = reflect.ValueOf(ys).Len(), len(pages)
			for _, pg := range pages {
				res.Bytes += int64(len(pg))
			}
			store = func(ctx context.Context) error {
				return w.spill.StoreOutput(ctx, &broker.StoreOutputParams{Shuffle: sh, Part: in.Part, Pages: pages})
			}
		}
		after := sh.Pipe.Stage
		if next != nil {
			after = next.Emit.Stage
		}
		for _, f := range cf {
			if f.Index < 0 {
				return failed(f.Kind, "partition %d: %s", in.Part, f.Msg)
			}
			// A failure names each of its keys.
			for o := f.Index; o <= f.Last(); o++ {
				res.Fails = append(res.Fails, wire.StepFail{Stage: stageOf(sh.Pipe, f.Step, after), Index: -1, Key: b.KeyOf(kvs, o),
					Kind: int(f.Kind), Msg: f.Msg, Stack: truncate(f.Stack, maxStack)})
			}
		}
		if store != nil {
			if err := w.retryRedis(ctx, "store a partition's outputs", store); err != nil {
				return failed(codec.KindError, "storing partition %d's outputs in Redis: %v", in.Part, err)
			}
		}
		// Noted once the partition cannot fail: a partition that fails is
		// one failed element, its keys' failures with it.
		c.noteSteps(sh.Pipe, res.Fails)
		return nil
	})
}

// nameOf is the name of next's emitter, "" if next is nil.
func nameOf(next *wire.Next) string {
	if next == nil {
		return ""
	}
	return next.Emit.Name
}
