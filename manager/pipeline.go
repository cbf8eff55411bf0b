package manager

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"runtime/pprof"
	"slices"
	"strconv"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/engine"
	"github.com/redmap/redmap/internal/failure"
	"github.com/redmap/redmap/internal/id"
)

// Pipeline is a typed chain of steps over the elements of a slice, T being
// the type of what its last step gives. Build one with From and Then,
// FlatThen and ByKey, whose types the compiler checks step to step; run it
// with Collect, Stream or Fold. Building runs nothing, and a Pipeline may
// be run any number of times.
//
// Every step runs on the workers, and no element passes through the
// manager but the input and the last step's outputs. The steps between two
// by-key steps run in one task, one after the other, in the worker's
// memory: each over all the task's outputs of the step before. A by-key step
// is a map/reduce by key (ReduceByKey): the task before it combines its
// pairs per key and stores them in Redis, cut into partitions; when every
// such task has ended, one reduce task per partition folds its pairs and
// runs the steps after it on them, and stores their outputs in Redis for
// the manager to read, or hands them to the next by-key step.
type Pipeline[T any] struct{ p *pipeline }

// stepKind is what a step of a pipeline is.
type stepKind int

const (
	stepMap stepKind = iota
	stepFlat
	stepByKey
)

// pipeStep is a step of a pipeline: its handle, and a by-key step's
// reducer.
type pipeStep struct {
	kind stepKind
	h    redmap.AnyHandle
	red  redmap.AnyHandle
}

// pipeline is a Pipeline without its type: its input and its steps.
type pipeline struct {
	n int // elements of the input
	// head runs a map task batch of sp over the input's elements start to
	// start+count-1 (all if count < 0) on m; chain runs the one batch of a
	// pipeline with no by-key step.
	head  func(ctx context.Context, m *Manager, sp spec, co callOptions, start, count int) (wire.MapSummary, error)
	chain func(ctx context.Context, m *Manager, sp spec, co callOptions) (wire.ChainOut, error)
	sum   func() (string, error) // the input's sum, for a durable pipeline's fingerprint
	steps []pipeStep
}

// with returns p with step s after its steps (p is left as it was).
func (p *pipeline) with(s pipeStep) *pipeline {
	q := *p
	q.steps = append(slices.Clip(p.steps), s)
	return &q
}

// From starts a pipeline over the elements of xs, which it reads again to
// run some of them again if Redis loses what their later steps stored.
func From[In any](xs []In) *Pipeline[In] {
	p := &pipeline{n: len(xs), sum: func() (string, error) { return inputSum(xs) }}
	p.head = func(ctx context.Context, m *Manager, sp spec, co callOptions, start, count int) (wire.MapSummary, error) {
		in := xs
		if count >= 0 {
			in, co.chunk = xs[start:start+count], count
		}
		b, err := submit(ctx, m, sp, elements[In]{xs: in}, co, summaries)
		if err != nil {
			return wire.MapSummary{}, err
		}
		return b.reduced(ctx)
	}
	p.chain = func(ctx context.Context, m *Manager, sp spec, co callOptions) (wire.ChainOut, error) {
		b, err := submit(ctx, m, sp, elements[In]{xs: xs}, co, chainOuts)
		if err != nil {
			return wire.ChainOut{}, err
		}
		return b.reduced(ctx)
	}
	return &Pipeline[In]{p}
}

// Then adds a step that maps each element with fn: one output each.
func Then[In, Out any](p *Pipeline[In], fn *redmap.Handle[In, Out]) *Pipeline[Out] {
	return &Pipeline[Out]{p.p.with(pipeStep{kind: stepMap, h: fn})}
}

// FlatThen adds a step that runs fn on each element: zero or more outputs
// each, as fn emits them (a flat map, or a filter).
func FlatThen[In, Out any](p *Pipeline[In], fn *redmap.FlatHandle[In, Out]) *Pipeline[Out] {
	return &Pipeline[Out]{p.p.with(pipeStep{kind: stepFlat, h: fn})}
}

// ByKey adds a by-key step: em emits pairs for each element, the values of
// each key are folded with red, and the step gives one redmap.KV per key,
// in no particular order. red must be associative and commutative (see
// redmap.Reducer).
func ByKey[In any, K comparable, V any](p *Pipeline[In], em *redmap.Emitter[In, K, V], red *redmap.Reducer[V]) *Pipeline[redmap.KV[K, V]] {
	return &Pipeline[redmap.KV[K, V]]{p.p.with(pipeStep{kind: stepByKey, h: em, red: red})}
}

