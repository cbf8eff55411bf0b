package rdb

import (
	"context"
	"fmt"
	"strings"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/wire"
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
// clock, back to the queue; see lua/reap.lua. A script call per
// ScriptBudget task ids (one, which finds nothing to do, when every worker
// is live), ReapSlices calls at most. On failure it returns what the calls
// before the failed one did.
func (r *RDB) Reap(ctx context.Context) (*wire.Reaped, error) {
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
func (r *RDB) reapSlice(ctx context.Context) (wire.Reaped, bool, error) {
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

// Held returns the members of worker wid's held set: task ids, "!"-prefixed
// for private ones.
func (r *RDB) Held(ctx context.Context, p *broker.HeldParams) ([]string, error) {
	m, err := r.c.SMembers(ctx, keys.Held(r.prefix, r.queue, p.Worker)).Result()
	if err != nil {
		return nil, wrap("held", nil, "SMEMBERS", err)
	}
	return m, nil
}

// GiveBack puts held-set members of worker wid that it will not run or
// report back at the front of the list they came from, their attempt
// counted if they ran (a task running when a stopping worker's grace
// ended); see lua/giveback.lua.
func (r *RDB) GiveBack(ctx context.Context, p *broker.GiveBackParams) (int, error) {
	wid, members, ran := p.Worker, p.Members, p.Ran
	ks := []string{keys.Held(r.prefix, r.queue, wid), keys.Ring(r.prefix, r.queue, keys.DefaultPriority), keys.Private(r.prefix, r.queue, wid)}
	args := make([]any, 0, 2+len(members))
	args = append(args, r.base, "0")
	if ran {
		args[1] = "1"
	}
	for _, m := range members {
		args = append(args, m)
	}
	n, err := givebackScript.run(ctx, r.c, ks, args...).Int()
	if err != nil {
		return 0, wrap("give back", givebackScript, "", err)
	}
	return n, nil
}

// Unwanted returns those of tids that their managers no longer want. One
// script call.
func (r *RDB) Unwanted(ctx context.Context, p *broker.UnwantedParams) ([]string, error) {
	wid, tids := p.Worker, p.Tasks
	args := make([]any, 0, 1+len(tids))
	args = append(args, r.base)
	for _, t := range tids {
		args = append(args, t)
	}
	out, err := unwantedScript.run(ctx, r.c, []string{keys.Held(r.prefix, r.queue, wid)}, args...).StringSlice()
	if err != nil {
		return nil, wrap("unwanted", unwantedScript, "", err)
	}
	return out, nil
}

// Served says, for what each of some batches calls (see Calls), whether a
// live worker of the queue registered it all with the same signatures, by
// the Redis clock and the workers' heartbeats. One script call.
func (r *RDB) Served(ctx context.Context, p *broker.ServedParams) ([]wire.Serving, error) {
	calls := p.Calls
	args := make([]any, 0, 1+len(calls))
	args = append(args, r.base)
	for _, c := range calls {
		args = append(args, c)
	}
	v, err := servedScript.run(ctx, r.c, []string{keys.Workers(r.prefix, r.queue)}, args...).Slice()
	if err != nil {
		return nil, wrap("served", servedScript, "", err)
	}
	if len(v) != 2*len(calls)+1 {
		return nil, fmt.Errorf("served: script returned %d values for %d batches", len(v), len(calls))
	}
	mark, paused := v[len(v)-1].(string)
	var since int64
	if paused {
		if p, err := wire.DecodePause(mark); err == nil {
			since = p.Since
		}
	}
	out := make([]wire.Serving, len(calls))
	for i := range out {
		code, _ := v[2*i].(int64)
		detail, _ := v[2*i+1].(string)
		name, sig, _ := strings.Cut(detail, "\t")
		out[i] = wire.Serving{Code: int(code), Name: name, Signature: sig, Paused: paused, PausedSince: since}
	}
	return out, nil
}
