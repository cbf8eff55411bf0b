// Package broker is the contract between redmap's processes and the store
// they share: every operation a manager or a worker asks of a queue's
// shards, each taking its arguments by name in one *Params struct (none if
// it has no arguments) and returning a *Result struct where it returns more
// than one value. The records they carry are defined, each with its one
// encoding, in internal/broker/wire.
//
// internal/broker/redisbroker implements it on Redis (each operation
// beside the script it runs, its KEYS and ARGV built from the params in one
// place); the suite in internal/broker/brokertest holds it to the
// contract's rules on a real Redis. The parts' unit tests run on Redis too,
// through decorators of it that inject a chosen operation's failure.
package broker

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/redmap/redmap/internal/broker/wire"
)

// Shard is one shard of a queue: its lists, the workers' held sets and
// leases, the task sets and result lists of the managers that use it.
type Shard interface {
	// Shard returns the shard's index: 0 for the queue's own keys. Name
	// returns its name (the queue's, for 0).
	Shard() int
	Name() string

	// Take takes tasks for a worker, its private list first; WaitTake
	// waits for its bell first, the take pipelined behind the wait.
	Take(ctx context.Context, p *TakeParams) (*TakeResult, error)
	WaitTake(ctx context.Context, p *TakeParams) (*TakeResult, error)
	// WaitBell waits for a submit to ring a worker's bell, and reports
	// whether it rang; RingStop rings it for a worker that stops.
	WaitBell(ctx context.Context, p *WaitBellParams) (bool, error)
	RingStop(ctx context.Context, p *RingStopParams) error

	// Finish reports results: each is delivered only if its task is still
	// in its manager's task set, once.
	Finish(ctx context.Context, p *FinishParams) (*wire.Finished, error)
	// GiveBack puts held tasks back on their lists and returns how many
	// it put back.
	GiveBack(ctx context.Context, p *GiveBackParams) (int, error)
	// Held returns the members of a worker's held set (wire.HeldID).
	Held(ctx context.Context, p *HeldParams) ([]string, error)
	// Unwanted returns those of the tasks their managers no longer want,
	// and which of them a backup's race ended (UnwantedResult.Outrun).
	Unwanted(ctx context.Context, p *UnwantedParams) (*UnwantedResult, error)

	// Heartbeat renews a worker's lease and publishes its info.
	Heartbeat(ctx context.Context, p *HeartbeatParams) (*wire.Beat, error)
	// Reap puts back the tasks of workers whose lease expired.
	Reap(ctx context.Context) (*wire.Reaped, error)
	// Retire ends a worker's lease, putting its tasks back.
	Retire(ctx context.Context, p *RetireParams) (*wire.Reaped, error)
	// Depth counts the task ids waiting in the shard's public lists.
	Depth(ctx context.Context) (int64, error)

	// The manager's: submit and withdraw, read results, keep its keys.

	// Submit queues a manager's tasks, and says what its task set counts
	// and whether it was intact (the count and epoch expected).
	Submit(ctx context.Context, p *SubmitParams) (*SubmitResult, error)
	// Cancel withdraws tasks: a take drops them, their results are
	// discarded.
	Cancel(ctx context.Context, p *CancelParams) error
	// Backup queues copies of a manager's tasks that ran long, each kept
	// off the worker that holds the original, only while some worker is
	// idle; and records, on shard 0, how races ended (p.Races).
	Backup(ctx context.Context, p *BackupParams) ([]Backup, error)
	// Ping checks that the store answers.
	Ping(ctx context.Context) error
	// ReadResults trims the entries read last time off a manager's result
	// list and reads up to p.Limit more; ReadThenWait waits for one (up to
	// p.Wait) if there are none; WaitResults waits for the first.
	ReadResults(ctx context.Context, p *ReadResultsParams) ([]string, error)
	ReadThenWait(ctx context.Context, p *ReadResultsParams) (*ReadThenWaitResult, error)
	WaitResults(ctx context.Context, p *WaitResultsParams) (string, error)
	// Unstaged returns entries with each staged result in place;
	// StagedSizes the bytes of each entry, staged results in place.
	Unstaged(ctx context.Context, p *EntriesParams) ([]string, error)
	StagedSizes(ctx context.Context, p *EntriesParams) ([]int, error)
	// WakeCollector makes a manager's blocked WaitResults return now.
	WakeCollector(ctx context.Context, p *ManagerParams) error
	// Renew extends the life of a manager's keys; Drop deletes them;
	// ForgetLanes deletes what it keeps of lanes that ended.
	Renew(ctx context.Context, p *RenewParams) error
	Drop(ctx context.Context, p *ManagerParams) error
	ForgetLanes(ctx context.Context, p *ForgetLanesParams) error
	// Submitted returns a task set's count and epoch; Missing which of some
	// tasks it lacks; Audit what a lost key took along. The recoverer's.
	Submitted(ctx context.Context, p *ManagerParams) (*SubmittedResult, error)
	Missing(ctx context.Context, p *MissingParams) (*MissingResult, error)
	Audit(ctx context.Context, p *AuditParams) (*wire.Audited, error)
	// SetAsideTasks sets a task set aside if p.Err says it holds foreign
	// data, and reports whether it did.
	SetAsideTasks(ctx context.Context, p *SetAsideTasksParams) bool
	// Resume and Kept are a durable batch's owner's, before its first
	// submit: what the store has of the batch, and its kept results.
	Resume(ctx context.Context, p *ResumeParams) (*wire.Resumed, error)
	Kept(ctx context.Context, p *KeptParams) ([]string, error)
}