// Collect runs pipeline p on m's queue and returns the outputs of its last
// step. After a by-key step, outputs come in no particular order; without
// one, in the order of the input elements they came from, each element's
// in the order its steps gave them.
//
// If elements fail, in any step, the result holds the outputs of the
// others, with a *redmap.BatchError whose TaskErrors name the failed
// step (Stage, Func) and element (Index in the input, or Key after a
// by-key step); a failed element drops out of the steps after the one it
// failed in. A partition whose reduce fails leaves its keys out, with an
// error wrapping the cause. If ctx ends first it returns nil and
// ctx.Err().
//
// Call options apply to every task, as for ReduceByKey (Partitions to
// each by-key step). With Durable(name), the pipeline outlives its
// manager as a map/reduce by key does: each phase is a durable batch named
// after name, and the same call again takes it over.
func Collect[T any](ctx context.Context, m *Manager, p *Pipeline[T], opts ...CallOption) ([]T, error) {
	var out []T
	err := runPipeline(ctx, m, p.p, opts, true, func(page []byte) (bool, error) {
		ys, err := engine.DecodePage[T](page)
		if err != nil {
			return false, err
		}
		out = append(out, ys...)
		return true, nil
	}, func(n int) { out = out[:n] }, func() int { return len(out) })
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return out, err
}

// Stream is Collect for outputs larger than the manager's memory: it
// returns them as a sequence, read from Redis about 1 MiB at a time as the
// caller iterates, and a function that returns the run's error once the
// iteration ended. The pipeline runs when the sequence is first iterated;
// it may be iterated once; breaking out of it ends the run, deleting what
// is left in Redis. An output Redis loses after some of its partition's
// were yielded cannot be yielded exactly again: the sequence stops there
// with an error wrapping ErrLost.
func Stream[T any](ctx context.Context, m *Manager, p *Pipeline[T], opts ...CallOption) (iter.Seq[T], func() error) {
	var result error
	used := false
	seq := func(yield func(T) bool) {
		if used {
			result = errors.New("manager: a pipeline's Stream is iterated once")
			return
		}
		used = true
		result = runPipeline(ctx, m, p.p, opts, false, func(page []byte) (bool, error) {
			ys, err := engine.DecodePage[T](page)
			if err != nil {
				return false, err
			}
			for _, y := range ys {
				if !yield(y) {
					return false, nil
				}
			}
			return true, nil
		}, func(int) {}, func() int { return 0 })
		if ctx.Err() != nil {
			result = ctx.Err()
		}
	}
	return seq, func() error { return result }
}

// Fold runs pipeline p as Stream does and folds its outputs with red in the
// manager, as they are read: it holds one page of outputs, and the fold.
// No output folds to the zero value. Errors are as for Collect.
func Fold[T any](ctx context.Context, m *Manager, p *Pipeline[T], red *redmap.Reducer[T], opts ...CallOption) (T, error) {
	var zero T
	if err := red.Validate(); err != nil {
		return zero, err
	}
	fold, _ := engine.FolderOf[T](red.Runtime())
	var acc T
	folded := false
	var foldErr error
	seq, errf := Stream(ctx, m, p, opts...)
	for y := range seq {
		if !folded {
			acc, folded = y, true
			continue
		}
		z, err := fold.Fold(ctx, acc, y)
		if err != nil {
			foldErr = err
			break
		}
		acc = z
	}
	if err := errf(); err != nil {
		return zero, err
	}
	if foldErr != nil {
		return zero, foldErr
	}
	return acc, nil
}

// chainOuts folds, in the manager, the outputs of a pipeline's chain
// phase: each task's ChainOut, kept as a list. It never runs on a worker.
var chainOuts = redmap.Reduce("redmap.pipeline-chain", func(_ context.Context, a, b wire.ChainOut) (wire.ChainOut, error) {
	a.Rest = append(append(a.Rest, b), b.Rest...)
	b.Rest = nil
	return a, nil
})

// pipeLevel is a by-key step of a running pipeline: its partitions, and
// what the manager counted of them.
type pipeLevel struct {
	sh wire.Shuffle
	// ranges are the start and count of each producer whose partials the
	// partitions hold, by start: the map tasks' ranges of the input for
	// the first level, (p, 1) for each partition p of the level before
	// whose reduce stored some for the others.
	ranges      []int
	outputs     map[int]wire.ReduceOutput // the last level's partitions' outputs
	failedParts map[int]error
	rounds      int // reduce batches run, which a durable pipeline names
}

