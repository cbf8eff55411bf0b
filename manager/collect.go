package manager

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/backoff"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/rdb"
)

// collect reads the result list of shard s until ctx ends and hands each
// result to the batch waiting for it; between reads it keeps the shard's
// keys alive and reconciles (see reconcile). If the shard's Redis stays
// unreachable for RedisTimeout, what is outstanding there fails with
// ErrUnavailable; if it refuses the read for good (an ACL, say), everything
// outstanding fails at once, with the refusal.
func (m *Manager) collect(ctx context.Context, s *shard) {
	var (
		handled int    // entries read last time, to trim off with the next read
		mark    string // the start of the last of them
		waited  bool   // they came from a wait (WaitResults), not a read
		bo      backoff.Backoff
		tickAt  = time.Now().Add(m.opts.Poll)
	)
	for ctx.Err() == nil {
		started := time.Now()
		var entries []string
		var err error
		if waited {
			// The last entry came alone, from a wait: the read that trims
			// it will likely find nothing more, so the next wait goes
			// behind it in the same round trip.
			entries, waited, err = s.rdb.ReadThenWait(ctx, m.id, handled, mark, collectMax, m.opts.Poll)
		} else {
			entries, err = s.rdb.ReadResults(ctx, m.id, handled, mark, collectMax)
			if err == nil && len(entries) == 0 {
				// Wait for the next entry; it comes with the wait, and the
				// next read trims it as handled.
				var first string
				if first, err = s.rdb.WaitResults(ctx, m.id, m.opts.Poll); first != "" {
					entries = []string{first}
				}
				waited = true
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			// The trim may or may not have been applied: read from the
			// start again; entries seen twice are dropped as duplicates.
			handled, waited = 0, false
			m.failed(s, "reading results", started, err)
			if !bo.Wait(ctx) {
				return
			}
			continue
		}
		s.outage.up()
		bo.Reset()
		m.dispatchAll(entries)
		handled = len(entries)
		if handled > 0 {
			mark = rdb.Mark(entries[handled-1])
		}
		if now := time.Now(); now.After(tickAt) {
			m.reconcile(ctx, s)
			tickAt = now.Add(m.opts.Poll)
		}
	}
}

// redisError says what a call to Redis begun at started that failed means
// for a caller: a *redmap.CommandError if Redis refused it for good,
// ErrUnavailable if Redis could not be reached (the outage clock of shard
// 0, where queue-wide calls go, starts at started), ErrRedisFull at
// maxmemory.
func (m *Manager) redisError(op string, started time.Time, err error) error {
	return m.shardError(m.shardList()[0], op, started, err)
}

// shardError is redisError for a call to shard s.
func (m *Manager) shardError(s *shard, op string, started time.Time, err error) error {
	if len(m.shardList()) > 1 {
		op += " (shard " + strconv.Itoa(s.i) + ")"
	}
	switch {
	case rdb.Refused(err):
		return err
	case rdb.OutOfMemory(err):
		return fmt.Errorf("%w: %s: %w", redmap.ErrRedisFull, op, err)
	case rdb.Transient(err):
		s.outage.down(started)
		return fmt.Errorf("%w: %s: %w", redmap.ErrUnavailable, op, err)
	}
	return fmt.Errorf("manager: %s: %w", op, err)
}

// failed handles a failed call of shard s's collector (a read, a renewal,
// a reap, a check for lost data), so that no outstanding element waits for
// ever: a refusal fails every outstanding task at once with the error that
// names the refused command, since the manager can no longer guarantee
// their results; an outage fails the shard's once it has lasted
// RedisTimeout.
func (m *Manager) failed(s *shard, op string, started time.Time, err error) {
	err = m.shardError(s, op, started, err)
	var ce *redmap.CommandError
	switch {
	case errors.As(err, &ce):
		m.log.Error("Redis refused a command the manager needs; failing its outstanding tasks", "op", op, "err", err)
		m.failAll(err)
	case errors.Is(err, redmap.ErrUnavailable):
		down := s.outage.length()
		if down < m.opts.RedisTimeout {
			m.log.Warn("Redis unreachable; retrying", "op", op, "err", err, "for", down.Round(time.Millisecond))
			return
		}
		if n := m.failShard(s, fmt.Errorf("%w (for %v, RedisTimeout %v)", err, down.Round(time.Second), m.opts.RedisTimeout)); n > 0 {
			m.log.Error("Redis unreachable for RedisTimeout; outstanding tasks failed", "op", op, "tasks", n, "err", err)
		}
	default:
		m.log.Warn("Redis call failed; retrying", "op", op, "err", err)
	}
}

// reconcile runs once per Poll for shard s while its collector is healthy.
// It renews the manager's keys there every KeyTTL/3; reaps workers whose
// lease expired, so their tasks run again (workers reap too: whoever
// notices first); and checks, with one HMGET, that Redis still has every
// task the manager submitted there (see recover). Shard 0's collector also
// does what is queue-wide: renews the batches' holds of constants (storing
// again one Redis lost), asks
// which running batches some live worker serves (checkServed), publishes
// progress, and tells workers the shard count.
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

// dispatchAll dispatches entries, decoding them on up to GOMAXPROCS
// goroutines when there are many, and returns once all are handled.
func (m *Manager) dispatchAll(entries []string) {
	const perGoroutine = 64 // fewer, and a goroutine costs more than it saves
	parts := min(runtime.GOMAXPROCS(0), len(entries)/perGoroutine)
	if parts < 2 {
		for _, e := range entries {
			m.dispatch(e)
		}
		return
	}
	var wg sync.WaitGroup
	size := (len(entries) + parts - 1) / parts
	for start := 0; start < len(entries); start += size {
		part := entries[start:min(start+size, len(entries))]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, e := range part {
				m.dispatch(e)
			}
		}()
	}
	wg.Wait()
}

