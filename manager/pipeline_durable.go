package manager

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/zeebo/blake3"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/id"
)

// A durable pipeline (Durable) holds a durable claim of its own, named
// name+"/pipeline", for as long as a call runs it: one manager at a time
// runs its phases. Through that claim's owner, fenced as an owner's writes
// are, it keeps a record in Redis (keys.Pipeline, wire.PipelineRecord):
// its fingerprint, written before its first phase, and, as each phase
// begins and ends, what the manager holds of the run (the head's ranges
// and failures, each by-key step's partitions reduced and what they gave,
// the reduce batch in flight). The call that takes the pipeline over reads
// it and goes on from there: a phase that ended is not run again, and the
// one in flight is submitted again the same, under the same name, so that
// its durable batch's results are kept (resume). Once the run has ended
// the record and the claim go; a run that stops otherwise (its context, its
// manager closed or killed) leaves them, for DurableTTL.

// pipeHold is what a durable pipeline's run holds: the owner of its claim,
// and the record it last wrote.
type pipeHold struct {
	o       *Manager // the owner of the pipeline's claim
	owner   string   // its id, the record's
	mu      sync.Mutex
	rec     wire.PipelineRecord // last written; guarded by mu, for renew
	head    bool                // the head phase ended
	running [][]int             // each level's partitions of the reduce batch in flight
}

// pipelineClaim is the name of the durable claim of pipeline name.
func pipelineClaim(name string) string { return name + "/pipeline" }

// claimedPipeline returns the pipeline whose claim durable names
// (pipelineClaim), and whether it names one.
func claimedPipeline(durable string) (string, bool) { return strings.CutSuffix(durable, "/pipeline") }

// takeOver claims durable pipeline j and reads its record: a pipeline
// begun by another call goes on from what it holds, one that is another
// pipeline (other steps, input or partitions) is refused, with
// ErrDurableMismatch, and left as it was. A new one's record is written.
func (j *pipeJob) takeOver(ctx context.Context) error {
	if j.durable == "" {
		return nil
	}
	sum, err := j.fingerprint()
	if err != nil {
		return fmt.Errorf("manager: durable pipeline %q: summing its input: %w", j.durable, err)
	}
	o, err := j.m.owner(ctx, pipelineClaim(j.durable), j.co.durableWait)
	if err != nil {
		return err
	}
	h := &pipeHold{o: o, owner: id.Durable(pipelineClaim(j.durable)), running: make([][]int, len(j.levels))}
	var rec *wire.PipelineRecord
	err = j.m.faults.riding(ctx, func() error {
		return o.faults.callQueue("reading a durable pipeline's record", func() (err error) {
			rctx, cancel := context.WithTimeout(ctx, j.m.opts.RedisTimeout)
			defer cancel()
			rec, err = o.router.queue().Pipeline(rctx, &broker.PipelineParams{Owner: h.owner})
			return err
		})
	})
	if err == nil && rec != nil {
		switch {
		case rec.Sum != sum:
			err = fmt.Errorf("manager: durable pipeline %q was begun as another pipeline (other steps, input or Partitions), which this call does not take over; it is left as it was: %w",
				j.durable, redmap.ErrDurableMismatch)
		default:
			err = j.restore(rec)
		}
	}
	if err != nil {
		o.detach(err)
		return err
	}
	j.hold = h
	if rec != nil {
		h.head = rec.Head
		j.m.log.Info("taking a durable pipeline over", "pipeline", j.durable, "head", rec.Head, "levels done", j.levelsDone())
		return nil
	}
	h.rec.Sum = sum
	if err := j.checkpoint(ctx); err != nil {
		j.hold = nil
		o.detach(err)
		return err
	}
	return nil
}

// fingerprint sums what makes pipeline j the pipeline it is: its steps'
// kinds, names and signatures, its input, and its partitions.
func (j *pipeJob) fingerprint() (string, error) {
	h := blake3.New()
	put := func(s string) { _, _ = h.WriteString(strconv.Itoa(len(s)) + ":" + s) }
	put("redmap pipeline 1")
	put(strconv.Itoa(j.pl.n))
	put(strconv.Itoa(j.co.partitions))
	for _, s := range j.pl.steps {
		put(strconv.Itoa(int(s.kind)))
		put(s.h.Name())
		put(s.h.Signature())
		if s.red != nil {
			put(s.red.Name())
			put(s.red.Signature())
		}
	}
	in, err := j.pl.sum()
	if err != nil {
		return "", err
	}
	put(in)
	return fmt.Sprintf("%x", h.Sum(nil)[:16]), nil
}

// inputSum sums the encoding of xs, a thousand elements at a time.
func inputSum[In any](xs []In) (string, error) {
	h := blake3.New()
	for i := 0; i < len(xs); i += 1000 {
		b, err := codec.EncodeElements(xs[i:min(i+1000, len(xs))], 0)
		if err != nil {
			return "", err
		}
		_, _ = h.WriteString(strconv.Itoa(len(b)) + ":")
		_, _ = h.Write(b)
	}
	return fmt.Sprintf("%x", h.Sum(nil)[:16]), nil
}