// pipeJob is a pipeline as it runs.
type pipeJob struct {
	m       *Manager
	pl      *pipeline
	co      callOptions
	durable string
	segs    [][]wire.Step // the steps before the first by-key step, and after each
	also    [][]string    // each seg's handles, as lanes list them
	keys    []pipeStep    // the by-key steps
	stages  []int         // each by-key step's number
	levels  []*pipeLevel
	// headFails are the input's elements that failed in the steps up to
	// the first by-key step, and keyFails those that failed after by-key
	// step b's partition p, by (b, p): a producer run again replaces its.
	headFails []wire.StepFail
	keyFails  map[[2]int][]wire.StepFail
	taskErrs  *redmap.BatchError // the head tasks' own failures
	stopRenew func()
	name      string // what its batches say they are a phase of (codec.CallInfo.Pipeline)
	// hold is a durable pipeline's claim and record (pipeline_durable.go);
	// restoredRunning, each level's reduce batch that was in flight when
	// it was taken over; ended, that its run ended, its outputs read.
	hold            *pipeHold
	restoredRunning [][]int
	ended           bool
	run             *pipeRun // what an operator's cancel of it finds
}

// runPipeline runs pl on m and hands each page of the last step's outputs
// to use, which returns false to stop; restart says a partition's outputs
// may be read again from the start should Redis lose them after some were
// used: then reset(mark) drops what use kept of the partition since
// mark() said where it began.
//
// An operator's cancel of the pipeline, or of any of its batches, ends the
// run with an error wrapping redmap.ErrCancelled: its batches are
// submitted with a context the cancel ends (see pipes).
func runPipeline(ctx context.Context, m *Manager, pl *pipeline, opts []CallOption, restart bool, use func([]byte) (bool, error), reset func(int), mark func() int) (err error) {
	ctx, named, endSpan := m.startPipelineSpan(ctx)
	ctx, stop := context.WithCancelCause(ctx)
	run := newPipeRun(stop)
	run.named = named
	defer func() {
		m.pipes.unlist(run)
		err = cancelledRun(run, err)
		stop(nil)
		endSpan(err)
	}()
	j, err := startPipeline(ctx, m, pl, opts, run)
	if err != nil {
		return err
	}
	if len(j.keys) == 0 {
		err := j.runChain(ctx, use)
		j.ended = ctx.Err() == nil && endedBy(err)
		j.leave()
		return err
	}
	defer j.drop()
	last := j.levels[len(j.levels)-1]
	for p := range last.sh.Parts {
		at := mark()
		err := j.readPart(ctx, p, use, func() { reset(at) }, restart)
		if errors.Is(err, errStopped) {
			j.ended = true
			return j.err()
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if _, ok := last.failedParts[p]; !ok {
				last.failedParts[p] = fmt.Errorf("manager: partition %d of %d of the pipeline's last by-key step could not be read; its outputs are missing: %w", p, last.sh.Parts, err)
			}
			delete(last.outputs, p)
		}
		if !restart {
			j.dropParts(len(j.levels)-1, []int{p})
		}
	}
	j.ended = true
	return j.err()
}

// errStopped is readPart's error when use stopped it.
var errStopped = errors.New("manager: a pipeline's outputs: the reader stopped")

// startPipeline checks pl and the options, lists run under the pipeline's
// name for an operator's cancel, and runs pl up to the outputs of its last
// by-key step's partitions (all of it, without one).
func startPipeline(ctx context.Context, m *Manager, pl *pipeline, opts []CallOption, run *pipeRun) (*pipeJob, error) {
	if err := pl.check(); err != nil {
		return nil, err
	}
	co, err := byKeyOptions("a pipeline", opts)
	if err != nil {
		return nil, err
	}
	if err := m.ready(ctx); err != nil {
		return nil, err
	}
	j := &pipeJob{m: m, pl: pl, co: co, durable: co.durable, keyFails: make(map[[2]int][]wire.StepFail), run: run}
	j.co.durable = ""
	if err := j.segment(ctx); err != nil {
		return nil, err
	}
	var jid [8]byte
	_, _ = rand.Read(jid[:])
	job := hex.EncodeToString(jid[:])
	ttl := 10 * m.opts.KeyTTL
	j.name = job
	if j.durable != "" {
		job, ttl = id.DurableJob("pipeline\x00"+j.durable), m.opts.DurableTTL
		j.name = j.durable
	}
	run.name = j.name
	run.named(j.name)
	m.pipes.list(run)
	if len(j.keys) == 0 {
		sh := wire.Shuffle{Job: job, Parts: 1, Phase: wire.PhaseChain, TTL: ttl.Milliseconds(), Pipe: &wire.Pipe{Steps: j.segs[0]}}
		j.levels = []*pipeLevel{{sh: sh}}
		if err := j.takeOver(ctx); err != nil {
			return nil, err
		}
		return j, nil
	}
	for b := range j.keys {
		sh := wire.Shuffle{Job: job + "." + strconv.Itoa(b), Parts: co.partitions, TTL: ttl.Milliseconds(), Page: outputPage}
		sh.Salts = (&shuffleJob{m: m, sh: sh, parts: sh.Parts}).salts(ctx)
		j.levels = append(j.levels, &pipeLevel{sh: sh, outputs: make(map[int]wire.ReduceOutput), failedParts: make(map[int]error)})
	}
	if err := j.takeOver(ctx); err != nil {
		return nil, err
	}
	j.stopRenew = j.renew()
	if err := j.runLevels(ctx); err != nil {
		j.drop()
		return nil, err
	}
	return j, nil
}

