package worker

import (
	"context"
	"sync"
	"time"
)

// slots bounds the tasks a worker holds between taking and running them:
// Concurrency running, and a prefetch that adapts to how long tasks take
// (see prefetch). The fetcher acquires, the executors release.
type slots struct {
	mu    sync.Mutex
	used  int
	limit func() int    // the most slots that may be used now
	freed chan struct{} // a token when slots are released
}

func newSlots(limit func() int) *slots {
	return &slots{limit: limit, freed: make(chan struct{}, 1)}
}

// acquire waits until a slot is free, then claims every free one, and
// returns how many it claimed; 0 if ctx ended first.
func (s *slots) acquire(ctx context.Context) int {
	for {
		s.mu.Lock()
		n := s.limit() - s.used
		if n > 0 {
			s.used += n
			s.mu.Unlock()
			return n
		}
		s.mu.Unlock()
		select {
		case <-s.freed:
		case <-ctx.Done():
			return 0
		}
	}
}

// release frees n slots.
func (s *slots) release(n int) {
	if n == 0 {
		return
	}
	s.mu.Lock()
	s.used -= n
	s.mu.Unlock()
	select {
	case s.freed <- struct{}{}:
	default:
	}
}

// prefetchBound is how much work, per slot, a worker takes ahead: a task
// taken ahead waits at most about this long for a slot while another worker
// might have run it.
const prefetchBound = 10 * time.Millisecond

// taskTimes keeps a moving average of how long the worker's tasks run.
type taskTimes struct {
	mu    sync.Mutex
	avg   time.Duration
	known bool
}

// observe adds one task's run time.
func (t *taskTimes) observe(d time.Duration) {
	t.mu.Lock()
	if t.known {
		t.avg = (4*t.avg + d) / 5
	} else {
		t.avg, t.known = d, true
	}
	t.mu.Unlock()
}

// prefetch returns how many tasks the worker may take beyond its
// Concurrency now: about prefetchBound of work per slot at the tasks'
// measured average, at most Options.Prefetch, and none until a task has
// run (a worker that does not yet know how long tasks take would pile long
// ones on itself while other workers idle).
func (w *Worker) prefetch() int {
	w.taskTimes.mu.Lock()
	avg, known := w.taskTimes.avg, w.taskTimes.known
	w.taskTimes.mu.Unlock()
	if !known || w.opts.Prefetch == 0 {
		return 0
	}
	if avg <= 0 {
		return w.opts.Prefetch
	}
	return int(min(int64(w.opts.Prefetch), int64(prefetchBound)*int64(w.opts.Concurrency)/int64(avg)))
}
