package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/redmap/redmap/internal/rdb"
	"github.com/redmap/redmap/internal/wire"
)

// The worker's one seam to Redis. Its parts see one queue, the source
// (source.go), which reaches each shard of the queue through shardRedis;
// internal/rdb implements it, the parts' unit tests give a fake.

// shardRedis is one shard of the worker's queue in Redis.
type shardRedis interface {
	// Shard returns the shard's index; Name its name (the queue's, for 0).
	Shard() int
	Name() string

	Take(ctx context.Context, p *rdb.TakeParams) ([]wire.Taken, wire.TakeEnd, error)
	WaitTake(ctx context.Context, p *rdb.TakeParams) ([]wire.Taken, wire.TakeEnd, error)
	WaitBell(ctx context.Context, wid string, timeout time.Duration) (bool, error)
	RingStop(ctx context.Context, wid string) error

	Finish(ctx context.Context, wid string, done []wire.Done) (wire.Finished, error)
	GiveBack(ctx context.Context, wid string, members []string, ran bool) (int, error)
	Held(ctx context.Context, wid string) ([]string, error)
	Unwanted(ctx context.Context, wid string, tids []string) ([]string, error)

	Heartbeat(ctx context.Context, wid string, lease time.Duration, info *wire.WorkerInfo) (wire.Beat, error)
	Reap(ctx context.Context) (wire.Reaped, error)
	Retire(ctx context.Context, wid string, info *wire.WorkerInfo) (wire.Reaped, error)

	// Depth counts the task ids waiting in the shard's public lists (a
	// metric).
	Depth(ctx context.Context) (int64, error)
}

// queueRedis is shard 0, where the queue-wide records live as well.
type queueRedis interface {
	shardRedis
	Preflight(ctx context.Context, budget, heal time.Duration, log *slog.Logger) error
	PublishError(ctx context.Context, wid string, lease time.Duration, msg string)
	CountFailures(ctx context.Context, wid string, groups []wire.FailureGroup) (added, malformed int64, err error)
	// LoseManagers records the batches of managers that stopped publishing
	// as "manager lost" in the queue's history.
	LoseManagers(ctx context.Context) (int, error)
	ShardNames(ctx context.Context) ([]string, error)
	Types(ctx context.Context, sig string) ([]string, error)
	PublishTypes(ctx context.Context, sig string, types []string) error
	// DeclareLimit records the limit declared with a handle; Throttle
	// pauses a function's rate after a RetryAfter.
	DeclareLimit(ctx context.Context, fn string, rec wire.LimitRecord) (wire.Limit, string, error)
	Throttle(ctx context.Context, fn string, d time.Duration) (bool, error)
}

var _ queueRedis = (*rdb.RDB)(nil)