// check refuses a pipeline of no step, of too many, or with a handle
// that cannot run.
func (p *pipeline) check() error {
	if len(p.steps) == 0 {
		return errors.New("manager: a pipeline with no step: add one with Then, FlatThen or ByKey")
	}
	if len(p.steps) > wire.MaxSteps {
		return fmt.Errorf("manager: a pipeline of %d steps, over %d", len(p.steps), wire.MaxSteps)
	}
	for i, s := range p.steps {
		err := s.h.Validate()
		if err == nil && s.red != nil {
			err = s.red.Validate()
		}
		if err != nil {
			return fmt.Errorf("manager: step %d of the pipeline: %w", i+1, err)
		}
	}
	return nil
}

// segment publishes the structure of the types of each step's handles,
// and cuts the steps at each by-key step into segments: the steps of
// segment k run on by-key step k's outputs (segment 0: on the pipeline's
// input).
func (j *pipeJob) segment(ctx context.Context) error {
	j.segs = [][]wire.Step{nil}
	j.also = [][]string{nil}
	for i, s := range j.pl.steps {
		if err := j.publish(ctx, s.h); err != nil {
			return err
		}
		if s.kind == stepByKey {
			if err := j.publish(ctx, s.red); err != nil {
				return err
			}
			j.keys = append(j.keys, s)
			j.stages = append(j.stages, i+1)
			j.segs = append(j.segs, nil)
			j.also = append(j.also, nil)
			continue
		}
		k := len(j.segs) - 1
		j.segs[k] = append(j.segs[k], wire.Step{Name: s.h.Name(), Sig: s.h.Signature(), Stage: i + 1})
		j.also[k] = append(j.also[k], s.h.Name()+"\t"+s.h.Signature())
	}
	return nil
}

// runLevels runs a pipeline with by-key steps up to the outputs of its
// last one's partitions: the head, unless a call before this one ran it,
// then each level's reduce tasks not run yet.
func (j *pipeJob) runLevels(ctx context.Context) error {
	if !j.headDone() {
		sum, err := j.runHead(ctx, 0, -1)
		if err := j.taskErrors(err, 0, -1); err != nil {
			return err
		}
		j.levels[0].ranges = sortRanges(sum.Ranges)
		j.headFails = sum.Fails
		if err := j.headEnded(ctx); err != nil {
			return err
		}
	}
	for b := range j.levels {
		if err := j.reduceRest(ctx, b); err != nil {
			return err
		}
		if b+1 < len(j.levels) {
			// The next level's partials are all stored: this level's
			// are no longer needed (a loss of the next ones runs the
			// pipeline again from its input).
			j.dropParts(b, allParts(j.levels[b].sh.Parts))
		}
	}
	return nil
}

// publish stores the structure of h's types, for a worker that has h with
// other types to say which field differs.
func (j *pipeJob) publish(ctx context.Context, h redmap.AnyHandle) error {
	return j.m.faults.riding(ctx, func() error { return j.m.publishTypes(ctx, h.Signature(), types(h)) })
}

func allParts(n int) []int {
	ps := make([]int, n)
	for i := range ps {
		ps[i] = i
	}
	return ps
}

// phaseOn is the manager a phase runs on: m, or for a durable pipeline the
// owner of the durable batch named after it.
func (j *pipeJob) phaseOn(ctx context.Context, phase string) (*Manager, error) {
	if j.durable == "" {
		return j.m, nil
	}
	return j.m.owner(ctx, j.durable+"/"+phase, j.co.durableWait)
}

