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
