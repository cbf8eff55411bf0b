package manager

import (
	"context"
	"fmt"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/rdb"
)

// reconcile runs once per Poll for shard s while its collector is healthy.
// It renews the manager's keys there every KeyTTL/3; reaps workers whose
// lease expired, so their tasks run again (workers reap too: whoever
// notices first); and checks, with one HMGET, that Redis still has every
// task the manager submitted there (see recover). Shard 0's collector also
// does what is queue-wide: renews the batches' holds of constants (storing
// again one Redis lost), asks which running batches some live worker serves
// (checkServed), publishes progress, and tells workers the shard count.
func (m *Manager) reconcile(ctx context.Context, s *shard) {
	started := time.Now()
	if time.Now().After(s.renewAt) {
		if err := s.rdb.Renew(ctx, m.id, m.opts.KeyTTL); err != nil {
			m.failedUnlessDone(ctx, s, "renewing keys", started, err)
		}
		s.renewAt = time.Now().Add(m.opts.KeyTTL / 3)
	}
	if s.i == 0 {
		// Every Poll, not every KeyTTL/3: a constant lives on a master of
		// its own, which may lose it (a failover ahead of its replica)
		// while the queue's does not, and workers wait for it.
		m.renewHolds(ctx)
		m.checkServed(ctx, started)
		m.publishBatches(ctx)
		if err := m.publishShards(ctx); err != nil {
			m.failedUnlessDone(ctx, s, "publishing the queue's shard names", started, err)
		}
	}
	if r, err := s.rdb.Reap(ctx); err != nil {
		m.failedUnlessDone(ctx, s, "reaping dead workers", started, err)
	} else if r.Workers > 0 {
		m.log.Info("reaped dead workers", "workers", r.Workers, "requeued", r.Requeued, "lost", r.Lost, "shard", s.i)
	}
	if m.outstanding() == 0 && !s.lossSeen.Load() {
		return
	}
	// acked is read before Redis's count: every submit that raised acked
	// had raised Redis's count first, so on a Redis that keeps its data the
	// count read next is at least acked, whatever submits run meanwhile. The
	// epoch changes only in recovery, which no check runs beside.
	acked, epoch := s.acked.Load(), *s.epoch.Load()
	have, hasEpoch, err := s.rdb.Submitted(ctx, m.id)
	if m.hooks.checked != nil {
		m.hooks.checked()
	}
	if err != nil {
		m.failedUnlessDone(ctx, s, "checking for lost data", started, err)
		return
	}
	// Before the first submit is acknowledged there is nothing to lose (and
	// the set may not exist yet).
	if acked > 0 && (have < acked || hasEpoch != epoch) || s.lossSeen.Load() {
		m.recover(ctx, s)
	}
}

// checkServed looks, for each running batch of the public queue, whether
// some live worker serves its function: one script call per Poll while
// batches run. A batch nobody serves is announced at once (a warning, and
// Progress.Waiting), and its waiting elements fail with ErrNoWorker once no
// one has served it for NoWorkerTimeout.
func (m *Manager) checkServed(ctx context.Context, started time.Time) {
	m.mu.Lock()
	var bs []batch
	index := map[string]int{}
	var names []string
	for _, b := range m.batches {
		name, public := b.function()
		if !public {
			continue
		}
		bs = append(bs, b)
		if _, ok := index[name]; !ok {
			index[name] = len(names)
			names = append(names, name)
		}
	}
	m.mu.Unlock()
	if len(bs) == 0 {
		return
	}
	served, err := m.rdb.Served(ctx, names)
	if err != nil {
		m.failedUnlessDone(ctx, m.shardList()[0], "checking that workers serve the batches", started, err)
		return
	}
	now := time.Now()
	for _, b := range bs {
		name, _ := b.function()
		why := fmt.Sprintf("no live worker of queue %q serves %q (is one running with that queue and function?)", m.opts.Queue, name)
		began, expired := b.served(served[index[name]], now, m.opts.NoWorkerTimeout, why)
		if began {
			m.log.Warn("a batch waits: "+why, "batch", b.snapshot().Func, "fails_after", m.opts.NoWorkerTimeout)
		}
		if expired {
			m.log.Error("failing a batch nobody served: "+why, "for", m.opts.NoWorkerTimeout)
			b.failWaiting(fmt.Errorf("%w: %s, for %v (manager.Options.NoWorkerTimeout)", redmap.ErrNoWorker, why, m.opts.NoWorkerTimeout))
		}
	}
}

