package broker

import (
	"context"
	"time"

	"github.com/redmap/redmap/internal/broker/wire"
)

// Operator is what the operators' tools (the CLI, the dashboard, through
// package inspect) ask of the store: every queue's records, read and acted
// on by queue name. internal/broker/redisbroker implements it (Admin);
// memory does not (the tools' tests run on Redis).
type Operator interface {
	// Ping checks that the store answers; Now returns its clock (ms).
	Ping(ctx context.Context) error
	Now(ctx context.Context) (int64, error)
	// Queues returns the queues the index names; ScanQueues finds them by
	// their keys; IndexQueues names queues in the index.
	Queues(ctx context.Context) ([]string, error)
	ScanQueues(ctx context.Context) ([]string, error)
	IndexQueues(ctx context.Context, p *IndexQueuesParams) error

	// A queue's state: its shards, its workers (live, and gone since a
	// time), what waits in it, its running batches, its failure groups,
	// its throughput, its history and its limits.
	Shards(ctx context.Context, p *QueueParams) ([]string, error)
	Workers(ctx context.Context, p *QueueParams) ([]wire.Registered, error)
	Gone(ctx context.Context, p *GoneParams) ([]wire.Registered, error)
	Depth(ctx context.Context, p *QueueParams) (int64, error)
	Queued(ctx context.Context, p *QueueParams) (int64, error)
	Backlog(ctx context.Context, p *QueueParams) (*wire.Backlog, error)
	Batches(ctx context.Context, p *QueueParams) ([]wire.PublishedBatch, error)
	Failures(ctx context.Context, p *QueueParams) (*FailuresResult, error)
	FailedElements(ctx context.Context, p *FailedElementsParams) (*FailedElementsResult, error)
	Throughput(ctx context.Context, p *ThroughputParams) ([]int64, error)
	History(ctx context.Context, p *HistoryParams) (*HistoryResult, error)
	InHistory(ctx context.Context, p *InHistoryParams) (map[string]bool, error)
	Stages(ctx context.Context, p *StagesParams) (map[string][]wire.StageCounts, error)
	Ended(ctx context.Context, p *QueueParams) (*EndedResult, error)
	Limits(ctx context.Context, p *QueueParams) ([]wire.FuncLimit, error)
	DurableNames(ctx context.Context, p *QueueParams) (map[string]string, error)
	DurableStates(ctx context.Context, p *DurableStatesParams) (*DurableStatesResult, error)
	Paused(ctx context.Context, p *QueueParams) (*wire.Pause, error)

	// Acting on a queue: cancel a batch, a durable batch (by name or
	// owner), drop a durable job's partitions, delete what an orphaned
	// durable pipeline (one none holds) keeps and the keys of a durable batch
	// none holds, drain a worker, purge the
	// queue, record lost managers' batches, pause and resume it, set and
	// clear a function's limit.
	CancelBatch(ctx context.Context, p *CancelBatchParams) error
	CancelDurable(ctx context.Context, p *CancelDurableParams) (string, error)
	CancelOwner(ctx context.Context, p *CancelOwnerParams) (string, error)
	DropShuffle(ctx context.Context, p *DropShuffleParams) (int64, error)
	DropPipeline(ctx context.Context, p *DropPipelineParams) (*DropPipelineResult, error)
	ForgetOwner(ctx context.Context, p *CancelOwnerParams) (bool, error)
	Drain(ctx context.Context, p *DrainParams) error
	Purge(ctx context.Context, p *QueueParams) (*PurgeResult, error)
	LoseManagers(ctx context.Context, p *QueueParams) (int, error)
	Pause(ctx context.Context, p *PauseParams) (bool, error)
	Resume(ctx context.Context, p *QueueParams) (*UnpauseResult, error)
	SetLimit(ctx context.Context, p *SetLimitParams) (*LimitResult, error)
	ClearLimit(ctx context.Context, p *ClearLimitParams) (*LimitResult, error)
}

// QueueParams name a queue.
type QueueParams struct {
	Queue string
}

// IndexQueuesParams are queues to name in the index.
type IndexQueuesParams struct {
	Queues []string
}

