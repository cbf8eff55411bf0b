package redisbroker

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
	"github.com/redmap/redmap/internal/keys"
)

// LoseSlices is the most lost.lua calls one Broker.LoseManagers makes:
// 10,000 batches recorded (ScriptBudget a call). A worker calls it every
// heartbeat, which it must not delay for long; what is left, the next
// call records.
const LoseSlices = 20

// LoseManagers records the batches of the queue's managers whose publish
// of progress is overdue as ended with outcome "manager lost" (see
// lost.lua), and returns how many it recorded. A script call per
// ScriptBudget batches recorded, LoseSlices calls at most: the next call
// records what is left (Admin.LoseManagers records them all).
func (r *Broker) LoseManagers(ctx context.Context) (int, error) {
	return loseManagers(ctx, r.c, r.prefix, r.queue, LoseSlices)
}

// loseManagers is LoseManagers for queue at prefix on c, with the default
// bounds of the history, in at most slices calls of lost.lua (0: as many
// as it takes).
//
// The managers found lost have their tasks withdrawn: from the queue's
// first shard in the script call that finds them, then from each of its
// other shards (withdraw.lua), so that workers run none of them. lost.lua
// is called until it says no work is left: each call records a slice of
// their batches.
func loseManagers(ctx context.Context, c redis.UniversalClient, prefix, queue string, slices int) (int, error) {
	total := 0
	for i := 1; ; i++ {
		n, more, mids, err := loseSlice(ctx, c, prefix, queue)
		total += n
		if err != nil {
			return total, err
		}
		if len(mids) > 0 {
			if err := withdrawShards(ctx, c, prefix, queue, mids); err != nil {
				return total, err
			}
		}
		if !more || i == slices {
			return total, nil
		}
	}
}

// loseSlice is one call of lost.lua: the batches it recorded, whether work
// is left, and the managers it found lost.
func loseSlice(ctx context.Context, c redis.UniversalClient, prefix, queue string) (n int, more bool, mids []any, err error) {
	ks := []string{keys.Managers(prefix, queue), keys.History(prefix, queue), keys.HistoryIndex(prefix, queue),
		keys.Durables(prefix, queue), keys.Losing(prefix, queue)}
	got, err := lostScript.run(ctx, c, ks, keys.Base(prefix, queue), keys.DefaultHistory, keys.DefaultHistoryAge.Milliseconds()).Slice()
	if err != nil {
		return 0, false, nil, wrap("lose managers", lostScript, "", err)
	}
	var count, left int64
	if len(got) >= 2 {
		count, _ = got[0].(int64)
		left, _ = got[1].(int64)
	}
	if len(got) < 2 || count < 0 {
		return 0, false, nil, fmt.Errorf("lose managers: script returned %v, not a count and a flag", got)
	}
	return int(count), left == 1, got[2:], nil
}

// withdrawShards withdraws the tasks of managers mids, found lost, from
// the queue's shards other than the first: one withdraw.lua call each.
func withdrawShards(ctx context.Context, c redis.UniversalClient, prefix, queue string, mids []any) error {
	shards, err := c.LRange(ctx, keys.ShardNames(prefix, queue), 0, -1).Result()
	if err != nil {
		return wrap("lose managers: list the shards", nil, "LRANGE", err)
	}
	args := append([]any{""}, mids...) // the shard's base, then the managers
	for _, sh := range shards {
		args[0] = keys.Base(prefix, sh)
		if err := withdrawScript.run(ctx, c, []string{keys.Workers(prefix, sh)}, args...).Err(); err != nil {
			return wrap("withdraw lost managers' tasks", withdrawScript, "", err)
		}
	}
	return nil
}
