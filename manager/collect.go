package manager

import (
	"context"
	"fmt"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/codec"
)

// collect pops the manager's result list until ctx ends, hands each result to
// the batch waiting for it, renews the manager's keys, and fails what is
// outstanding if Redis stays unreachable for longer than RedisTimeout.
func (m *Manager) collect(ctx context.Context) {
	defer close(m.stopped)
	renewEvery := m.opts.KeyTTL / 3
	renewAt := time.Now().Add(renewEvery)
	var downSince time.Time
	delay := time.Duration(0)
	for ctx.Err() == nil {
		entries, err := m.rdb.Collect(ctx, m.id, m.opts.Poll, collectMax)
		for _, e := range entries {
			m.dispatch(e)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if downSince.IsZero() {
				downSince = time.Now()
			}
			m.log.Warn("collecting results failed", "err", err, "for", time.Since(downSince))
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
		if time.Now().After(renewAt) {
			if err := m.rdb.Renew(ctx, m.id, m.opts.KeyTTL); err != nil {
				m.log.Warn("renewing keys failed", "err", err)
			}
			m.renewHolds(ctx)
			renewAt = time.Now().Add(renewEvery)
		}
	}
}

// dispatch hands one encoded result to its batch, or drops it if its task is
// not pending: a stale or duplicate result is never returned.
func (m *Manager) dispatch(entry string) {
	if entry == "" {
		return // pushed by Close to wake the collector
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
