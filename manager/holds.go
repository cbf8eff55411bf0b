package manager

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redmap/redmap/cache"
)

// holds are the running batches' holds on their constants in the object
// cache. A batch takes one (hold) before its first task is submitted; the
// keeper renews them every Poll (storing again a constant Redis lost); the
// batch releases its own when it ends. A manager killed before then leaks
// nothing: its holds expire after KeyTTL and Redis deletes the values.
type holds struct {
	store constantStore
	mid   string
	ttl   time.Duration // Options.KeyTTL
	log   *slog.Logger
	seq   atomic.Uint64

	mu sync.Mutex
	m  map[string]hold // holder → its hold
}

// hold is a running batch's hold on a constant, with the encoded constant to
// upload again if Redis loses it.
type hold struct {
	ref cache.Ref
	enc []byte
}

func newHolds(store constantStore, mid string, ttl time.Duration, log *slog.Logger) *holds {
	return &holds{store: store, mid: mid, ttl: ttl, log: log, m: make(map[string]hold)}
}

// take stores an encoded constant (unless it is already stored) and holds it
// for a new batch; it returns the constant's ref and the holder to release.
func (h *holds) take(ctx context.Context, enc []byte) (cache.Ref, string, error) {
	holder := fmt.Sprintf("%s:%d", h.mid, h.seq.Add(1))
	ref, _, err := h.store.Put(ctx, enc, holder, h.ttl)
	if err != nil {
		return ref, "", err
	}
	h.mu.Lock()
	h.m[holder] = hold{ref: ref, enc: enc}
	h.mu.Unlock()
	return ref, holder, nil
}

// release drops a batch's hold; the value is deleted if no other live batch
// holds it. Releasing twice is harmless.
func (h *holds) release(holder string) {
	h.mu.Lock()
	held, ok := h.m[holder]
	delete(h.m, holder)
	h.mu.Unlock()
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := h.store.Release(ctx, held.ref, holder); err != nil {
		h.log.Warn("releasing constant failed; its hold expires", "ref", held.ref, "err", err)
	}
}

func (h *holds) all() map[string]hold {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.m)
}

// restore stores again, and holds, every constant of a running batch,
// after Redis lost them.
func (h *holds) restore(ctx context.Context) error {
	for holder, held := range h.all() {
		if _, _, err := h.store.Put(ctx, held.enc, holder, h.ttl); err != nil {
			return err
		}
	}
	return nil
}

// renew extends every hold by KeyTTL, and stores again a constant that is
// gone.
func (h *holds) renew(ctx context.Context) {
	for holder, held := range h.all() {
		ok, err := h.store.Hold(ctx, held.ref, holder, h.ttl)
		if err != nil && ctx.Err() != nil {
			return
		}
		if err != nil {
			h.log.Warn("renewing a constant's hold failed", "ref", held.ref, "err", err)
		} else if !ok {
			// Gone with the rest of Redis's data, or deleted by hand: put
			// it back, so the batch's tasks can still run.
			if _, _, err := h.store.Put(ctx, held.enc, holder, h.ttl); err != nil {
				h.log.Warn("storing a lost constant again failed", "ref", held.ref, "err", err)
			}
		}
	}
}