// Queue is shard 0 of a queue, where the queue-wide records live as well.
type Queue interface {
	Shard
	// Preflight checks, before a process serves, that the store answers
	// and allows every command redmap needs.
	Preflight(ctx context.Context, p *PreflightParams) error
	// PublishError says, for operators, why a worker cannot work.
	PublishError(ctx context.Context, p *PublishErrorParams)
	// CountFailures adds a worker's failure groups to the queue's.
	CountFailures(ctx context.Context, p *CountFailuresParams) (*CountFailuresResult, error)
	// LoseManagers records the batches of managers that stopped publishing
	// as "manager lost" in the queue's history, and returns how many.
	LoseManagers(ctx context.Context) (int, error)
	// ShardNames returns the queue's list of shard names.
	ShardNames(ctx context.Context) ([]string, error)
	// Types returns the structure published for a signature; PublishTypes
	// publishes it.
	Types(ctx context.Context, p *TypesParams) ([]string, error)
	PublishTypes(ctx context.Context, p *PublishTypesParams) error
	// DeclareLimit records the limit declared with a function's handle and
	// returns the limit in force; Throttle pauses a function's rate after
	// a RetryAfter and reports whether it has one.
	DeclareLimit(ctx context.Context, p *DeclareLimitParams) (*LimitResult, error)
	Throttle(ctx context.Context, p *ThrottleParams) (bool, error)

	// The manager's, queue-wide.

	// LiveWorkers returns the ids of the workers whose lease holds.
	LiveWorkers(ctx context.Context) ([]string, error)
	// Served says, for what each batch calls, whether a live worker
	// serves it.
	Served(ctx context.Context, p *ServedParams) ([]wire.Serving, error)
	// ReadLimit returns a function's limit in force, without writing.
	ReadLimit(ctx context.Context, p *ReadLimitParams) (*LimitResult, error)
	// AdoptShards records the shards a manager uses, taking the names the
	// list has; AddShards adds those it lacks. Both return the list.
	AdoptShards(ctx context.Context, p *ShardsParams) ([]string, error)
	AddShards(ctx context.Context, p *ShardsParams) ([]string, error)
	// PublishBatches publishes a manager's running batches and returns
	// those an operator asked it to cancel.
	PublishBatches(ctx context.Context, p *PublishBatchesParams) ([]string, error)
	// RecordBatches writes ended batches into the queue's history;
	// RecordFailed their failed elements.
	RecordBatches(ctx context.Context, p *RecordBatchesParams) error
	RecordFailed(ctx context.Context, p *RecordFailedParams) error
	// RestoreStages puts back what Redis lost of a pipeline's stage
	// counts, from those the manager counted of the batches it recorded.
	RestoreStages(ctx context.Context, p *RestoreStagesParams) error
	// Claim takes, renews or releases a durable batch's claim; Sums and
	// AddSums read and record the sums of its tasks' inputs.
	Claim(ctx context.Context, p *ClaimParams) (*wire.Claimed, error)
	Sums(ctx context.Context, p *SumsParams) (map[string]string, error)
	AddSums(ctx context.Context, p *AddSumsParams) error

	// A map/reduce by key's partitions. A map task stores its partials
	// under its range (StorePartials: a run again replaces them); a reduce
	// task reads those its manager counted (Partials) and writes its
	// output in their place (StoreOutput); the manager reads the output
	// page by page (OutputPage), keeps the partitions alive
	// (RenewPartitions), and drops them (DropPartitions); RecordShuffle
	// says where a durable job's partitions are, for an operator's cancel.
	StorePartials(ctx context.Context, p *StorePartialsParams) error
	Partials(ctx context.Context, p *PartialsParams) ([][]byte, error)
	StoreOutput(ctx context.Context, p *StoreOutputParams) error
	OutputPage(ctx context.Context, p *OutputPageParams) ([]byte, error)
	RenewPartitions(ctx context.Context, p *PartitionsParams) error
	DropPartitions(ctx context.Context, p *PartitionsParams) error
	RecordShuffle(ctx context.Context, p *RecordShuffleParams) error
	// Pipeline reads a durable pipeline's record (nil if it has none);
	// RecordPipeline writes or deletes it for the pipeline's holder,
	// fenced as its owner's writes are.
	Pipeline(ctx context.Context, p *PipelineParams) (*wire.PipelineRecord, error)
	RecordPipeline(ctx context.Context, p *RecordPipelineParams) error
}

