package redisbroker

import (
	"context"

	"github.com/redis/go-redis/v9"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/keys"
)

// AddSums records the sums of durable batch owner's tasks' inputs (task id
// → sum), as they are first submitted, so that a call that takes the batch
// over can tell its input from another. One HSET; for an owner that holds
// the batch's claim, one script call (sums.lua), refused with a
// *FencedError once another claim was taken.
func (r *Broker) AddSums(ctx context.Context, p *broker.AddSumsParams) error {
	owner, sums, ttl := p.Owner, p.Sums, p.TTL
	if len(sums) == 0 {
		return nil
	}
	k := keys.Sums(r.prefix, r.queue, owner)
	if fence, held := r.fenceOf(owner); fence != "" {
		args := make([]any, 0, 2+2*len(sums))
		args = append(args, held, max(ttl.Milliseconds(), 1))
		for tid, sum := range sums {
			args = append(args, tid, sum)
		}
		err := sumsScript.run(ctx, r.c, []string{k, fence}, args...).Err()
		return wrap("record a durable batch's inputs", sumsScript, "", err)
	}
	err := r.asideOnce(ctx, k, "hash", func() error {
		_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.HSet(ctx, k, sums)
			p.PExpire(ctx, k, ttl)
			return nil
		})
		return err
	})
	return wrap("record a durable batch's inputs", nil, "HSET", err)
}

// Sums returns the sums AddSums recorded for durable batch owner: one
// HKEYS, then one pipeline of HMGETs (the least-privilege ACL user has no
// HGETALL). A batch has at most a few thousand tasks without ChunkSize (see
// manager.Durable).
func (r *Broker) Sums(ctx context.Context, p *broker.SumsParams) (map[string]string, error) {
	owner := p.Owner
	k := keys.Sums(r.prefix, r.queue, owner)
	var tids []string
	err := r.asideOnce(ctx, k, "hash", func() (err error) {
		tids, err = r.c.HKeys(ctx, k).Result()
		return err
	})
	if err != nil {
		return nil, wrap("read a durable batch's inputs", nil, "HKEYS", err)
	}
	var pages []*redis.SliceCmd
	_, err = r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := 0; i < len(tids); i += maxGroup {
			pages = append(pages, p.HMGet(ctx, k, tids[i:min(i+maxGroup, len(tids))]...))
		}
		return nil
	})
	if err != nil {
		return nil, wrap("read a durable batch's inputs", nil, "HMGET", err)
	}
	sums := make(map[string]string, len(tids))
	for i, page := range pages {
		for j, v := range page.Val() {
			if s, ok := v.(string); ok {
				sums[tids[i*maxGroup+j]] = s
			}
		}
	}
	return sums, nil
}
