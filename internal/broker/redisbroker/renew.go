package redisbroker

import (
	"context"

	"github.com/redis/go-redis/v9"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/keys"
)

// Renew extends the TTL of manager mid's task set, attempt counts, result
// list and lanes. One script call.
func (r *Broker) Renew(ctx context.Context, p *broker.RenewParams) error {
	mid, ttl := p.Manager, p.TTL
	ks, held := r.managerKeys(mid)
	err := renewScript.run(ctx, r.c, ks, r.base, mid, max(ttl.Milliseconds(), 1), held).Err()
	return wrap("renew", renewScript, "", err)
}

// ForgetLanes deletes what manager mid keeps of its batches' lanes that
// ended (lanes: the lanes' numbers, the part of a lane's name after the
// '.'): their entries in its lanes hash, which renew.lua would otherwise
// keep alive, one per batch the manager ever ran, for as long as it lives;
// and their lists and the keys beside them, which hold no task still
// wanted. One round trip (a MULTI), at most one per Poll.
func (r *Broker) ForgetLanes(ctx context.Context, p *broker.ForgetLanesParams) error {
	mid, lanes := p.Manager, p.Lanes
	if len(lanes) == 0 {
		return nil
	}
	// A pipeline, not a MULTI: deletes each idempotent, which Redis at
	// maxmemory takes but refuses whole in a MULTI (EXECABORT).
	cmds, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HDel(ctx, keys.Lanes(r.prefix, r.queue, mid), lanes...)
		for _, l := range lanes {
			name := mid + "." + l
			p.Del(ctx, keys.Lane(r.prefix, r.queue, name), keys.LaneElements(r.prefix, r.queue, name), keys.LaneTimes(r.prefix, r.queue, name))
		}
		return nil
	})
	if err != nil && len(cmds) > 0 && redis.HasErrorPrefix(cmds[0].Err(), "WRONGTYPE") {
		// Foreign data over the lanes hash: there is nothing of it to
		// forget (renew.lua sets the key aside); the deletes stand alone.
		err = nil
		for _, c := range cmds[1:] {
			if c.Err() != nil {
				err = c.Err()
				break
			}
		}
	}
	return wrap("forget lanes", nil, "HDEL or DEL", err)
}

// managerKeys returns the KEYS of renew.lua for manager mid, and the
// claim its writes carry (its ARGV[4]: see fenceOf).
func (r *Broker) managerKeys(mid string) ([]string, string) {
	ks := []string{keys.Tasks(r.prefix, r.queue, mid), keys.Attempts(r.prefix, r.queue, mid),
		keys.Results(r.prefix, r.queue, mid), keys.Lanes(r.prefix, r.queue, mid), keys.Kept(r.prefix, r.queue, mid), keys.Sums(r.prefix, r.queue, mid),
		keys.Staged(r.prefix, r.queue, mid), keys.Widest(r.prefix, r.queue, mid)}
	fence, held := r.fenceOf(mid)
	if fence != "" {
		ks = append(ks, fence)
	}
	return ks, held
}

// Drop deletes every key of manager mid, its lanes included; a durable
// batch's owner whose fence another claim replaced deletes none
// (*FencedError).
func (r *Broker) Drop(ctx context.Context, p *broker.ManagerParams) error {
	mid := p.Manager
	ks, held := r.managerKeys(mid)
	if err := renewScript.run(ctx, r.c, ks, r.base, mid, 0, held).Err(); err != nil {
		return wrap("drop", renewScript, "", err)
	}
	// A pipeline, not a MULTI: at maxmemory Redis refuses every command
	// queued in a MULTI (EXECABORT), deletes included, and these free
	// memory; each is idempotent, and what one leaves expires.
	cmds, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		// UNLINK: a manager may have published 100,000 batches. Its
		// operators' cancels go too: one it did not read (its batch ended
		// first) would cancel the next call's, under the same owner id.
		p.Unlink(ctx, keys.Batches(r.prefix, r.queue, mid), keys.BatchesNext(r.prefix, r.queue, mid), keys.Cancelled(r.prefix, r.queue, mid),
			keys.Cancels(r.prefix, r.queue, mid))
		p.ZRem(ctx, keys.Managers(r.prefix, r.queue), mid)
		p.HDel(ctx, keys.Durables(r.prefix, r.queue), mid) // a durable batch's owner's entry
		return nil
	})
	if err != nil {
		// An entry in a queue's key that holds foreign data went with it:
		// the next script to use the key sets it aside (prelude.lua).
		err = nil
		for _, c := range cmds {
			if e := c.Err(); e != nil && !redis.HasErrorPrefix(e, "WRONGTYPE") {
				err = e
				break
			}
		}
	}
	return wrap("drop", nil, "UNLINK, ZREM or HDEL", err)
}
