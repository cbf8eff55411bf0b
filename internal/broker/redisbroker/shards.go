package redisbroker

import (
	"context"
	"strings"
	"time"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/keys"
)

// AdoptShards is a manager's first record, before it submits, in the
// queue's list of shard names (in shard 0), of the shards other than 0 it
// uses, so that workers serve them: names are proposals; for each index
// the list already has, the manager takes the name there, and the list
// grows by the proposals beyond it. It returns the names the manager is to
// use. One script call.
func (r *Broker) AdoptShards(ctx context.Context, p *broker.ShardsParams) ([]string, error) {
	proposals := p.Names
	return r.publishShards(ctx, "adopt", proposals)
}

// AddShards adds to the queue's list of shard names those of names it
// lacks (after Redis lost it), and returns the list. One script call.
func (r *Broker) AddShards(ctx context.Context, p *broker.ShardsParams) ([]string, error) {
	names := p.Names
	return r.publishShards(ctx, "add", names)
}

// publishShards runs shards.lua in mode "adopt" or "add".
func (r *Broker) publishShards(ctx context.Context, mode string, names []string) ([]string, error) {
	args := []any{mode}
	for _, n := range names[:min(len(names), keys.MaxShards-1)] {
		args = append(args, n)
	}
	got, err := shardsScript.run(ctx, r.c, []string{keys.ShardNames(r.prefix, r.queue), keys.Paused(r.prefix, r.queue)}, args...).StringSlice()
	if err != nil {
		return nil, wrap("publish shards", shardsScript, "", err)
	}
	if n := len(got); n > 0 && strings.HasPrefix(got[n-1], pausedEntry) {
		mark := strings.TrimPrefix(got[n-1], pausedEntry)
		got = got[:n-1]
		if err := r.followPause(ctx, got, mark); err != nil {
			return nil, err
		}
	}
	return got, nil
}

// pausedEntry starts the last entry of shards.lua's reply when an
// operator paused the queue; the mark follows it.
const pausedEntry = "\npaused\n"

// followedPause is how long a shard's copy of a paused queue's mark lives
// (pause.lua, follow): renewed every Poll while the queue stays paused, it
// outlives a resume by that long at most.
const followedPause = 10 * time.Second

// followPause gives the queue's other shards, names, the pause mark of
// shard 0 (pause.lua, follow): a shard a manager adds to a paused queue is
// paused too. A script call a shard, only while the queue is paused.
func (r *Broker) followPause(ctx context.Context, names []string, mark string) error {
	for _, sh := range names {
		if sh == r.queue {
			continue
		}
		err := pauseScript.run(ctx, r.c, []string{keys.Paused(r.prefix, sh), keys.Idle(r.prefix, sh)}, "follow", mark, keys.Base(r.prefix, sh), followedPause.Milliseconds()).Err()
		if err != nil {
			return wrap("pause a new shard", pauseScript, "", err)
		}
	}
	return nil
}

// ShardNames returns the queue's list of shard names (see AdoptShards).
// One LRANGE.
func (r *Broker) ShardNames(ctx context.Context) ([]string, error) {
	var names []string
	key := keys.ShardNames(r.prefix, r.queue)
	err := r.asideOnce(ctx, key, "list", func() (err error) {
		names, err = r.c.LRange(ctx, key, 0, keys.MaxShards).Result()
		return err
	})
	if err != nil {
		return nil, wrap("shard names", nil, "LRANGE", err)
	}
	return names, nil
}