// GoneParams ask for a queue's workers gone since Since (store ms).
type GoneParams struct {
	Queue string
	Since int64
}

// FailuresResult is a queue's failure groups, most frequent first, and
// how many could not be read.
type FailuresResult struct {
	Groups    []wire.FailureGroup
	Malformed int
}

// FailedElementsParams name an ended batch of a queue.
type FailedElementsParams struct {
	Queue string
	Batch string
}

// FailedElementsResult is a batch's failed elements, and how many records
// of them did not decode.
type FailedElementsResult struct {
	Elements  wire.FailedElements
	Malformed int
}

// ThroughputParams ask for a queue's elements ended each second of the
// Span before Now.
type ThroughputParams struct {
	Queue string
	Now   time.Time
	Span  time.Duration
}

// HistoryParams ask for at most N of a queue's ended batches (all if N is
// 0 or less).
type HistoryParams struct {
	Queue string
	N     int
}

// HistoryResult is the ended batches, newest first, and how many records
// did not decode.
type HistoryResult struct {
	Records   []wire.BatchRecord
	Malformed int
}

// InHistoryParams are batch ids to look for in a queue's history.
type InHistoryParams struct {
	Queue string
	IDs   []string
}

// StagesParams names pipelines of a queue (codec.CallInfo's Pipeline)
// whose stage counts to read.
type StagesParams struct {
	Queue     string
	Pipelines []string
}

// EndedResult is what a queue's history counted: batches by outcome,
// failed elements by kind.
type EndedResult struct {
	Outcomes, Kinds map[string]int64
	Backups         map[string]int64 // started, won, wasted
}

// DurableStatesParams name durable batches' owners of a queue.
type DurableStatesParams struct {
	Queue  string
	Owners []string
}

// DurableStatesResult says, for each owner, whether a manager holds it,
// how many of its tasks are outstanding, and whether an operator
// cancelled it.
type DurableStatesResult struct {
	Held        map[string]bool
	Outstanding map[string]int64
	Cancelled   map[string]bool
	// Late are those held whose claim its holder has not renewed for
	// longer than it renews it (wire.Holder's Every) allows, by how long
	// ago it last did.
	Late map[string]time.Duration
}

// CancelBatchParams name a running batch of a queue and its manager.
type CancelBatchParams struct {
	Queue, Manager, Batch string
}

// CancelDurableParams name a durable batch of a queue; Discard cancels one
// whose results wait for a takeover.
type CancelDurableParams struct {
	Queue, Name, Reason string
	Discard             bool
}

// CancelOwnerParams name a durable batch by its owner.
type CancelOwnerParams struct {
	Queue, Owner, Reason string
	Discard              bool
}

// DropShuffleParams name a durable map/reduce by key job of a queue.
type DropShuffleParams struct {
	Queue, Job string
}

// DropPipelineParams name a durable pipeline of a queue (its name, as
// manager.Durable was given it).
type DropPipelineParams struct {
	Queue, Name string
}

// DropPipelineResult is what DropPipeline did: nothing if a manager holds
// the pipeline's claim (Held); else whether it deleted the pipeline's
// record (Record), and how many keys of its partitions it deleted.
type DropPipelineResult struct {
	Held, Record  bool
	PartitionKeys int64
}

// DrainParams name a worker of a queue to drain.
type DrainParams struct {
	Queue, Worker string
}

// PurgeResult is how many tasks a purge failed in their batches, and how
// many ids it dropped in all.
type PurgeResult struct {
	Purged, Dropped int
}

// PauseParams pause a queue, By whom.
type PauseParams struct {
	Queue, By string
}

// UnpauseResult says whether the queue was paused, and how many idle
// workers its resume rang.
type UnpauseResult struct {
	Paused bool
	Rang   int64
}

// SetLimitParams are an operator's limit of function Func of a queue.
type SetLimitParams struct {
	Queue, Func string
	Record      wire.LimitRecord
}

// ClearLimitParams name a function of a queue whose operator's limit goes.
type ClearLimitParams struct {
	Queue, Func string
}