// specOf is the spec of a phase's tasks: named after h (red folding its
// pairs on the workers if not nil), carrying sh, listing also.
func specOf(h, red redmap.AnyHandle, sh *wire.Shuffle, phase string, also []string) (spec, error) {
	enc, err := wire.EncodeShuffle(sh)
	if err != nil {
		return spec{}, err
	}
	sp := spec{name: h.Name(), sig: h.Signature(), types: types(h), limit: h.Limit(), idempotent: idempotentOf(h),
		shuffle: enc, phase: phase, also: also}
	if red != nil {
		sp.red = &reducerRef{name: red.Name(), sig: red.Signature(), types: types(red)}
	}
	return sp, nil
}

// runChain runs a pipeline with no by-key step: one batch, whose tasks
// return their outputs.
func (j *pipeJob) runChain(ctx context.Context, use func([]byte) (bool, error)) error {
	first := j.pl.steps[0].h
	sh := j.levels[0].sh
	sp, err := specOf(first, nil, &sh, "map", j.also[0][1:])
	if err != nil {
		return err
	}
	sp.bare = true
	sp.idempotent = j.idempotent(j.pl.steps)
	on, err := j.phaseOn(ctx, "chain")
	if err != nil {
		return err
	}
	out, err := j.pl.chain(ctx, on, sp, j.callOf(1, len(j.pl.steps), "map"))
	if err := j.taskErrors(err, 0, -1); err != nil {
		return err
	}
	outs := append([]wire.ChainOut{out}, out.Rest...)
	slices.SortFunc(outs, func(a, b wire.ChainOut) int { return a.Start - b.Start })
	for _, o := range outs {
		j.headFails = append(j.headFails, o.Fails...)
		if o.Page == nil {
			continue // the zero partial: no task's
		}
		ok, err := use(o.Page)
		if err != nil {
			return fmt.Errorf("%w: the outputs of the pipeline's tasks from element %d: %v", redmap.ErrDecode, o.Start, err)
		}
		if !ok {
			break
		}
	}
	return j.err()
}

// callOf is the call options of a phase that runs steps from to to (from
// 1): the pipeline's, saying which phase.
func (j *pipeJob) callOf(from, to int, side string) callOptions {
	co := j.co
	co.call.Pipeline = j.name
	co.call.Stage = fmt.Sprintf("%d-%d %s", from, to, side)
	if from == to {
		co.call.Stage = fmt.Sprintf("%d %s", from, side)
	}
	return co
}

// idempotent reports whether every handle of steps was declared
// redmap.Idempotent: their tasks then get backup tasks by default.
func (j *pipeJob) idempotent(steps []pipeStep) bool {
	for _, s := range steps {
		if !idempotentOf(s.h) {
			return false
		}
	}
	return true
}

// runHead runs the map tasks of the input's elements start to
// start+count-1 (all if count < 0) as one batch: the steps before the
// first by-key step, and its emitter.
func (j *pipeJob) runHead(ctx context.Context, start, count int) (wire.MapSummary, error) {
	lv := j.levels[0]
	sh := lv.sh
	sh.Phase, sh.Base = wire.PhaseMap, max(start, 0)
	sh.Pipe = &wire.Pipe{Steps: j.segs[0], Stage: j.stages[0]}
	key := j.keys[0]
	sp, err := specOf(key.h, key.red, &sh, "map", j.also[0])
	if err != nil {
		return wire.MapSummary{}, err
	}
	sp.idempotent = j.idempotent(j.pl.steps[:j.stages[0]])
	phase := "map"
	if count >= 0 {
		phase = fmt.Sprintf("map@%d+%d", start, count)
	}
	on, err := j.phaseOn(ctx, phase)
	if err != nil {
		return wire.MapSummary{}, err
	}
	co := j.callOf(1, j.stages[0], "map")
	co.call.Rerun = count >= 0
	sum, err := j.pl.head(ctx, on, sp, co, start, count)
	j.m.stats.partialBytes.Add(sum.Bytes)
	return sum, err
}