// ErrPageMissing is OutputPage's error when the page is not in the store:
// the partition's output was lost, or deleted.
var ErrPageMissing = errors.New("broker: output page missing")

// TakeParams are what a take asks for: take.lua's ARGV.
type TakeParams struct {
	Worker string        // the worker's id
	Max    int           // tasks wanted, at least 1
	Room   int           // tasks of limited functions the worker could start now: a take takes no more of them (take.lua's limits, TakeEnd.Room and .Wait)
	Lease  time.Duration // the worker's lease, should the take register it again
	// Holding is how many tasks the worker holds, on every shard, by its
	// own count: a suspect goes only to a worker that holds none.
	Holding int
	// Shards is the queue's shard count as the worker knows it: a take of
	// shard 0 says the count in TakeEnd.Shards if it is above.
	Shards int
	// Serves is what the worker registered ("<func>\t<signature>" per
	// handle): a take passes lanes that call anything else.
	Serves []string
	// Wait is how long WaitTake waits for the worker's bell; Take ignores
	// it.
	Wait time.Duration
}

// TakeResult is what a take brought: the tasks, and how it ended.
type TakeResult struct {
	Taken []wire.Taken
	End   wire.TakeEnd
}

// WaitBellParams name the worker whose bell to wait for, and for how long.
type WaitBellParams struct {
	Worker  string
	Timeout time.Duration
}

// RingStopParams name the worker that stops.
type RingStopParams struct {
	Worker string
}

// FinishParams are a worker's results to report.
type FinishParams struct {
	Worker string
	Done   []wire.Done
}

// GiveBackParams are held tasks to put back: Ran says they ran (a worker
// that stops mid-task), which counts an attempt.
type GiveBackParams struct {
	Worker  string
	Members []string // held-set members (wire.HeldID)
	Ran     bool
}

// HeldParams name the worker whose held set to read.
type HeldParams struct {
	Worker string
}

// BackupParams are the tasks of manager Manager to copy, and the races
// that ended since the last call.
type BackupParams struct {
	Manager string
	Tasks   []string
	Races   []Race
}

// Race is how one task's race with its backup ended for the worker that
// held the original: Lost if the backup's result came first.
type Race struct {
	Worker string
	Lost   bool
}

// Backup is what became of one task a Backup call was to copy: State
// BackupQueued, BackupGone (no longer in its task set), BackupLost (lost
// before: never copied) or BackupBusy (no worker was idle: nothing was
// queued); Holder is the worker that holds the original, "" if unknown.
type Backup struct {
	Task, State, Holder string
}

// The states of a Backup.
const (
	BackupQueued = "queued"
	BackupGone   = "gone"
	BackupLost   = "lost"
	BackupBusy   = "busy"
)

