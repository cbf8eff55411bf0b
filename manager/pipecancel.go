package manager

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/redmap/redmap"
)

// pipeRun is a pipeline as an operator's cancel finds it: its name
// (codec.CallInfo.Pipeline) and what stops it.
type pipeRun struct {
	name  string
	named func(string) // names the run's span
	// stop ends the context every batch of the run is submitted with: the
	// running ones end, and no later one is submitted.
	stop context.CancelCauseFunc
	// said is closed once why is set: an operator's cancel, what the run
	// returns. begun is set before the cancel ends any of its batches.
	begun atomic.Bool
	said  chan struct{}
	why   error
}

func newPipeRun(stop context.CancelCauseFunc) *pipeRun {
	return &pipeRun{stop: stop, said: make(chan struct{})}
}

// pipes lists the pipelines a manager runs, by name, for the keeper to
// cancel one that an operator cancelled: by its name (redmap cancel), or
// one of its batches (redmap cancel, the dashboard). A manager and its
// durable batches' owners share one, since a durable pipeline's batches
// run on owners.
type pipes struct {
	mu      sync.Mutex
	running map[string]*pipeRun
	// stages are the stage counts of the pipelines running, as their
	// batches' records were written: what the recoverer puts back when
	// Redis lost them.
	stages *stageBook
}

func newPipes() *pipes { return &pipes{running: make(map[string]*pipeRun), stages: newStageBook()} }

// list records run under its name.
func (p *pipes) list(run *pipeRun) {
	p.mu.Lock()
	p.running[run.name] = run
	p.mu.Unlock()
}

// unlist forgets run, once it returned (if it was listed), and its stage
// counts: its records are written.
func (p *pipes) unlist(run *pipeRun) {
	p.mu.Lock()
	if p.running[run.name] == run {
		delete(p.running, run.name)
		p.stages.forget(run.name)
	}
	p.mu.Unlock()
}

// cancel stops pipeline name, if it runs, and reports whether it did. end
// cancels the batches of it the caller holds (each as an operator's cancel
// of it, its tasks withdrawn, durable or not) and returns what they had
// done when they ended; then the run's context ends (any other batch of
// it, and no later one submitted). how says how the operator cancelled it
// ("" for by its name). The run returns the cancel, saying what its
// batches had done, whichever end it sees first.
func (p *pipes) cancel(name, how string, end func() []Progress) bool {
	p.mu.Lock()
	run, ok := p.running[name]
	p.mu.Unlock()
	if !ok || !run.begun.CompareAndSwap(false, true) {
		end()
		return ok
	}
	run.why = pipelineCancelled(name, how, end())
	close(run.said)
	run.stop(&operatorCancel{run.why})
	return true
}

// operatorCancel is the cause a pipeline's context ends with when an
// operator cancelled it (pipes.cancel): a durable batch of it that the end
// stops ends as cancelled, its tasks withdrawn and its keys deleted, not
// left in Redis for a call to take over (Batch.abort).
type operatorCancel struct{ error }

func (e *operatorCancel) Unwrap() error { return e.error }

// cancelledByOperator reports whether ctx, a batch's submit context (nil
// before its submit), ended with an operator's cancel of its pipeline.
func cancelledByOperator(ctx context.Context) bool {
	var oc *operatorCancel
	return ctx != nil && errors.As(context.Cause(ctx), &oc)
}

// pipelineCancelled is the error of pipeline name that an operator
// cancelled, how, when its running batches had made progress ps.
func pipelineCancelled(name, how string, ps []Progress) error {
	if how != "" {
		how = " (" + how + ")"
	}
	var total, done, failed int
	for _, p := range ps {
		total, done, failed = total+p.Total, done+p.Done-p.Failed, failed+p.Failed
	}
	return fmt.Errorf("manager: pipeline %q cancelled by an operator%s; no later stage runs; of its running batches' %d elements, %d done, %d failed, %d cancelled: %w",
		name, how, total, done, failed, total-done-failed, redmap.ErrCancelled)
}

// cancelledRun returns the error of run, which ended with err: the
// operator's cancel if there was one (its batches then end with
// context.Canceled), else err.
func cancelledRun(run *pipeRun, err error) error {
	if run.begun.Load() {
		<-run.said // the cancel's end returns at once: its batches ended
		return run.why
	}
	return err
}