// taskErrors keeps the failures of the head tasks of the input's elements
// start to start+count-1 (all if count < 0), a *redmap.BatchError, in place
// of what an earlier run said of them, and returns any other error, which
// ends the run.
func (j *pipeJob) taskErrors(err error, start, count int) error {
	if count >= 0 && j.taskErrs != nil {
		j.taskErrs.Failed = slices.DeleteFunc(j.taskErrs.Failed, func(f *redmap.TaskError) bool {
			return f.Index >= start && f.Index < start+count
		})
	}
	var be *redmap.BatchError
	if err == nil || !errors.As(err, &be) {
		return err
	}
	if j.taskErrs == nil {
		j.taskErrs = &redmap.BatchError{Total: j.pl.n}
	}
	for _, f := range be.Failed {
		g := *f
		g.Index += start
		g.Stage = 1
		j.taskErrs.Failed = append(j.taskErrs.Failed, &g)
	}
	return nil
}

// reduceLevel reduces partitions ps of by-key step b, again if rerun (they
// were reduced before); while some miss partials, it has their producers
// run again and reduces those partitions again.
func (j *pipeJob) reduceLevel(ctx context.Context, b int, ps []int, rerun bool) error {
	lv := j.levels[b]
	final := b+1 == len(j.levels)
	for round := 0; len(ps) > 0; round++ {
		if len(lv.ranges) == 0 {
			// No producer stored partials (no element, or none came this
			// far): every partition is empty.
			for _, p := range ps {
				j.reduced(b, p, wire.ReduceOutput{})
			}
			return nil
		}
		outs, err := j.reduceBatch(ctx, b, ps, rerun || round > 0)
		var be *redmap.BatchError
		if err != nil && !errors.As(err, &be) {
			return err
		}
		failed := make(map[int]error)
		if be != nil {
			for _, f := range be.Failed {
				failed[f.Index] = f
			}
		}
		lost := make(map[int]bool)
		var again []int
		for i, p := range ps {
			if e, bad := failed[i]; bad {
				lv.failedParts[p] = fmt.Errorf("manager: partition %d of %d of by-key step %d (%q) could not be reduced; its keys are missing from the result: %w",
					p, lv.sh.Parts, j.stages[b], j.keys[b].h.Name(), e)
				if final {
					delete(lv.outputs, p)
				} else {
					j.setRange(b+1, p, false)
				}
				continue
			}
			if len(outs[i].Missing) == 0 {
				delete(lv.failedParts, p)
				j.reduced(b, p, outs[i])
				continue
			}
			again = append(again, p)
			for _, r := range outs[i].Missing {
				lost[r] = true
			}
		}
		if err := j.roundEnded(ctx, b); err != nil {
			return err
		}
		if len(again) == 0 {
			return nil
		}
		if round >= maxShuffleRounds {
			return fmt.Errorf("%w: partials of by-key step %d lost from Redis %d times", redmap.ErrLost, j.stages[b], round+1)
		}
		j.m.log.Warn("partials of a pipeline were lost from Redis; what stored them runs again",
			"job", lv.sh.Job, "stage", j.stages[b], "producers", len(lost), "partitions", len(again))
		if err := j.produce(ctx, b, slices.Sorted(func(yield func(int) bool) {
			for r := range lost {
				if !yield(r) {
					return
				}
			}
		})); err != nil {
			return err
		}
		ps = again
	}
	return nil
}

// reduced records what the reduce of partition p of level b gave.
func (j *pipeJob) reduced(b, p int, out wire.ReduceOutput) {
	j.keyFails[[2]int{b, p}] = out.Fails
	if b+1 == len(j.levels) {
		j.m.stats.outputBytes.Add(out.Bytes)
		j.levels[b].outputs[p] = out
		return
	}
	j.setRange(b+1, p, out.Next)
}

// setRange says whether partition p of level b-1 stored partials for level
// b.
func (j *pipeJob) setRange(b, p int, stored bool) {
	lv := j.levels[b]
	for i := 0; i < len(lv.ranges); i += 2 {
		if lv.ranges[i] == p {
			if !stored {
				lv.ranges = slices.Delete(lv.ranges, i, i+2)
			}
			return
		}
	}
	if stored {
		lv.ranges = sortRanges(append(lv.ranges, p, 1))
	}
}

