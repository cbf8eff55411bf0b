package manager

import (
	"context"
	"time"

	"github.com/redmap/redmap/cache"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/rdb"
	"github.com/redmap/redmap/internal/wire"
)

// The manager's one seam to Redis. Its parts see a queue of one or more
// shards through these interfaces, which internal/rdb implements (rdb.RDB,
// cache.Store); the parts' unit tests give them fakes. Sharding lives in one
// place, the router: a part asks it for a task's shard, or for them all.

// shardRedis is one shard of the manager's queue in Redis: its task set, its
// result list, its workers' leases.
type shardRedis interface {
	// Shard returns the shard's index: 0 for the queue's own keys.
	Shard() int

	// Submit queues tasks (the feeder and the recoverer).
	Submit(ctx context.Context, mid, wid string, lane wire.Lane, tasks []wire.Task, ttl time.Duration, exp wire.Expect) (count int64, intact bool, err error)
	// Cancel withdraws tasks: workers skip them, their results are dropped.
	Cancel(ctx context.Context, mid string, tids []string) error
	// Ping checks that Redis answers: faults tell a slow call from an
	// outage with it.
	Ping(ctx context.Context) error

	// ReadResults, ReadThenWait, WaitResults, StagedSizes, Unstaged and WakeCollector
	// are the collector's.
	ReadResults(ctx context.Context, mid string, handled int, mark string, limit int) ([]string, error)
	ReadThenWait(ctx context.Context, mid string, handled int, mark string, limit int, timeout time.Duration) (entries []string, fromWait bool, err error)
	WaitResults(ctx context.Context, mid string, timeout time.Duration) (string, error)
	Unstaged(ctx context.Context, mid string, entries []string) ([]string, error)
	StagedSizes(ctx context.Context, mid string, entries []string) ([]int, error)
	WakeCollector(ctx context.Context, mid string) error

	// Renew and Drop are the keeper's and Close's: the manager's keys live
	// while it does.
	Renew(ctx context.Context, mid string, ttl time.Duration) error
	Drop(ctx context.Context, mid string) error
	// ForgetLanes is the keeper's too: the lanes of batches that ended.
	ForgetLanes(ctx context.Context, mid string, lanes []string) error

	// Reap is the reaper's.
	Reap(ctx context.Context) (*wire.Reaped, error)

	// Resume and Kept are a durable batch's owner's, before its first
	// submit (see durable.go).
	Resume(ctx context.Context, owner string, ttl time.Duration) (wire.Resumed, error)
	Kept(ctx context.Context, owner string, from, n int64) ([]string, error)

	// Submitted, Missing and Audit are the recoverer's.
	Submitted(ctx context.Context, mid string) (int64, string, error)
	Missing(ctx context.Context, mid string, tids []string) (missing []string, count int64, epoch string, err error)
	Audit(ctx context.Context, mid string, groups []wire.Placed, ttl time.Duration) (wire.Audited, error)
	// SetAsideTasks deletes the task set if err, a refusal, says it holds
	// foreign data (faults.of, which has failed its tasks first).
	SetAsideTasks(ctx context.Context, mid string, err error) bool
}

// queueRedis is shard 0, where the queue-wide records live as well.
type queueRedis interface {
	shardRedis
	Preflight(ctx context.Context, p *broker.PreflightParams) error
	LiveWorkers(ctx context.Context) ([]string, error)
	Served(ctx context.Context, calls []string) ([]wire.Serving, error)
	Types(ctx context.Context, p *broker.TypesParams) ([]string, error)
	PublishTypes(ctx context.Context, p *broker.PublishTypesParams) error
	// DeclareLimit and ReadLimit return a function's limit in force (see
	// limits.go).
	DeclareLimit(ctx context.Context, p *broker.DeclareLimitParams) (*broker.DeclareLimitResult, error)
	ReadLimit(ctx context.Context, fn string) (wire.Limit, string, error)
	AdoptShards(ctx context.Context, proposals []string) ([]string, error)
	AddShards(ctx context.Context, names []string) ([]string, error)
	PublishBatches(ctx context.Context, mid string, batches map[string]wire.BatchProgress, ttl, due time.Duration, ended int64) (cancels []string, err error)
	// Claim, Sums and AddSums are a durable batch's owner's.
	Claim(ctx context.Context, c wire.Claim) (wire.Claimed, error)
	Sums(ctx context.Context, owner string) (map[string]string, error)
	AddSums(ctx context.Context, owner string, sums map[string]string, ttl time.Duration) error
	historyStore
}

// constantStore is the object cache, where running batches hold their
// constants.
type constantStore interface {
	Put(ctx context.Context, b []byte, holder string, ttl time.Duration) (cache.Ref, bool, error)
	Hold(ctx context.Context, ref cache.Ref, holder string, ttl time.Duration) (bool, error)
	Release(ctx context.Context, ref cache.Ref, holder string) (bool, error)
	Uploads() (n, bytes int64)
}

var (
	_ queueRedis    = (*rdb.RDB)(nil)
	_ constantStore = (*cache.Store)(nil)
)
