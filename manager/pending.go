package manager

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/broker"
)

// pendingTasks is the manager's task set as it knows it: for each task
// that waits for a result, the batch and chunk it is of. A result counts
// only if take finds its task here, and take removes it, so a stale or
// duplicate result finds nothing and is dropped.
type pendingTasks struct {
	mu     sync.Mutex
	tasks  map[string]pending
	closed bool
}

// pending is an outstanding task: the batch that waits for it and the index of
// its chunk in that batch.
type pending struct {
	batch batch
	chunk int
}

func newPendingTasks() *pendingTasks { return &pendingTasks{tasks: make(map[string]pending)} }

// add records tasks tids of b as pending, the first one as chunk first of
// b; it fails with ErrClosed once the manager is closed.
func (p *pendingTasks) add(b batch, tids []string, first int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return redmap.ErrClosed
	}
	for i, tid := range tids {
		p.tasks[tid] = pending{batch: b, chunk: first + i}
	}
	return nil
}

// take removes task tid and returns where its result goes, if it was
// pending.
func (p *pendingTasks) take(tid string) (pending, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.tasks[tid]
	delete(p.tasks, tid)
	return t, ok
}

// get returns where task tid's result goes, if it is pending, and leaves it
// pending.
func (p *pendingTasks) get(tid string) (pending, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.tasks[tid]
	return t, ok
}

// forget removes tasks and returns the ones that were still pending.
func (p *pendingTasks) forget(tids []string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var still []string
	for _, tid := range tids {
		if _, ok := p.tasks[tid]; ok {
			delete(p.tasks, tid)
			still = append(still, tid)
		}
	}
	return still
}

// takeAll removes every pending task that keep accepts (every one, if keep
// is nil) and returns them; nothing once closed.
func (p *pendingTasks) takeAll(keep func(tid string) bool) []pending {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	var out []pending
	if keep == nil {
		out = make([]pending, 0, len(p.tasks))
		for _, t := range p.tasks {
			out = append(out, t)
		}
		p.tasks = make(map[string]pending)
		return out
	}
	for tid, t := range p.tasks {
		if keep(tid) {
			out = append(out, t)
			delete(p.tasks, tid)
		}
	}
	return out
}

// ids returns the ids of the pending tasks that keep accepts.
func (p *pendingTasks) ids(keep func(tid string) bool) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for tid := range p.tasks {
		if keep(tid) {
			out = append(out, tid)
		}
	}
	return out
}

// count returns how many tasks wait for a result.
func (p *pendingTasks) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.tasks)
}

// close marks the set closed (add fails from now on) and empties it,
// returning what was pending, and false if it was closed already.
func (p *pendingTasks) close() (map[string]pending, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, false
	}
	p.closed = true
	all := p.tasks
	p.tasks = make(map[string]pending)
	return all, true
}

// withdrawal takes a batch's outstanding tasks back: out of the pending
// set, and cancelled in Redis, so that workers skip them and their results
// are dropped. A cancel that fails is tried again every Poll (retry, the
// keeper's) until it passes: a task left in the task set would otherwise
// stay there, renewed, as long as the manager lives.
type withdrawal struct {
	mid     string
	pending *pendingTasks
	router  *router
	log     *slog.Logger

	mu   sync.Mutex
	left []string // tasks whose cancel failed, for retry
}

// withdrawBudget bounds one try at cancelling tasks in Redis.
const withdrawBudget = 5 * time.Second

// withdraw withdraws tids: those still pending are cancelled on their
// shards, one call per shard, within withdrawBudget; those a failure left
// are tried again every Poll (workers may run them meanwhile, and their
// results are discarded).
func (w *withdrawal) withdraw(tids []string) {
	still := w.pending.forget(tids)
	if len(still) == 0 {
		return
	}
	if err := w.cancel(context.Background(), still); err != nil {
		w.mu.Lock()
		w.left = append(w.left, still...)
		w.mu.Unlock()
		w.log.Warn("withdrawing tasks failed; trying again every Poll (workers may run them meanwhile, and their results are discarded)", "tasks", len(still), "err", err)
	}
}

// retry cancels again the tasks a withdrawal could not (the keeper's,
// every Poll).
func (w *withdrawal) retry(ctx context.Context) {
	w.mu.Lock()
	left := w.left
	w.left = nil
	w.mu.Unlock()
	if len(left) == 0 {
		return
	}
	if err := w.cancel(ctx, left); err != nil {
		w.mu.Lock()
		w.left = append(left, w.left...)
		w.mu.Unlock()
		return
	}
	w.log.Info("withdrew the tasks an earlier withdrawal could not", "tasks", len(left))
}

// cancel cancels tids on their shards, within withdrawBudget.
func (w *withdrawal) cancel(ctx context.Context, tids []string) error {
	ctx, cancel := context.WithTimeout(ctx, withdrawBudget)
	defer cancel()
	return eachShard(w.router.byShard(tids), func(s *shard, tids []string) error {
		return s.rdb.Cancel(ctx, &broker.CancelParams{Manager: w.mid, Tasks: tids})
	})
}
