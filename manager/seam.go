package manager

import (
	"context"
	"time"

	"github.com/redmap/redmap/cache"
	"github.com/redmap/redmap/internal/broker"
)

// The manager's seam to Redis is the broker contract (internal/broker):
// its parts see a queue of one or more shards as a broker.Queue (shard 0)
// and broker.Shard values, which internal/broker/redisbroker implements, and
// the object cache. Sharding lives in one place, the router: a part asks it
// for a task's shard, or for them all.

// constantStore is the object cache, where running batches hold their
// constants.
type constantStore interface {
	Put(ctx context.Context, b []byte, holder string, ttl time.Duration) (cache.Ref, bool, error)
	Hold(ctx context.Context, ref cache.Ref, holder string, ttl time.Duration) (bool, error)
	Release(ctx context.Context, ref cache.Ref, holder string) (bool, error)
	Uploads() (n, bytes int64)
}

var (
	_ historyStore  = broker.Queue(nil)
	_ constantStore = (*cache.Store)(nil)
)