// restore sets j's state to what rec, its record, says of the run.
func (j *pipeJob) restore(rec *wire.PipelineRecord) error {
	bad := func(what string) error {
		return fmt.Errorf("manager: durable pipeline %q: its record in Redis does not fit the pipeline (%s); delete it to run the pipeline from its start", j.durable, what)
	}
	if len(rec.Levels) != len(j.levels) {
		return bad("by-key steps")
	}
	j.headFails = rec.Fails
	j.taskErrs = nil
	if len(rec.Errs) > 0 {
		j.taskErrs = &redmap.BatchError{Total: j.pl.n}
		for _, e := range rec.Errs {
			j.taskErrs.Failed = append(j.taskErrs.Failed, &redmap.TaskError{Index: e.Index, Func: e.Func, Stage: e.Stage, Attempt: e.Attempt,
				Key: e.Key, Stack: e.Stack, Worker: e.Worker, Err: keptCause(e.Kind, e.Msg)})
		}
	}
	for b, kl := range rec.Levels {
		lv := j.levels[b]
		parts := lv.sh.Parts
		if len(kl.Salts) != 0 && len(kl.Salts) != parts {
			return bad("salts")
		}
		for _, p := range kl.Running {
			if p >= parts {
				return bad("partitions")
			}
		}
		lv.sh.Salts, lv.ranges, lv.rounds = kl.Salts, kl.Ranges, kl.Rounds
		for _, p := range kl.Parts {
			if p.Part >= parts {
				return bad("partitions")
			}
			if p.Failed != nil {
				lv.failedParts[p.Part] = keptCause(p.Failed.Kind, p.Failed.Msg)
				continue
			}
			j.keyFails[[2]int{b, p.Part}] = p.Out.Fails
			if b+1 == len(j.levels) {
				lv.outputs[p.Part] = p.Out
			}
		}
	}
	j.restoredRunning = make([][]int, len(rec.Levels))
	for b, kl := range rec.Levels {
		j.restoredRunning[b] = kl.Running
	}
	return nil
}

// keptError is a failure read back from a pipeline's record: its message,
// and the sentinel of its kind (causeOf) for errors.Is.
type keptError struct{ kind, msg string }

func (e *keptError) Error() string { return e.msg }

// Is reports whether target is the sentinel of e's kind.
func (e *keptError) Is(target error) bool {
	k := causeOf(target)
	return k == e.kind && k != wire.CauseOther && k != codec.KindError.String()
}

// keptCause is the error a record keeps as kind and msg.
func keptCause(kind, msg string) error {
	if kind == codec.KindError.String() {
		return &redmap.RemoteError{Msg: msg}
	}
	return &keptError{kind: kind, msg: msg}
}

// pipeError is err as a record keeps it.
func pipeError(err error) *wire.PipeError {
	return &wire.PipeError{Kind: causeOf(err), Msg: err.Error()}
}

// partDone reports whether partition p of level b was reduced, or failed.
func (j *pipeJob) partDone(b, p int) bool {
	if _, ok := j.levels[b].failedParts[p]; ok {
		return true
	}
	_, ok := j.keyFails[[2]int{b, p}]
	return ok
}

// levelsDone counts the by-key steps whose every partition was reduced.
func (j *pipeJob) levelsDone() int {
	n := 0
	for b := range j.levels {
		if len(j.todo(b)) > 0 || len(j.restoredRunning) > b && len(j.restoredRunning[b]) > 0 {
			break
		}
		n++
	}
	return n
}

// todo returns the partitions of level b still to reduce.
func (j *pipeJob) todo(b int) []int {
	var ps []int
	for p := range j.levels[b].sh.Parts {
		if !j.partDone(b, p) {
			ps = append(ps, p)
		}
	}
	return ps
}

// headDone reports whether the head phase of a durable pipeline taken
// over had ended.
func (j *pipeJob) headDone() bool { return j.hold != nil && j.hold.head }

// reduceRest reduces what is left of level b: first the reduce batch that
// was in flight when the pipeline was taken over, the same, under its own
// name, then the partitions not reduced yet.
func (j *pipeJob) reduceRest(ctx context.Context, b int) error {
	if len(j.restoredRunning) > b && len(j.restoredRunning[b]) > 0 {
		ps := j.restoredRunning[b]
		j.restoredRunning[b] = nil
		j.levels[b].rounds = max(j.levels[b].rounds-1, 0)
		if err := j.reduceLevel(ctx, b, ps, false); err != nil {
			return err
		}
	}
	ps := j.todo(b)
	if len(ps) == 0 {
		return nil
	}
	return j.reduceLevel(ctx, b, ps, false)
}

// roundBegins records, for a durable pipeline, that the reduce batch of
// partitions ps of level b is about to be submitted (levels[b].rounds
// counts it already).
func (j *pipeJob) roundBegins(ctx context.Context, b int, ps []int) error {
	if j.hold == nil {
		return nil
	}
	j.hold.running[b] = slices.Clone(ps)
	return j.checkpoint(ctx)
}