// UnwantedParams are the tasks a worker holds to ask about.
type UnwantedParams struct {
	Worker string
	Tasks  []string
}

// UnwantedResult is what Unwanted says of the tasks asked about: those no
// longer wanted (Tasks), and those of them that got a backup task and
// ended with a result while the batch still runs (Outrun): the other copy's
// result came first, so the worker's call lost a race rather than being
// cancelled. A task's mark of its copy goes with its batch's cancel, so a
// cancelled task is never Outrun.
type UnwantedResult struct {
	Tasks  []string
	Outrun []string
}

// HeartbeatParams renew a worker's lease for Lease; Info, if not nil, is
// published with it.
type HeartbeatParams struct {
	Worker string
	Lease  time.Duration
	Info   *wire.WorkerInfo
}

// RetireParams end a worker's lease; Info, if not nil, is its last.
type RetireParams struct {
	Worker string
	Info   *wire.WorkerInfo
}

// PreflightParams bound the check: Budget for an unreachable store (0: one
// try), Heal for one healing an outage (loading, failing over); Log gets a
// warning if its policy may evict redmap's keys.
type PreflightParams struct {
	Budget, Heal time.Duration
	Log          *slog.Logger
}

// PublishErrorParams say why worker Worker cannot work, for Lease.
type PublishErrorParams struct {
	Worker string
	Lease  time.Duration
	Msg    string
}

// CountFailuresParams are a worker's failure groups to add.
type CountFailuresParams struct {
	Worker string
	Groups []wire.FailureGroup
}

// CountFailuresResult says how many failures were added, and how many
// malformed groups in the store were replaced.
type CountFailuresResult struct {
	Added, Malformed int64
}

// TypesParams name a signature.
type TypesParams struct {
	Sig string
}

// PublishTypesParams are the structure Types of signature Sig.
type PublishTypesParams struct {
	Sig   string
	Types []string
}

// DeclareLimitParams are the limit Record declared with function Func's
// handle.
type DeclareLimitParams struct {
	Func   string
	Record wire.LimitRecord
}

// LimitResult is the limit in force (zero if none), and its source
// (redisbroker.LimitFromCode, redisbroker.LimitFromOperator).
type LimitResult struct {
	Limit wire.Limit
	From  string
}

// ThrottleParams pause function Func's rate for Quiet.
type ThrottleParams struct {
	Func  string
	Quiet time.Duration
}

// SubmitParams are a manager's tasks to queue: on Lane, or on Worker's
// private list if set, each task set entry living TTL; Expect is what the
// manager knows of its task set (see wire.Expect).
type SubmitParams struct {
	Manager string
	Worker  string
	Lane    wire.Lane
	Tasks   []wire.Task
	TTL     time.Duration
	Expect  wire.Expect
}

// SubmitResult is the task set's count of tasks ever submitted, and
// whether the set was as the manager expected it.
type SubmitResult struct {
	Count  int64
	Intact bool
}

// CancelParams are a manager's tasks to withdraw.
type CancelParams struct {
	Manager string
	Tasks   []string
}

// ManagerParams name a manager (or a durable batch's owner).
type ManagerParams struct {
	Manager string
}

// ReadResultsParams read a manager's result list: Handled entries read
// last time, the last of them starting with Mark, are trimmed first; then
// up to Limit are read. ReadThenWait waits up to Wait for one.
type ReadResultsParams struct {
	Manager string
	Handled int
	Mark    string
	Limit   int
	Wait    time.Duration
}

// ReadThenWaitResult is what a read brought, and whether it came from the
// wait.
type ReadThenWaitResult struct {
	Entries  []string
	FromWait bool
}

// WaitResultsParams wait up to Timeout for a manager's first result.
type WaitResultsParams struct {
	Manager string
	Timeout time.Duration
}

// EntriesParams are entries read from a manager's result list.
type EntriesParams struct {
	Manager string
	Entries []string
}

// RenewParams extend a manager's keys' life to TTL.
type RenewParams struct {
	Manager string
	TTL     time.Duration
}

// ForgetLanesParams name a manager's lanes that ended (their numbers).
type ForgetLanesParams struct {
	Manager string
	Lanes   []string
}

