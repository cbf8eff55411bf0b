package manager

import (
	"context"
	"fmt"
	"time"

	"github.com/redmap/redmap/cache"
)

// hold stores an encoded constant (unless it is already stored) and holds it
// for a new batch; the collector renews the hold every KeyTTL/3 until the
// batch ends and release drops it. A manager killed before then leaks
// nothing: its hold expires after KeyTTL and Redis deletes the value.
func (m *Manager) hold(ctx context.Context, enc []byte) (cache.Ref, string, error) {
	holder := fmt.Sprintf("%s:%d", m.id, m.holdSeq.Add(1))
	ref, _, err := m.store.Put(ctx, enc, holder, m.opts.KeyTTL)
	if err != nil {
		return ref, "", err
	}
	m.mu.Lock()
	m.holds[holder] = hold{ref: ref, enc: enc}
	m.mu.Unlock()
	return ref, holder, nil
}

// hold is a running batch's hold on a constant, with the encoded constant to
// upload again if Redis loses it.
type hold struct {
	ref cache.Ref
	enc []byte
}

// release drops a batch's hold; the value is deleted if no other live batch
// holds it. Releasing twice is harmless.
func (m *Manager) release(holder string) {
	m.mu.Lock()
	h, ok := m.holds[holder]
	delete(m.holds, holder)
	m.mu.Unlock()
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := m.store.Release(ctx, h.ref, holder); err != nil {
		m.log.Warn("releasing constant failed; its hold expires", "ref", h.ref, "err", err)
	}
}

// restoreHolds stores again, and holds, every constant of a running batch,
// after Redis lost them.
func (m *Manager) restoreHolds(ctx context.Context) error {
	m.mu.Lock()
	holds := make(map[string]hold, len(m.holds))
	for k, h := range m.holds {
		holds[k] = h
	}
	m.mu.Unlock()
	for holder, h := range holds {
		if _, _, err := m.store.Put(ctx, h.enc, holder, m.opts.KeyTTL); err != nil {
			return err
		}
	}
	return nil
}

// renewHolds extends every hold of a running batch by KeyTTL.
func (m *Manager) renewHolds(ctx context.Context) {
	m.mu.Lock()
	holds := make(map[string]hold, len(m.holds))
	for k, h := range m.holds {
		holds[k] = h
	}
	m.mu.Unlock()
	for holder, h := range holds {
		ok, err := m.store.Hold(ctx, h.ref, holder, m.opts.KeyTTL)
		if err != nil && ctx.Err() != nil {
			return
		}
		if err != nil {
			m.log.Warn("renewing a constant's hold failed", "ref", h.ref, "err", err)
		} else if !ok {
			// Gone with the rest of Redis's data, or deleted by hand: put
			// it back, so the batch's tasks can still run.
			if _, _, err := m.store.Put(ctx, h.enc, holder, m.opts.KeyTTL); err != nil {
				m.log.Warn("storing a lost constant again failed", "ref", h.ref, "err", err)
			}
		}
	}
}

// ConstantUploads returns how many constants this manager uploaded, and their
// bytes; a constant already in Redis is not uploaded again.
func (m *Manager) ConstantUploads() (n, bytes int64) { return m.store.Uploads() }