// roundEnded records, for a durable pipeline, what the last reduce batch of
// level b gave.
func (j *pipeJob) roundEnded(ctx context.Context, b int) error {
	if j.hold == nil {
		return nil
	}
	j.hold.running[b] = nil
	return j.checkpoint(ctx)
}

// headEnded records, for a durable pipeline, that its head phase ended.
func (j *pipeJob) headEnded(ctx context.Context) error {
	if j.hold == nil {
		return nil
	}
	j.hold.head = true
	return j.checkpoint(ctx)
}

// checkpoint writes the durable pipeline's record: what j holds now.
func (j *pipeJob) checkpoint(ctx context.Context) error {
	h := j.hold
	rec := wire.PipelineRecord{Sum: h.rec.Sum, Head: h.head, Fails: j.headFails}
	if j.taskErrs != nil {
		for _, f := range j.taskErrs.Failed {
			e := pipeError(f.Err)
			e.Index, e.Func, e.Stage, e.Attempt, e.Key, e.Stack, e.Worker = f.Index, f.Func, f.Stage, f.Attempt, f.Key, f.Stack, f.Worker
			rec.Errs = append(rec.Errs, *e)
		}
	}
	final := len(j.levels) - 1
	for b, lv := range j.levels {
		kl := wire.PipeLevel{Job: lv.sh.Job, Partitions: lv.sh.Parts, Salts: lv.sh.Salts, Ranges: lv.ranges, Rounds: lv.rounds, Running: h.running[b]}
		for p := range lv.sh.Parts {
			if !j.partDone(b, p) {
				continue
			}
			part := wire.PipePart{Part: p}
			if err, failed := lv.failedParts[p]; failed {
				part.Failed = pipeError(err)
			} else if b == final {
				part.Out = lv.outputs[p]
			} else {
				part.Out.Fails = j.keyFails[[2]int{b, p}]
			}
			kl.Parts = append(kl.Parts, part)
		}
		rec.Levels = append(rec.Levels, kl)
	}
	h.mu.Lock()
	h.rec = rec
	h.mu.Unlock()
	return j.writeRecord(ctx, h, &rec)
}

// writeRecord writes rec, or deletes the record if rec is nil, through the
// pipeline's owner: fenced, riding out a short outage.
func (j *pipeJob) writeRecord(ctx context.Context, h *pipeHold, rec *wire.PipelineRecord) error {
	err := j.m.faults.riding(ctx, func() error {
		return h.o.faults.callQueue("recording a durable pipeline", func() error {
			rctx, cancel := context.WithTimeout(ctx, j.m.opts.RedisTimeout)
			defer cancel()
			return h.o.router.queue().RecordPipeline(rctx, &broker.RecordPipelineParams{Owner: h.owner, Record: rec, TTL: j.m.opts.DurableTTL})
		})
	})
	if err != nil {
		return fmt.Errorf("manager: durable pipeline %q: %w", j.durable, err)
	}
	return nil
}

// renewRecord writes the record again, so that it outlives a long phase
// (the renew loop's, every KeyTTL).
func (j *pipeJob) renewRecord(ctx context.Context) {
	if j.hold == nil {
		return
	}
	j.hold.mu.Lock()
	rec := j.hold.rec
	j.hold.mu.Unlock()
	if err := j.writeRecord(ctx, j.hold, &rec); err != nil && ctx.Err() == nil {
		j.m.log.Warn("cannot renew a durable pipeline's record", "pipeline", j.durable, "err", err)
	}
}

// leave reports whether j is a durable pipeline that has not ended, whose
// partitions and record stay in Redis for the call that takes it over;
// it lets the pipeline's claim go. A durable pipeline that ended (its
// outputs read, or its reader stopped) or that an operator cancelled
// deletes its record and ends its claim: the same call again runs it from
// its start, as it does a durable batch cancelled while held.
func (j *pipeJob) leave() bool {
	h := j.hold
	if h == nil {
		return false
	}
	j.hold = nil
	if !j.ended && (j.run == nil || !j.run.begun.Load()) {
		h.o.detach(redmap.ErrClosed)
		return true
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(j.m.ctx), j.m.opts.RedisTimeout)
	defer cancel()
	if err := j.writeRecord(ctx, h, nil); err != nil {
		j.m.log.Warn("deleting an ended durable pipeline's record failed; it expires after DurableTTL", "pipeline", j.durable, "err", err)
	}
	if err := h.o.Close(); err != nil {
		j.m.log.Warn("ending a durable pipeline's claim failed; it lapses by itself", "pipeline", j.durable, "err", err)
	}
	h.o.owned.parent.remove(h.o.owned.name, h.o)
	return false
}

// endedBy reports whether err, a run's, ends a durable pipeline: nil, or
// failures of its elements and partitions; not its context, a lost claim,
// or Redis.
func endedBy(err error) bool {
	if err == nil {
		return true
	}
	var be *redmap.BatchError
	return errors.As(err, &be) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}
