package manager

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/rdb"
)

// collect reads the manager's result list until ctx ends and hands each
// result to the batch waiting for it; between reads it keeps the manager's
// keys alive and reconciles (see reconcile). If Redis stays unreachable for
// longer than RedisTimeout, what is outstanding fails with ErrUnavailable.
func (m *Manager) collect(ctx context.Context) {
	defer close(m.stopped)
	var (
		handled   int    // entries read last time, to trim off with the next read
		mark      string // the start of the last of them
		downSince time.Time
		delay     time.Duration
		tickAt    = time.Now().Add(m.opts.Poll)
	)
	for ctx.Err() == nil {
		entries, err := m.rdb.ReadResults(ctx, m.id, handled, mark, collectMax)
		if err == nil && len(entries) == 0 {
			err = m.rdb.WaitResults(ctx, m.id, m.opts.Poll)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			// The trim may or may not have been applied: read from the
			// start again; entries seen twice are dropped as duplicates.
			handled = 0
			if downSince.IsZero() {
				downSince = time.Now()
			}
			m.log.Warn("reading results failed", "err", err, "for", time.Since(downSince))
			if time.Since(downSince) >= m.opts.RedisTimeout {
				m.failAll(fmt.Errorf("%w: %v", redmap.ErrUnavailable, err))
				downSince = time.Now()
			}
			delay = min(max(2*delay, 50*time.Millisecond), time.Second)
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
			continue
		}
		downSince, delay = time.Time{}, 0
		for _, e := range entries {
			m.dispatch(e)
		}
		handled = len(entries)
		if handled > 0 {
			mark = rdb.Mark(entries[handled-1])
		}
		if now := time.Now(); now.After(tickAt) {
			m.reconcile(ctx)
			tickAt = now.Add(m.opts.Poll)
		}
	}
}

// reconcile runs once per Poll while the collector is healthy. It renews the
// manager's keys and its batches' holds every KeyTTL/3; reaps workers whose
// lease expired, so their tasks run again (workers reap too: whoever notices
// first); and, if Redis lost the manager's data while tasks are outstanding,
// submits those tasks again from the inputs it holds.
func (m *Manager) reconcile(ctx context.Context) {
	if time.Now().After(m.renewAt) {
		if err := m.rdb.Renew(ctx, m.id, m.opts.KeyTTL); err != nil {
			m.log.Warn("renewing keys failed", "err", err)
		}
		m.renewHolds(ctx)
		m.renewAt = time.Now().Add(m.opts.KeyTTL / 3)
	}
	m.publishBatches(ctx)
	if r, err := m.rdb.Reap(ctx); err != nil {
		m.log.Warn("reap failed", "err", err)
	} else if r.Workers > 0 {
		m.log.Info("reaped dead workers", "workers", r.Workers, "requeued", r.Requeued, "lost", r.Lost)
	}
	m.mu.Lock()
	outstanding := len(m.pending)
	m.mu.Unlock()
	if outstanding == 0 {
		return
	}
	lost, err := m.rdb.DataLost(ctx, m.id)
	if err != nil || !lost {
		return
	}
	m.log.Warn("Redis lost the manager's data; submitting outstanding tasks again", "tasks", outstanding)
	if err := m.recover(ctx); err != nil {
		m.log.Warn("submitting again failed; will retry", "err", err)
	}
}

// recover puts back what Redis lost: the constants of running batches, then
// every outstanding task, under its old id, so results of runs still going on
// count as well. Runs of a task from before and after the loss may both
// finish; the first result is delivered, the other discarded.
func (m *Manager) recover(ctx context.Context) error {
	if err := m.restoreHolds(ctx); err != nil {
		return err
	}
	m.mu.Lock()
	snapshot := make(map[string]pending, len(m.pending))
	for tid, p := range m.pending {
		snapshot[tid] = p
	}
	m.mu.Unlock()
	byWorker := make(map[string][]rdb.Task)
	for tid, p := range snapshot {
		t, wid, err := p.batch.resubmission(p.chunk)
		if err != nil {
			// Encoding succeeded the first time; it cannot fail now, but
			// if it does, fail the task rather than wait for it for ever.
			m.forget([]string{tid})
			p.batch.fail(p.chunk, err)
			continue
		}
		byWorker[wid] = append(byWorker[wid], t)
	}
	for wid, tasks := range byWorker {
		if err := m.rdb.Submit(ctx, m.id, wid, tasks, m.opts.KeyTTL); err != nil {
			return err
		}
	}
	return nil
}

// dispatch hands one encoded result to its batch, or drops it if its task is
// not pending: a stale or duplicate result is never returned.
func (m *Manager) dispatch(entry string) {
	if rest, ok := strings.CutPrefix(entry, "lost "); ok {
		m.lost(rest)
		return
	}
	if tid, ok := strings.CutPrefix(entry, "purged "); ok {
		m.failTask(tid, fmt.Errorf("%w: purged from the queue by an operator", redmap.ErrLost))
		return
	}
	r, err := codec.DecodeResult([]byte(entry), m.opts.MaxFrame)
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

// failAll fails every pending task with cause.
func (m *Manager) failAll(cause error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	all := m.pending
	m.pending = make(map[string]pending)
	m.mu.Unlock()
	for _, p := range all {
		p.batch.fail(p.chunk, cause)
	}
}

// lost fails a private task whose worker died: "<task id> <worker id>", as
// pushed by the reap script.
func (m *Manager) lost(entry string) {
	tid, wid, _ := strings.Cut(entry, " ")
	m.failTask(tid, fmt.Errorf("%w: worker %s died, and the batch was sent to its private queue", redmap.ErrLost, wid))
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
	p.batch.fail(p.chunk, cause)
}
