package manager

import (
	"context"
	"fmt"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/codec"
)

// collect reads the manager's result list until ctx ends and hands each
// result to the batch waiting for it; between reads it keeps the manager's
// keys alive and reconciles (see reconcile). If Redis stays unreachable for
// longer than RedisTimeout, what is outstanding fails with ErrUnavailable.
func (m *Manager) collect(ctx context.Context) {
	defer close(m.stopped)
	var (
		trim      int // entries read last time, to trim off with the next read
		downSince time.Time
		delay     time.Duration
		tickAt    = time.Now().Add(m.opts.Poll)
	)
	for ctx.Err() == nil {
		entries, err := m.rdb.ReadResults(ctx, m.id, trim, collectMax)
		if err == nil && len(entries) == 0 {
			err = m.rdb.WaitResults(ctx, m.id, m.opts.Poll)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			// The trim may or may not have been applied: read from the
			// start again; entries seen twice are dropped as duplicates.
			trim = 0
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
		trim = len(entries)
		if now := time.Now(); now.After(tickAt) {
			m.reconcile(ctx)
			tickAt = now.Add(m.opts.Poll)
		}
	}
}

// reconcile runs once per Poll while the collector is healthy: it renews the
// manager's keys and its batches' holds every KeyTTL/3.
func (m *Manager) reconcile(ctx context.Context) {
	if time.Now().After(m.renewAt) {
		if err := m.rdb.Renew(ctx, m.id, m.opts.KeyTTL); err != nil {
			m.log.Warn("renewing keys failed", "err", err)
		}
		m.renewHolds(ctx)
		m.renewAt = time.Now().Add(m.opts.KeyTTL / 3)
	}
}

// dispatch hands one encoded result to its batch, or drops it if its task is
// not pending: a stale or duplicate result is never returned.
func (m *Manager) dispatch(entry string) {
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
