package redisbroker

import (
	"context"
	"fmt"

	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/keys"
)

// maxReap caps the dead workers one reap.lua call looks at, so one call
// stays short.
const maxReap = 100

// ReapSlices is the most reap.lua calls one Reap makes: 200,000 task ids of
// dead workers given back or reported lost (ScriptBudget a call). What is
// left, the next Reap does: a worker left part-way stays in the workers
// set, its lease lapsed.
const ReapSlices = 400

// Reap gives the tasks of workers whose lease has expired, by the Redis
// clock, back to the queue; see reap.lua. A script call per
// ScriptBudget task ids (one, which finds nothing to do, when every worker
// is live), ReapSlices calls at most. On failure it returns what the calls
// before the failed one did.
func (r *Broker) Reap(ctx context.Context) (*wire.Reaped, error) {
	var all wire.Reaped
	for range ReapSlices {
		got, more, err := r.reapSlice(ctx)
		all.Workers += got.Workers
		all.Requeued += got.Requeued
		all.Lost += got.Lost
		if err != nil || !more {
			return &all, err
		}
	}
	return &all, nil
}

// reapSlice is one call of reap.lua: what it did, and whether work may be
// left.
func (r *Broker) reapSlice(ctx context.Context) (wire.Reaped, bool, error) {
	ks := []string{keys.Workers(r.prefix, r.queue), keys.Ring(r.prefix, r.queue, keys.DefaultPriority), keys.Idle(r.prefix, r.queue),
		keys.Gone(r.prefix, r.queue)}
	n, err := reapScript.run(ctx, r.c, ks, r.base, maxReap, keys.GoneFor.Milliseconds()).Int64Slice()
	if err != nil {
		return wire.Reaped{}, false, wrap("reap", reapScript, "", err)
	}
	if len(n) != 4 {
		return wire.Reaped{}, false, fmt.Errorf("reap: script returned %v, not 4 integers", n)
	}
	return wire.Reaped{Workers: int(n[0]), Requeued: int(n[1]), Lost: int(n[2])}, n[3] == 1, nil
}
