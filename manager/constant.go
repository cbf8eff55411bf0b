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
	m.holds[holder] = ref
	m.mu.Unlock()
	return ref, holder, nil
}

// release drops a batch's hold; the value is deleted if no other live batch
// holds it. Releasing twice is harmless.
func (m *Manager) release(holder string) {
	m.mu.Lock()
	ref, ok := m.holds[holder]
	delete(m.holds, holder)
	m.mu.Unlock()
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := m.store.Release(ctx, ref, holder); err != nil {
		m.log.Warn("releasing constant failed; its hold expires", "ref", ref, "err", err)
	}
}

// renewHolds extends every hold of a running batch by KeyTTL.
func (m *Manager) renewHolds(ctx context.Context) {
	m.mu.Lock()
	holds := make(map[string]cache.Ref, len(m.holds))
	for h, r := range m.holds {
		holds[h] = r
	}
	m.mu.Unlock()
	for holder, ref := range holds {
		ok, err := m.store.Hold(ctx, ref, holder, m.opts.KeyTTL)
		if err != nil {
			m.log.Warn("renewing a constant's hold failed", "ref", ref, "err", err)
		} else if !ok {
			m.log.Warn("a held constant is gone from Redis", "ref", ref)
		}
	}
}

// ConstantUploads returns how many constants this manager uploaded, and their
// bytes; a constant already in Redis is not uploaded again.
func (m *Manager) ConstantUploads() (n, bytes int64) { return m.store.Uploads() }
