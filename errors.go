package redmap

import (
	"github.com/redmap/redmap/internal/engine"
	"github.com/redmap/redmap/internal/failure"
)

// Sentinel errors, for errors.Is. A *TaskError wraps one of them (or the
// function's own error) as its cause.
var (
	// ErrUnknownFunc: no worker on the queue has registered the function's name.
	ErrUnknownFunc = failure.ErrUnknownFunc
	// ErrTypeMismatch: the worker registered the name with other input or output
	// types than the manager's handle.
	ErrTypeMismatch = failure.ErrTypeMismatch
	// ErrPanic: the function panicked; TaskError.Stack holds the stack.
	ErrPanic = failure.ErrPanic
	// ErrDecode: a task, an input or an output could not be decoded.
	ErrDecode = failure.ErrDecode
	// ErrEncode: an input or an output could not be encoded.
	ErrEncode = failure.ErrEncode
	// ErrTooLarge: a value is larger than its configured cap.
	ErrTooLarge = failure.ErrTooLarge
	// ErrDuplicateFunc: a worker was given two functions of one name.
	ErrDuplicateFunc = failure.ErrDuplicateFunc
	// ErrClosed: the manager was closed.
	ErrClosed = failure.ErrClosed
	// ErrUnavailable: Redis could not be reached for longer than the
	// manager's RedisTimeout.
	ErrUnavailable = failure.ErrUnavailable
	// ErrConstantMissing: a batch's constant data is not in Redis (its holds
	// expired, or Redis lost it).
	ErrConstantMissing = failure.ErrConstantMissing
	// ErrConstantCorrupt: the constant data fetched from Redis does not match
	// its BLAKE3 hash.
	ErrConstantCorrupt = failure.ErrConstantCorrupt
	// ErrLost: the task was lost (its workers died or stalled past their lease)
	// more often than the batch's attempt budget allows, or it was sent to the
	// private queue of a worker that died.
	ErrLost = failure.ErrLost
	// ErrPurged: an operator purged the queue (redmap purge) while the task
	// waited in it. It is an ErrLost too (errors.Is holds for both), counted
	// apart ("purged") in the history and the metrics.
	ErrPurged = failure.ErrPurged
	// ErrTimeout: the function ran past the batch's per-task timeout on every
	// attempt.
	ErrTimeout = failure.ErrTimeout
	// ErrReduce: the reducer of a manager.MapReduce failed to fold an
	// element's output in (it returned an error or panicked); that output is
	// left out of the fold.
	ErrReduce = failure.ErrReduce
	// ErrRedisFull: Redis refused a write because it reached maxmemory (with
	// the noeviction policy redmap needs); nothing was submitted.
	ErrRedisFull = failure.ErrRedisFull
	// ErrNoWorker: no live worker can run the batch. Returned by Submit when
	// OnWorker names a worker that is not live; and the cause of each
	// element still waiting when no live worker of the queue has registered
	// the batch's function with its types for manager.Options.NoWorkerTimeout
	// (joined with ErrUnknownFunc, or ErrTypeMismatch naming the first field
	// that differs).
	ErrNoWorker = failure.ErrNoWorker
	// ErrPermission: Redis refused a command because the connection's ACL
	// user may not run it, or may not touch its keys (NOPERM, or a script's
	// "can't run this command"). Retrying does not help; a *CommandError
	// names the command.
	ErrPermission = failure.ErrPermission
	// ErrRefused: Redis answered a command with an error that retrying does
	// not heal (WRONGTYPE, an unknown command, a bad DB index, a script
	// error). A *CommandError names the command.
	ErrRefused = failure.ErrRefused
	// ErrCancelled: an operator cancelled the batch (redmap cancel, the
	// dashboard): the cause of each of its elements without an outcome, or
	// of every element of a durable batch cancelled while no manager held
	// it, for the call that takes it over.
	ErrCancelled = failure.ErrCancelled
	// ErrDurableHeld: a durable batch (manager.Durable) is held by another
	// live manager, or already runs in this one; a *HeldError says which.
	ErrDurableHeld = failure.ErrDurableHeld
	// ErrDurableMismatch: a call took over a durable batch (manager.Durable)
	// with an input, function or constant other than the batch's: the task
	// named differs. Nothing of the two inputs is mixed.
	ErrDurableMismatch = failure.ErrDurableMismatch
)

// HeldError says which manager holds a durable batch that another call
// asked for: the batch's Name, the holder's Manager id, its Host and PID,
// and Since when it holds it. It unwraps to ErrDurableHeld.
type HeldError = failure.HeldError

// CommandError is a command Redis refused with an error reply that retrying
// does not heal. It unwraps to ErrPermission or ErrRefused, so callers test
// it with errors.Is; errors.As gives the details: Op (what redmap was
// doing: "submit", "take", ...), Command (the refused command, upper case,
// "" if unknown), Reply (Redis's error reply), Kind (ErrPermission or
// ErrRefused) and Key (the key Redis could not use, when known).
type CommandError = failure.CommandError

// TaskError is the failure of one element of a batch: its Index in the
// batch's input, the Func's registered name, the Attempt that failed (0 for
// the first run of its task), Err the cause (the function's error as a
// *RemoteError, or one of the sentinels above; Unwrap returns it), Stack the
// stack of a recovered panic, and Worker the id of the worker whose attempt
// failed ("" for a failure on the manager's side: lost, no worker, ...).
type TaskError = failure.TaskError

// BatchError lists every failed element of a batch, in index order. Map and
// Batch.Wait return it alongside the outputs of the elements that succeeded,
// so a caller can re-run just the failed ones: Total elements, Failed one
// *TaskError per failed element, Indexes their indexes. Its message groups
// the failures by cause, the most frequent first ("redmap: 300 of 300
// elements failed: 295 elements (0, 1, 2, ...): 429 from API; ..."); its
// Unwrap gives every failure to errors.Is and errors.As.
type BatchError = failure.BatchError

// RemoteError is an error returned by a function on a worker, carried back by
// its message (Msg); the original value and type stay on the worker.
type RemoteError = failure.RemoteError

// Retryable marks err as worth another attempt: a function that returns
// Retryable(err) is run again, up to the batch's attempt budget, even when
// the batch does not retry errors (manager.RetryErrors).
func Retryable(err error) error {
	return engine.Retryable(err)
}

// IsRetryable reports whether err was marked with Retryable.
func IsRetryable(err error) bool { return engine.IsRetryable(err) }
