package manager

import (
	"context"
	"time"

	"github.com/redmap/redmap/cache"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/redisbroker"
	"github.com/redmap/redmap/internal/broker/wire"
)

// The manager's one seam to Redis: the part of the broker contract
// (internal/broker) a manager asks of, and the object cache. Its parts see
// a queue of one or more shards through these interfaces, which
// internal/broker/redisbroker implements (redisbroker.Broker, cache.Store); the parts' unit tests
// give them fakes. Sharding lives in one
// place, the router: a part asks it for a task's shard, or for them all.

// shardRedis is one shard of the manager's queue in Redis: its task set, its
// result list, its workers' leases.
type shardRedis interface {
	// Shard returns the shard's index: 0 for the queue's own keys.
	Shard() int

	// Submit queues tasks (the feeder and the recoverer).
	Submit(ctx context.Context, p *broker.SubmitParams) (*broker.SubmitResult, error)
	// Cancel withdraws tasks: workers skip them, their results are dropped.
	Cancel(ctx context.Context, p *broker.CancelParams) error
	Backup(ctx context.Context, p *broker.BackupParams) ([]broker.Backup, error)
	// Ping checks that Redis answers: faults tell a slow call from an
	// outage with it.
	Ping(ctx context.Context) error

	// ReadResults, ReadThenWait, WaitResults, StagedSizes, Unstaged and WakeCollector
	// are the collector's.
	ReadResults(ctx context.Context, p *broker.ReadResultsParams) ([]string, error)
	ReadThenWait(ctx context.Context, p *broker.ReadResultsParams) (*broker.ReadThenWaitResult, error)
	WaitResults(ctx context.Context, p *broker.WaitResultsParams) (string, error)
	Unstaged(ctx context.Context, p *broker.EntriesParams) ([]string, error)
	StagedSizes(ctx context.Context, p *broker.EntriesParams) ([]int, error)
	WakeCollector(ctx context.Context, p *broker.ManagerParams) error

	// Renew and Drop are the keeper's and Close's: the manager's keys live
	// while it does.
	Renew(ctx context.Context, p *broker.RenewParams) error
	Drop(ctx context.Context, p *broker.ManagerParams) error
	// ForgetLanes is the keeper's too: the lanes of batches that ended.
	ForgetLanes(ctx context.Context, p *broker.ForgetLanesParams) error

	// Reap is the reaper's.
	Reap(ctx context.Context) (*wire.Reaped, error)

	// Resume and Kept are a durable batch's owner's, before its first
	// submit (see durable.go).
	Resume(ctx context.Context, p *broker.ResumeParams) (*wire.Resumed, error)
	Kept(ctx context.Context, p *broker.KeptParams) ([]string, error)

	// Submitted, Missing and Audit are the recoverer's.
	Submitted(ctx context.Context, p *broker.ManagerParams) (*broker.SubmittedResult, error)
	Missing(ctx context.Context, p *broker.MissingParams) (*broker.MissingResult, error)
	Audit(ctx context.Context, p *broker.AuditParams) (*wire.Audited, error)
	// SetAsideTasks deletes the task set if p.Err, a refusal, says it holds
	// foreign data (faults.of, which has failed its tasks first).
	SetAsideTasks(ctx context.Context, p *broker.SetAsideTasksParams) bool
}

// queueRedis is shard 0, where the queue-wide records live as well.
type queueRedis interface {
	shardRedis
	Preflight(ctx context.Context, p *broker.PreflightParams) error
	LiveWorkers(ctx context.Context) ([]string, error)
	Served(ctx context.Context, p *broker.ServedParams) ([]wire.Serving, error)
	Types(ctx context.Context, p *broker.TypesParams) ([]string, error)
	PublishTypes(ctx context.Context, p *broker.PublishTypesParams) error
	// DeclareLimit and ReadLimit return a function's limit in force (see
	// limits.go).
	DeclareLimit(ctx context.Context, p *broker.DeclareLimitParams) (*broker.LimitResult, error)
	ReadLimit(ctx context.Context, p *broker.ReadLimitParams) (*broker.LimitResult, error)
	AdoptShards(ctx context.Context, p *broker.ShardsParams) ([]string, error)
	AddShards(ctx context.Context, p *broker.ShardsParams) ([]string, error)
	PublishBatches(ctx context.Context, p *broker.PublishBatchesParams) ([]string, error)
	// Claim, Sums and AddSums are a durable batch's owner's.
	Claim(ctx context.Context, p *broker.ClaimParams) (*wire.Claimed, error)
	Sums(ctx context.Context, p *broker.SumsParams) (map[string]string, error)
	AddSums(ctx context.Context, p *broker.AddSumsParams) error
	// Pipeline and RecordPipeline are a durable pipeline's record.
	Pipeline(ctx context.Context, p *broker.PipelineParams) (*wire.PipelineRecord, error)
	RecordPipeline(ctx context.Context, p *broker.RecordPipelineParams) error
	historyStore
	shuffleStore
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
	_ queueRedis    = broker.Queue(nil)
	_ queueRedis    = (*redisbroker.Broker)(nil)
	_ constantStore = (*cache.Store)(nil)
)