// produce runs again the producers rs (indexes of level b's ranges) of
// level b's partials: the map tasks of their elements for the first
// level, the reduce of their partitions of the level before for the
// others.
func (j *pipeJob) produce(ctx context.Context, b int, rs []int) error {
	lv := j.levels[b]
	if b > 0 {
		ps := make([]int, len(rs))
		for i, r := range rs {
			ps[i] = lv.ranges[2*r]
		}
		return j.reduceLevel(ctx, b-1, ps, true)
	}
	type done struct {
		start, count int
		sum          wire.MapSummary
		err          error
	}
	ch := make(chan done, len(rs))
	for _, r := range rs {
		start, count := lv.ranges[2*r], lv.ranges[2*r+1]
		if !j.m.beside.Go(pprof.WithLabels(ctx, pprof.Labels(ProfileLabel, j.m.label)), func(ctx context.Context) {
			sum, err := j.runHead(ctx, start, count)
			ch <- done{start, count, sum, err}
		}) {
			ch <- done{start, count, wire.MapSummary{}, redmap.ErrClosed}
		}
	}
	var first error
	for range rs {
		d := <-ch
		if err := j.taskErrors(d.err, d.start, d.count); err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		j.headFails = slices.DeleteFunc(j.headFails, func(f wire.StepFail) bool { return f.Index >= d.start && f.Index < d.start+d.count })
		j.headFails = append(j.headFails, d.sum.Fails...)
		if len(d.sum.Ranges) == 0 {
			// None of its elements gave pairs this time.
			for i := 0; i < len(lv.ranges); i += 2 {
				if lv.ranges[i] == d.start {
					lv.ranges = slices.Delete(lv.ranges, i, i+2)
					break
				}
			}
		}
	}
	return first
}

// reduceBatch runs the reduce tasks of partitions ps of level b as one
// batch: each folds its partition, runs the steps after the by-key step on
// its pairs, and hands their outputs on to the next by-key step or stores
// them; rerun says they were reduced before (codec.CallInfo's Rerun).
func (j *pipeJob) reduceBatch(ctx context.Context, b int, ps []int, rerun bool) ([]wire.ReduceOutput, error) {
	lv := j.levels[b]
	sh := lv.sh
	sh.Phase = wire.PhaseReduce
	sh.Pipe = &wire.Pipe{Steps: j.segs[b+1], Stage: j.stages[b]}
	also := slices.Clone(j.also[b+1])
	if b+1 < len(j.levels) {
		nk := j.keys[b+1]
		next := j.levels[b+1].sh
		next.Phase = wire.PhaseMap
		sh.Pipe.Next = &wire.Next{
			Emit:    wire.Step{Name: nk.h.Name(), Sig: nk.h.Signature(), Stage: j.stages[b+1]},
			Reduce:  wire.Step{Name: nk.red.Name(), Sig: nk.red.Signature(), Stage: j.stages[b+1]},
			Shuffle: next,
		}
		also = append(also, nk.h.Name()+"\t"+nk.h.Signature(), nk.red.Name()+"\t"+nk.red.Signature())
	}
	key := j.keys[b]
	sp, err := specOf(key.h, key.red, &sh, "reduce", also)
	if err != nil {
		return nil, err
	}
	end := len(j.pl.steps)
	if b+1 < len(j.levels) {
		end = j.stages[b+1]
	}
	sp.idempotent = j.idempotent(j.pl.steps[j.stages[b]-1 : end])
	runs := wire.CompressRanges(lv.ranges)
	ins := make([]wire.ReduceInput, len(ps))
	for i, p := range ps {
		ins[i] = wire.ReduceInput{Part: p, Runs: runs}
	}
	lv.rounds++
	if err := j.roundBegins(ctx, b, ps); err != nil {
		return nil, err
	}
	on, err := j.phaseOn(ctx, fmt.Sprintf("reduce%d@%d", b+1, lv.rounds-1))
	if err != nil {
		return nil, err
	}
	rco := j.callOf(j.stages[b], end, "reduce")
	rco.chunk, rco.call.Rerun = 1, rerun
	batch, err := submit(ctx, on, sp, elements[wire.ReduceInput]{xs: ins}, rco, (*redmap.Reducer[wire.ReduceOutput])(nil))
	if err != nil {
		return nil, err
	}
	return batch.Wait(ctx)
}

