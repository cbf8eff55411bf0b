package redisbroker

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/keys"
)

// Submit stores tasks of manager mid and queues them on their batch's lane
// (lane, whose ring it joins), or on worker wid's private list if wid is not
// empty, then wakes idle workers.
// It costs one script call per group of up to 1,000 tasks or CallBytes, in a
// MULTI behind a plain HSET of the group's payloads (one call if there are
// none: it then only checks, and installs a new epoch). The manager's task
// set gets the given TTL.
//
// The task set counts the tasks ever submitted to it and names its history
// with an epoch. Submit returns the count after its last group, and whether
// each group found the set as expected (the first as exp says, the others as
// the group before left it): if not, Redis lost writes of this manager (see
// Submitted). A group that fails after others were queued returns a
// *PartlySubmitted saying what was: the caller sends only the rest again.
func (r *Broker) Submit(ctx context.Context, p *broker.SubmitParams) (_ *broker.SubmitResult, err error) {
	mid, wid, lane, tasks, ttl, exp := p.Manager, p.Worker, p.Lane, p.Tasks, p.TTL, p.Expect
	var count int64
	var intact bool
	ring := keys.Ring(r.prefix, r.queue, keys.DefaultPriority)
	if len(tasks) > 0 {
		ring = keys.Ring(r.prefix, r.queue, id.Priority(tasks[0].ID, keys.DefaultPriority))
	}
	list := keys.Lane(r.prefix, r.queue, lane.Name)
	if wid != "" {
		list = keys.Private(r.prefix, r.queue, wid)
	}
	ks := []string{keys.Tasks(r.prefix, r.queue, mid), list, keys.Idle(r.prefix, r.queue), ring, keys.Lanes(r.prefix, r.queue, mid), keys.Widest(r.prefix, r.queue, mid)}
	fence, held := r.fenceOf(mid)
	if fence != "" {
		ks = append(ks, fence, keys.Aside(r.prefix, r.queue, mid))
	}
	intact = true
	queued := 0 // tasks of the groups done
	for first := true; first || len(tasks) > 0; first = false {
		n, size := 0, 0
		for n < len(tasks) && n < maxGroup && (n == 0 || size+len(tasks[n].Payload) <= broker.CallBytes) {
			size += len(tasks[n].Payload)
			n++
		}
		// The payloads go in with a plain HSET in the script's MULTI: Redis
		// never copies them into Lua (see submit.lua).
		args := make([]any, 11, 11+n)
		copy(args, []any{r.base, ttl.Milliseconds(), wid, exp.Count, exp.Epoch, exp.NewEpoch, lane.Name, lane.Calls})
		args[10] = held
		stored := make([]any, 0, 2*n) // id, payload, ...
		widest, elements := 0, 0
		for _, t := range tasks[:n] {
			stored = append(stored, t.ID, t.Payload)
			args = append(args, t.ID)
			widest = max(widest, len(t.Payload))
			elements += id.Size(t.ID)
		}
		args[8], args[9] = widest, elements
		var reply []int64
		var err error
		if n == 0 {
			reply, err = submitScript.run(ctx, r.c, ks, args...).Int64Slice()
		} else {
			reply, err = r.submitStored(ctx, ks, stored, args)
		}
		if err != nil {
			err = onKey(wrap("submit", submitScript, "", err), ks[0])
			if queued > 0 {
				err = &broker.PartlySubmitted{Queued: queued, Count: count, Intact: intact, Err: err}
			}
			return &broker.SubmitResult{Count: count, Intact: false}, err
		}
		if len(reply) != 2 {
			return &broker.SubmitResult{Count: count, Intact: false}, fmt.Errorf("submit: script returned %v, not 2 integers", reply)
		}
		count = reply[0]
		intact = intact && reply[1] == 1
		exp.Count = count
		if exp.NewEpoch != "" {
			exp.Epoch, exp.NewEpoch = exp.NewEpoch, ""
		}
		tasks = tasks[n:]
		queued += n
	}
	return &broker.SubmitResult{Count: count, Intact: intact}, nil
}

// submitStored runs submit.lua (KEYS ks, ARGV args) in a MULTI after a
// plain HSET of stored (id, payload, ...) into the task set ks[0], so that
// Redis never copies those payloads into Lua, and the tasks are queued in
// the step that stores them: no take finds an id before its payload, and a
// failure leaves neither (but NOSCRIPT, raised as EXEC runs: the HSET then
// went through alone, and is made again, with the whole script: inTx). A
// durable batch's owner's MULTI (ks holds its fence and aside keys) begins
// with fence.lua, so that a submit its fence refuses stores nothing.
func (r *Broker) submitStored(ctx context.Context, ks []string, stored, args []any) ([]int64, error) {
	for whole := false; ; whole = true {
		var run *redis.Cmd
		cmds, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			if len(ks) == 8 { // a fenced owner's: Submit appended the fence and aside keys
				fenceArgs := make([]any, 0, 1+len(stored)/2)
				fenceArgs = append(fenceArgs, args[10])
				for i := 0; i < len(stored); i += 2 {
					fenceArgs = append(fenceArgs, stored[i])
				}
				fenceScript.inTx(ctx, p, []string{ks[6], ks[0], ks[7]}, true, fenceArgs...)
			}
			p.HSet(ctx, ks[0], stored...)
			run = submitScript.inTx(ctx, p, ks, whole, args...)
			return nil
		})
		err = txErr(cmds, err)
		if err != nil && redis.HasErrorPrefix(run.Err(), "NOSCRIPT") && !whole {
			continue
		}
		if err != nil {
			return nil, err
		}
		return run.Int64Slice()
	}
}

// txErr returns the error of a MULTI that failed: the first command's
// that says why (OOM, NOPERM, ...), rather than the EXECABORT that only
// says the MULTI was discarded for it.
func txErr(cmds []redis.Cmder, err error) error {
	if err == nil {
		return nil
	}
	for _, c := range cmds {
		if cerr := c.Err(); cerr != nil && !redis.HasErrorPrefix(cerr, "EXECABORT") {
			return cerr
		}
	}
	return err
}
