// Package part is the lifecycle that every long-running part of a manager
// or a worker shares: the manager's collectors, keeper, reaper and
// recoverer, the worker's fetcher, executors, finisher and maintainer. The
// manager's New and the worker's Run build each part from what it needs,
// start them, and stop and wait for them in order.
package part

import (
	"context"
	"runtime/pprof"
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

// StopAll stops every part at once, then waits for them all: for parts
// that do not feed one another, so that none waits for another to stop.
func (l List) StopAll() {
	for _, p := range l {
		p.Stop()
	}
	for _, p := range l {
		p.Wait()
	}
}

// Runner is a Part that runs one function on a goroutine of its own until
// the function returns; Stop ends the function's context.
type Runner struct {
	run   func(ctx context.Context)
	drain func() // Drain's: what Stop calls instead of ending the context

	mu      sync.Mutex
	cancel  context.CancelFunc // nil until Start
	stopped bool
	once    sync.Once
	done    chan struct{}
}

// New returns a Runner of run, which should return once its context ends;
// it runs once Start is called.
func New(run func(ctx context.Context)) *Runner {
	return &Runner{run: run, done: make(chan struct{})}
}

// Drain returns a Runner of run whose Stop calls drain, once, instead of
// ending run's context: for a part that must handle all it was given
// before it returns (drain closes its input, say), its calls to Redis
// going on meanwhile under a context that the end of its work ends.
func Drain(run func(ctx context.Context), drain func()) *Runner {
	return &Runner{run: run, drain: drain, done: make(chan struct{})}
}

// Every returns a Runner that calls tick every interval until it is
// stopped; the first tick comes one interval after Start.
func Every(every time.Duration, tick func(ctx context.Context)) *Runner {
	return New(func(ctx context.Context) {
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

// Start starts the function under a context of ctx, on a goroutine
// labelled with ctx's profiler labels.
func (r *Runner) Start(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancel != nil || r.stopped {
		return // started already, or stopped before it started
	}
	ctx, r.cancel = context.WithCancel(ctx)
	go func() {
		defer r.finish()
		// The owner's profiler labels (a manager's or worker's id, set on
		// ctx with pprof.WithLabels), so that a goroutine profile says
		// whose part each goroutine is; the goroutines it starts inherit
		// them.
		pprof.SetGoroutineLabels(ctx)
		r.run(ctx)
	}()
}

// Stop ends the function's context, or, for a Drain runner, calls its
// drain.
func (r *Runner) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	first := !r.stopped
	r.stopped = true
	if r.drain != nil {
		if first {
			r.drain()
		}
		if r.cancel == nil {
			r.finish() // it never runs
		}
		return
	}
	if r.cancel != nil {
		r.cancel()
	} else {
		r.finish() // it never runs
	}
}

// Wait returns once the function has returned.
func (r *Runner) Wait() { <-r.done }

func (r *Runner) finish() { r.once.Do(func() { close(r.done) }) }

// Set is parts that come and go while their owner runs, one per piece of
// work (a manager's feeder per batch): Go starts one, which leaves the set
// when its function returns; Stop stops every one still running and waits
// for them, and Go starts none after it. A Set is a Part, so its owner
// stops it with the rest of its List; its own Start does nothing.
type Set struct {
	mu      sync.Mutex
	running map[*Runner]struct{}
	stopped bool
}

// Go starts run under ctx as a part of the set, and reports whether it
// did: false once the set is stopped.
func (s *Set) Go(ctx context.Context, run func(ctx context.Context)) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return false
	}
	if s.running == nil {
		s.running = make(map[*Runner]struct{})
	}
	var r *Runner
	r = New(func(ctx context.Context) {
		defer s.leave(r)
		run(ctx)
	})
	s.running[r] = struct{}{}
	r.Start(ctx)
	return true
}

func (s *Set) leave(r *Runner) {
	s.mu.Lock()
	delete(s.running, r)
	s.mu.Unlock()
}

// Start does nothing: the set's parts start with Go.
func (s *Set) Start(context.Context) {}

// Stop stops every part still running, and Go starts no more.
func (s *Set) Stop() {
	for _, r := range s.stop() {
		r.Stop()
	}
}

// Wait returns once every part still running has returned; like Stop,
// it lets Go start no more (a part started after it could not be waited
// for).
func (s *Set) Wait() {
	for _, r := range s.stop() {
		r.Wait()
	}
}

// stop marks the set stopped and returns the parts still running.
func (s *Set) stop() []*Runner {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	rs := make([]*Runner, 0, len(s.running))
	for r := range s.running {
		rs = append(rs, r)
	}
	return rs
}