// readPart reads the outputs of partition p of the last level, page by
// page, handing each to use. If some are not in Redis (it lost them), it
// has the partition computed again and starts over, after reset, if
// restart or no page was used yet; else it fails with ErrLost.
func (j *pipeJob) readPart(ctx context.Context, p int, use func([]byte) (bool, error), reset func(), restart bool) error {
	b := len(j.levels) - 1
	lv := j.levels[b]
	view := &shuffleJob{m: j.m, store: j.m.spill, sh: lv.sh, parts: lv.sh.Parts}
	for round := 0; ; round++ {
		out, ok := lv.outputs[p]
		if !ok {
			return lv.failedParts[p]
		}
		used, missing := 0, false
		for i := range out.Pages {
			pg, err := view.page(ctx, p, i)
			if errors.Is(err, broker.ErrPageMissing) {
				missing = true
				break
			}
			if err != nil {
				return err
			}
			used++
			more, err := use(pg)
			if err != nil {
				return fmt.Errorf("%w: page %d of partition %d's outputs: %v", redmap.ErrDecode, i, p, err)
			}
			if !more {
				return errStopped
			}
		}
		if !missing {
			return nil
		}
		if used > 0 && !restart {
			return fmt.Errorf("%w: partition %d's outputs were lost from Redis after %d of their %d pages were read", redmap.ErrLost, p, used, out.Pages)
		}
		if round >= maxShuffleRounds {
			return fmt.Errorf("%w: partition %d's outputs were lost from Redis %d times", redmap.ErrLost, p, round+1)
		}
		reset()
		j.m.log.Warn("a pipeline's outputs were lost from Redis; they are computed again", "job", lv.sh.Job, "partition", p)
		if err := j.reduceLevel(ctx, b, []int{p}, true); err != nil {
			return err
		}
	}
}

// renew keeps the pipeline's partitions from expiring while it runs, as
// shuffleJob.renew does a map/reduce by key's.
func (j *pipeJob) renew() func() {
	return everyKeyTTL(j.m, func(ctx context.Context) {
		for _, lv := range j.levels {
			if err := j.m.spill.RenewPartitions(ctx, &broker.PartitionsParams{Shuffle: &lv.sh, Parts: allParts(lv.sh.Parts)}); err != nil && ctx.Err() == nil {
				j.m.log.Warn("cannot renew the TTL of a pipeline's partitions", "job", lv.sh.Job, "err", err)
			}
		}
		j.renewRecord(ctx)
	})
}

// dropParts deletes partitions ps of level b (best effort: they expire).
func (j *pipeJob) dropParts(b int, ps []int) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(j.m.ctx), j.m.opts.RedisTimeout)
	defer cancel()
	_ = j.m.spill.DropPartitions(ctx, &broker.PartitionsParams{Shuffle: &j.levels[b].sh, Parts: ps})
}

// drop ends the run: it stops renewing the partitions and deletes them.
func (j *pipeJob) drop() {
	if j.stopRenew != nil {
		j.stopRenew()
	}
	if j.leave() {
		return // a durable pipeline's, for the call that takes it over
	}
	for b := range j.levels {
		j.dropParts(b, allParts(j.levels[b].sh.Parts))
	}
}

// err returns the run's error: its failed elements, in every step, as one
// *redmap.BatchError, and its failed partitions; nil if none.
func (j *pipeJob) err() error {
	be := &redmap.BatchError{Total: j.pl.n}
	if j.taskErrs != nil {
		be.Failed = append(be.Failed, j.taskErrs.Failed...)
	}
	add := func(fs []wire.StepFail) {
		for _, f := range fs {
			last := f.Index
			if f.Index >= 0 && f.Through > f.Index {
				last = f.Through // a run
			}
			for i := f.Index; i <= last; i++ {
				be.Failed = append(be.Failed, j.taskError(f, i))
			}
		}
	}
	add(j.headFails)
	for _, k := range slices.SortedFunc(func(yield func([2]int) bool) {
		for k := range j.keyFails {
			if !yield(k) {
				return
			}
		}
	}, func(a, b [2]int) int {
		if a[0] != b[0] {
			return a[0] - b[0]
		}
		return a[1] - b[1]
	}) {
		add(j.keyFails[k])
	}
	slices.SortStableFunc(be.Failed, func(a, b *redmap.TaskError) int {
		if a.Stage != b.Stage {
			return a.Stage - b.Stage
		}
		return a.Index - b.Index
	})
	var errs []error
	if len(be.Failed) > 0 {
		errs = append(errs, be)
	}
	for _, lv := range j.levels {
		for _, p := range slices.Sorted(func(yield func(int) bool) {
			for p := range lv.failedParts {
				if !yield(p) {
					return
				}
			}
		}) {
			errs = append(errs, lv.failedParts[p])
		}
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

// taskError is failure f of element index as a TaskError.
func (j *pipeJob) taskError(f wire.StepFail, index int) *redmap.TaskError {
	name := ""
	if f.Stage >= 1 && f.Stage <= len(j.pl.steps) {
		name = j.pl.steps[f.Stage-1].h.Name()
	}
	return &redmap.TaskError{Index: index, Func: name, Stage: f.Stage, Key: f.Key, Stack: f.Stack,
		Err: failure.Cause(codec.Failure{Kind: codec.Kind(f.Kind), Msg: f.Msg})}
}