// SubmittedResult is a task set's count of tasks ever submitted and its
// epoch: 0 and "" if it is gone.
type SubmittedResult struct {
	Count int64
	Epoch string
}

// MissingParams are a manager's tasks to look for in its task set.
type MissingParams struct {
	Manager string
	Tasks   []string
}

// MissingResult is those of the tasks the set lacks, with its count and
// epoch, read in the same step.
type MissingResult struct {
	Missing []string
	Count   int64
	Epoch   string
}

// AuditParams are a manager's outstanding tasks, by where they were
// placed, to check against the store; what is put back lives TTL.
type AuditParams struct {
	Manager string
	Groups  []wire.Placed
	TTL     time.Duration
}

// SetAsideTasksParams are a manager and the error a call of its task set
// met.
type SetAsideTasksParams struct {
	Manager string
	Err     error
}

// ResumeParams name a durable batch's owner; the claim its fence holds
// becomes the shard's, living TTL.
type ResumeParams struct {
	Owner string
	TTL   time.Duration
}

// KeptParams read up to N of an owner's kept results from index From.
type KeptParams struct {
	Owner string
	From  int64
	N     int64
}

// ServedParams are what batches call (wire.Calls).
type ServedParams struct {
	Calls []string
}

// ReadLimitParams name a function.
type ReadLimitParams struct {
	Func string
}

// ShardsParams are shard names: a manager's proposals, or those to add.
type ShardsParams struct {
	Names []string
}

// PublishBatchesParams are a manager's running batches, the hash living
// TTL, the next publish due within Due; Ended is the elements that ended
// since the manager last said.
type PublishBatchesParams struct {
	Manager string
	Batches map[string]wire.BatchProgress
	TTL     time.Duration
	Due     time.Duration
	Ended   int64
}

// RecordBatchesParams are a manager's batches that ended, for a history
// of at most Limit batches none older than Age; Ended as for
// PublishBatches.
type RecordBatchesParams struct {
	Manager string
	Records []wire.BatchRecord
	Limit   int
	Age     time.Duration
	Ended   int64
}

// RecordFailedParams are the failed elements of ended batch Batch, with
// Omitted more left out, living Age.
type RecordFailedParams struct {
	Batch   string
	Failed  []wire.FailedElement
	Omitted int
	Age     time.Duration
}

// RestoreStagesParams are the stage counts of pipeline Pipeline that a
// manager counted of the batches of it it recorded.
type RestoreStagesParams struct {
	Pipeline string
	Stages   []wire.StageCounts
}

// ClaimParams are a claim to take, renew or release (wire.Claim).
type ClaimParams = wire.Claim

// SumsParams name a durable batch's owner.
type SumsParams struct {
	Owner string
}

// AddSumsParams are sums (task id → sum of its inputs) of an owner's
// tasks, living TTL.
type AddSumsParams struct {
	Owner string
	Sums  map[string]string
	TTL   time.Duration
}

// StorePartialsParams are a map task's partials, one per partition of
// Shuffle, stored under Field (wire.Range of the task's elements).
type StorePartialsParams struct {
	Shuffle  *wire.Shuffle
	Field    string
	Partials [][]byte
}

// PartialsParams read partition Part's partials of Fields.
type PartialsParams struct {
	Shuffle *wire.Shuffle
	Part    int
	Fields  []string
}

// StoreOutputParams are partition Part's reduced output, in pages.
type StoreOutputParams struct {
	Shuffle *wire.Shuffle
	Part    int
	Pages   [][]byte
}

// OutputPageParams read page Page of partition Part's output.
type OutputPageParams struct {
	Shuffle *wire.Shuffle
	Part    int
	Page    int
}

// PartitionsParams name partitions of a shuffle.
type PartitionsParams struct {
	Shuffle *wire.Shuffle
	Parts   []int
}

// RecordShuffleParams are a durable job's shuffle to record.
type RecordShuffleParams struct {
	Shuffle *wire.Shuffle
}

// PipelineParams name a durable pipeline: the id of its own claim.
type PipelineParams struct {
	Owner string
}

// RecordPipelineParams are a durable pipeline's record, written for its
// holder (Owner, the id of its claim); a nil Record deletes it.
type RecordPipelineParams struct {
	Owner  string
	Record *wire.PipelineRecord
	TTL    time.Duration
}
