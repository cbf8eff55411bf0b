package redisbroker

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Depth returns the number of task ids waiting in the shard's lanes.
func (r *Broker) Depth(ctx context.Context) (int64, error) {
	return depth(ctx, r.c, r.base, r.rings)
}

// depth returns the number of task ids in the lanes of rings, all of one
// shard at base. One script call.
func depth(ctx context.Context, c redis.UniversalClient, base string, rings []string) (int64, error) {
	n, err := depthScript.run(ctx, c, rings, base).Int64()
	return n, wrap("depth", depthScript, "", err)
}
