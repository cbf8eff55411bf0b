// Package broker is the contract between redmap's processes and the store
// they share: every operation a worker asks of a queue's shards, each
// taking its arguments by name in one *Params struct (none if it has no
// arguments) and returning a *Result struct where it returns more than one
// value. The records they carry are internal/wire's.
//
// internal/rdb implements it on Redis (a script per operation, its KEYS and
// ARGV built from the params in one place); internal/broker/memory
// implements it in memory, for the parts' unit tests; the suite in
// internal/broker/brokertest runs against both, so that a rule the tests
// rely on holds of the real one.
package broker

import (
	"context"
	"log/slog"
	"time"

	"github.com/redmap/redmap/internal/wire"
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
	// Unwanted returns those of the tasks their managers no longer want.
	Unwanted(ctx context.Context, p *UnwantedParams) ([]string, error)

	// Heartbeat renews a worker's lease and publishes its info.
	Heartbeat(ctx context.Context, p *HeartbeatParams) (*wire.Beat, error)
	// Reap puts back the tasks of workers whose lease expired.
	Reap(ctx context.Context) (*wire.Reaped, error)
	// Retire ends a worker's lease, putting its tasks back.
	Retire(ctx context.Context, p *RetireParams) (*wire.Reaped, error)
	// Depth counts the task ids waiting in the shard's public lists.
	Depth(ctx context.Context) (int64, error)
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
	DeclareLimit(ctx context.Context, p *DeclareLimitParams) (*DeclareLimitResult, error)
	Throttle(ctx context.Context, p *ThrottleParams) (bool, error)
}

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

// UnwantedParams are the tasks a worker holds to ask about.
type UnwantedParams struct {
	Worker string
	Tasks  []string
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

// DeclareLimitResult is the limit in force ("" if none), and its source
// (rdb.LimitFromCode, rdb.LimitFromOperator).
type DeclareLimitResult struct {
	Limit wire.Limit
	From  string
}

// ThrottleParams pause function Func's rate for Quiet.
type ThrottleParams struct {
	Func  string
	Quiet time.Duration
}
