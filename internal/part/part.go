// Package part is the lifecycle that every long-running part of a manager
// or a worker shares: the manager's collectors, keeper, reaper and
// recoverer, the worker's fetcher, executors, finisher and maintainer. The
// manager's New and the worker's Run build each part from what it needs,
// start them, and stop and wait for them in order.
package part

import (
	"context"
	"sync"
	"time"
)

// Part is one long-running duty of a manager or a worker.
type Part interface {
	// Start begins the part's work under ctx and returns at once. A part
	// starts once; a Start after Stop does nothing.
	Start(ctx context.Context)
	// Stop asks the part to stop, without waiting for it. It is safe to
	// call more than once, and before Start.
	Stop()
	// Wait returns once the part has stopped: at once if it was stopped
	// before it started.
	Wait()
}

// List is parts that depend on one another: each hands work to those
// before it. Start starts them in order; Stop stops them in the reverse
// order, each stopped and waited for before the next, so that a part
// stops only once the parts that feed it have ended.
type List []Part

// Start starts every part, in order, under ctx.
func (l List) Start(ctx context.Context) {
	for _, p := range l {
		p.Start(ctx)
	}
}

// Stop stops and waits for every part, last first.
func (l List) Stop() {
	for i := len(l) - 1; i >= 0; i-- {
		l[i].Stop()
		l[i].Wait()
	}
}

// Runner is a Part that runs one function on a goroutine of its own until
// the function returns; Stop ends the function's context.
type Runner struct {
	run func(ctx context.Context)

	mu      sync.Mutex
	cancel  context.CancelFunc // nil until Start
	stopped bool
	once    sync.Once
	done    chan struct{}
}

// Run returns a Runner of run, which should return once its context ends.
func Run(run func(ctx context.Context)) *Runner {
	return &Runner{run: run, done: make(chan struct{})}
}

// Every returns a Runner that calls tick every interval until it is
// stopped; the first tick comes one interval after Start.
func Every(every time.Duration, tick func(ctx context.Context)) *Runner {
	return Run(func(ctx context.Context) {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				tick(ctx)
			}
		}
	})
}

// Start starts the function under a context of ctx.
func (r *Runner) Start(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancel != nil || r.stopped {
		return // started already, or stopped before it started
	}
	ctx, r.cancel = context.WithCancel(ctx)
	go func() {
		defer r.finish()
		r.run(ctx)
	}()
}

// Stop ends the function's context.
func (r *Runner) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	if r.cancel != nil {
		r.cancel()
	} else {
		r.finish() // it never runs
	}
}

// Wait returns once the function has returned.
func (r *Runner) Wait() { <-r.done }

func (r *Runner) finish() { r.once.Do(func() { close(r.done) }) }