// dispatch hands one entry of the result list to its batch, or drops it if
// its task is not pending: a stale or duplicate result is never returned.
func (m *Manager) dispatch(entry string) {
	e := rdb.DecodeEntry(entry)
	switch e.Kind {
	case rdb.EntryLost:
		m.failTask(e.Task, fmt.Errorf("%w: worker %s died, and the batch was sent to its private queue", redmap.ErrLost, e.Worker))
		return
	case rdb.EntryPurged:
		m.failTask(e.Task, fmt.Errorf("%w: purged from the queue by an operator", redmap.ErrLost))
		return
	case rdb.EntryWake:
		return
	}
	m.resultBytes.Add(int64(len(e.Result)))
	r, err := codec.DecodeResult(e.Result, m.opts.MaxFrame)
	if r == nil {
		m.dropped.Add(1)
		m.log.Warn("dropped an unreadable result", "err", err)
		return
	}
	m.mu.Lock()
	p, ok := m.pending[r.Task]
	delete(m.pending, r.Task)
	m.mu.Unlock()
	if !ok {
		m.dropped.Add(1)
		return
	}
	p.batch.deliver(p.chunk, r, err)
}

// failShard fails every pending task of shard s with cause, and returns how
// many.
func (m *Manager) failShard(s *shard, cause error) int {
	if len(m.shardList()) == 1 {
		return m.failAll(cause)
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return 0
	}
	var failed []pending
	for tid, p := range m.pending {
		if m.shardOf(tid) == s {
			failed = append(failed, p)
			delete(m.pending, tid)
		}
	}
	m.mu.Unlock()
	for _, p := range failed {
		p.batch.fail(p.chunk, 0, cause)
	}
	return len(failed)
}

// failAll fails every pending task with cause, and returns how many.
func (m *Manager) failAll(cause error) int {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return 0
	}
	all := m.pending
	m.pending = make(map[string]pending)
	m.mu.Unlock()
	for _, p := range all {
		p.batch.fail(p.chunk, 0, cause)
	}
	return len(all)
}

// failTask fails a pending task with cause, or drops the news if it is not
// pending.
func (m *Manager) failTask(tid string, cause error) {
	m.mu.Lock()
	p, ok := m.pending[tid]
	delete(m.pending, tid)
	m.mu.Unlock()
	if !ok {
		m.dropped.Add(1)
		return
	}
	p.batch.fail(p.chunk, 0, cause)
}
