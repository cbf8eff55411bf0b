package redisbroker

import (
	"context"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/keys"
)

// Held returns the members of worker wid's held set: task ids, "!"-prefixed
// for private ones.
func (r *Broker) Held(ctx context.Context, p *broker.HeldParams) ([]string, error) {
	m, err := r.c.SMembers(ctx, keys.Held(r.prefix, r.queue, p.Worker)).Result()
	if err != nil {
		return nil, wrap("held", nil, "SMEMBERS", err)
	}
	return m, nil
}

// GiveBack puts held-set members of worker wid that it will not run or
// report back at the front of the list they came from, their attempt
// counted if they ran (a task running when a stopping worker's grace
// ended); see giveback.lua.
func (r *Broker) GiveBack(ctx context.Context, p *broker.GiveBackParams) (int, error) {
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