// failedUnlessDone is failed, except that a call cut short by the manager's
// Close is not worth a log line above debug.
func (m *Manager) failedUnlessDone(ctx context.Context, s *shard, op string, started time.Time, err error) {
	if ctx.Err() != nil {
		m.log.Debug("stopped while "+op, "err", err)
		return
	}
	m.failed(s, op, started, err)
}

// outstanding returns how many tasks wait for a result.
func (m *Manager) outstanding() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.pending)
}

// submitted records the count a submit script on shard s returned (see
// rdb.Submit), and whether Redis's count was as high as expected before it.
func (s *shard) submitted(count int64, intact bool) {
	for {
		a := s.acked.Load()
		if count <= a || s.acked.CompareAndSwap(a, count) {
			break
		}
	}
	if !intact {
		s.lossSeen.Store(true)
	}
}

// recover puts back what Redis lost on shard s: the constants of running batches, then
// every outstanding task its task set no longer holds, under its old id, so
// results of runs still going on count as well. It holds sendMu, so no
// submit runs meanwhile, and Redis's count it ends with is exact: it becomes
// acked. A task whose result was delivered but not yet read is submitted
// again too (it is not in the set either); its second result is discarded.
// Runs of a task from before and after the loss may both finish; the first
// result is delivered, the other discarded. On failure it is tried again the
// next Poll.
func (m *Manager) recover(ctx context.Context, s *shard) {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	started := time.Now()
	m.mu.Lock()
	tids := make([]string, 0, len(m.pending))
	for tid := range m.pending {
		if m.shardOf(tid) == s {
			tids = append(tids, tid)
		}
	}
	m.mu.Unlock()
	// The count, the epoch and what is missing come from one script call, so
	// from one server even while a failover moves clients (see rdb.Missing).
	missing, have, hasEpoch, err := s.rdb.Missing(ctx, m.id, tids)
	if err != nil {
		m.failedUnlessDone(ctx, s, "finding lost tasks", started, err)
		return
	}
	acked, epoch := s.acked.Load(), *s.epoch.Load()
	if (acked == 0 || have >= acked && hasEpoch == epoch) && !s.lossSeen.Load() {
		return
	}
	if err := m.restoreHolds(ctx); err != nil {
		m.failedUnlessDone(ctx, s, "storing lost constants again", started, err)
		return
	}
	// One submit per list: a worker's private list, or a public list of
	// one priority.
	type list struct {
		wid      string
		priority int
	}
	byList := make(map[list][]rdb.Task)
	for _, tid := range missing {
		m.mu.Lock()
		p, ok := m.pending[tid]
		m.mu.Unlock()
		if !ok {
			continue // its result came meanwhile
		}
		t, wid, err := p.batch.resubmission(p.chunk)
		if err != nil {
			// Encoding succeeded the first time; it cannot fail now, but
			// if it does, fail the task rather than wait for it for ever.
			if len(m.forget([]string{tid})) == 1 {
				p.batch.fail(p.chunk, 0, err)
			}
			continue
		}
		l := list{wid: wid, priority: id.Priority(tid, DefaultPriority)}
		byList[l] = append(byList[l], t)
	}
	if len(byList) == 0 {
		byList[list{}] = nil // still one call: it installs the new epoch
	}
	// The first submit checks that the set is still as the check read it and
	// installs a new epoch: the set's history is now the one the manager
	// knows, and a set of any other (a primary about to be replaced, with
	// its own history) differs from it, however its count compares. Each
	// later submit checks what the one before it left. A set that differs
	// makes recovery start over next Poll.
	fresh := id.New()[:16]
	exp := rdb.Expect{Count: have, Epoch: hasEpoch, NewEpoch: fresh}
	for l, tasks := range byList {
		count, intact, err := s.rdb.Submit(ctx, m.id, l.wid, tasks, m.opts.KeyTTL, exp)
		if err != nil {
			m.failedUnlessDone(ctx, s, "submitting lost tasks again", started, err)
			return
		}
		if !intact {
			s.lossSeen.Store(true)
			m.log.Warn("Redis lost data again while the manager put back what it had lost; retrying")
			return
		}
		exp = rdb.Expect{Count: count, Epoch: fresh}
	}
	s.epoch.Store(&fresh)
	s.acked.Store(exp.Count)
	s.lossSeen.Store(false)
	m.log.Warn("Redis lost writes of this manager; outstanding tasks it no longer held were submitted again",
		"resubmitted", len(missing), "outstanding", len(tids), "count_in_redis", have, "shard", s.i)
}
