// The error vocabulary users test for. Package redmap re-exports each of
// these (the same values and, by type aliases, the same types) with their
// documentation; they live here so that the packages redmap is built on
// need not import it.

package failure

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/broker/wire"
)

// Sentinel errors, for errors.Is (redmap.ErrUnknownFunc, ...). A *TaskError wraps one of them (or the
// function's own error) as its cause.
var (
	// ErrUnknownFunc: no worker on the queue has registered the function's name.
	ErrUnknownFunc = errors.New("redmap: unknown function")
	// ErrTypeMismatch: the worker registered the name with other input or output
	// types than the manager's handle.
	ErrTypeMismatch = errors.New("redmap: function type mismatch")
	// ErrPanic: the function panicked; TaskError.Stack holds the stack.
	ErrPanic = errors.New("redmap: function panicked")
	// ErrDecode: a task, an input or an output could not be decoded.
	ErrDecode = errors.New("redmap: undecodable payload")
	// ErrEncode: an input or an output could not be encoded.
	ErrEncode = errors.New("redmap: unencodable value")
	// ErrTooLarge: a value is larger than its configured cap.
	ErrTooLarge = codec.ErrTooLarge
	// ErrDuplicateFunc: a worker was given two functions of one name.
	ErrDuplicateFunc = errors.New("redmap: function registered twice")
	// ErrClosed: the manager was closed.
	ErrClosed = errors.New("redmap: manager closed")
	// ErrUnavailable: Redis could not be reached for longer than the
	// manager's RedisTimeout.
	ErrUnavailable = errors.New("redmap: redis unavailable")
	// ErrConstantMissing: a batch's constant data is not in Redis (its holds
	// expired, or Redis lost it).
	ErrConstantMissing = errors.New("redmap: constant data missing from redis")
	// ErrConstantCorrupt: the constant data fetched from Redis does not match
	// its BLAKE3 hash.
	ErrConstantCorrupt = errors.New("redmap: constant data does not match its hash")
	// ErrLost: the task was lost (its workers died or stalled past their lease)
	// more often than the batch's attempt budget allows, or it was sent to the
	// private queue of a worker that died.
	ErrLost = errors.New("redmap: task lost")
	// ErrPurged: an operator purged the queue (redmap purge) while the task
	// waited in it. It is an ErrLost too (errors.Is holds for both), counted
	// apart ("purged") in the history and the metrics.
	ErrPurged = fmt.Errorf("%w: purged from the queue by an operator", ErrLost)
	// ErrTimeout: the function ran past the batch's per-task timeout on every
	// attempt.
	ErrTimeout = errors.New("redmap: task timed out")
	// ErrReduce: the reducer of a manager.MapReduce failed to fold an
	// element's output in (it returned an error or panicked); that output is
	// left out of the fold.
	ErrReduce = errors.New("redmap: reduce failed")
	// ErrRedisFull: Redis refused a write because it reached maxmemory (with
	// the noeviction policy redmap needs); nothing was submitted.
	ErrRedisFull = errors.New("redmap: redis is out of memory")
	// ErrNoWorker: no live worker can run the batch. Returned by Submit when
	// OnWorker names a worker that is not live; and the cause of each
	// element still waiting when no live worker of the queue has registered
	// the batch's function with its types for manager.Options.NoWorkerTimeout
	// (joined with ErrUnknownFunc, or ErrTypeMismatch naming the first field
	// that differs).
	ErrNoWorker = errors.New("redmap: no such live worker")
	// ErrPermission: Redis refused a command because the connection's ACL
	// user may not run it, or may not touch its keys (NOPERM, or a script's
	// "can't run this command"). Retrying does not help; a *CommandError
	// names the command.
	ErrPermission = errors.New("redmap: redis permission denied")
	// ErrRefused: Redis answered a command with an error that retrying does
	// not heal (WRONGTYPE, an unknown command, a bad DB index, a script
	// error). A *CommandError names the command.
	ErrRefused = errors.New("redmap: redis refused a command")
	// ErrCancelled: an operator cancelled the batch (redmap cancel, the
	// dashboard): the cause of each of its elements without an outcome, or
	// of every element of a durable batch cancelled while no manager held
	// it, for the call that takes it over.
	ErrCancelled = errors.New("redmap: batch cancelled by an operator")
	// ErrDurableHeld: a durable batch (manager.Durable) is held by another
	// live manager, or already runs in this one; a *HeldError says which.
	ErrDurableHeld = errors.New("redmap: durable batch held by another manager")
	// ErrDurableMismatch: a call took over a durable batch (manager.Durable)
	// with an input, function or constant other than the batch's: the task
	// named differs. Nothing of the two inputs is mixed.
	ErrDurableMismatch = errors.New("redmap: durable batch's input differs")
	// ErrThrottled: the function kept answering RetryAfter past the batch's
	// bound (manager.MaxRetryAfter).
	ErrThrottled = errors.New("redmap: throttled past the batch's bound")
)

// HeldError says which manager holds a durable batch that another call
// asked for. It unwraps to ErrDurableHeld.
type HeldError struct {
	Name    string    // the batch's name (manager.Durable)
	Manager string    // the holder's manager id
	Host    string    // the holder's host name
	PID     int       // the holder's process id
	Since   time.Time // when it took the batch
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("redmap: durable batch %q is held by manager %s on %s (pid %d) since %s",
		e.Name, e.Manager, e.Host, e.PID, e.Since.Format(time.RFC3339))
}

// Unwrap returns ErrDurableHeld.
func (e *HeldError) Unwrap() error { return ErrDurableHeld }

// CommandError is a command Redis refused with an error reply that retrying
// does not heal. It unwraps to ErrPermission or ErrRefused, so callers test
// it with errors.Is; errors.As gives the details.
type CommandError struct {
	Op      string // what redmap was doing: "submit", "take", "heartbeat", ...
	Command string // the refused Redis command, upper case, such as "TIME"; "" if unknown
	Reply   string // Redis's error reply
	Kind    error  // ErrPermission or ErrRefused
	Key     string // the key Redis could not use (foreign data in it), when known
}

func (e *CommandError) Error() string {
	what := "a command"
	if e.Command != "" {
		what = e.Command
	}
	if e.Kind == ErrPermission {
		if strings.HasPrefix(e.Reply, "WRONGPASS") || strings.HasPrefix(e.Reply, "NOAUTH") {
			return fmt.Sprintf("redmap: %s: Redis refused the credentials (check the user and password in the URL): %s", e.Op, e.Reply)
		}
		return fmt.Sprintf("redmap: %s: the Redis user may not run %s (grant it: see docs/connecting.md, \"A least-privilege ACL user\"): %s", e.Op, what, e.Reply)
	}
	if e.Key != "" {
		return fmt.Sprintf("redmap: %s: Redis refused %s on key %s: %s", e.Op, what, e.Key, e.Reply)
	}
	return fmt.Sprintf("redmap: %s: Redis refused %s: %s", e.Op, what, e.Reply)
}

// Unwrap returns ErrPermission or ErrRefused.
func (e *CommandError) Unwrap() error { return e.Kind }

// TaskError is the failure of one element of a batch.
type TaskError struct {
	Index   int    // the element's index in the batch's input
	Func    string // the function's registered name
	Attempt int    // the attempt that failed: 0 for the first run of its task
	Err     error  // the cause: the function's error, or one of the sentinels above
	Stack   string // the stack of a recovered panic, else empty
	// Worker is the id of the worker whose attempt failed, or "" for a
	// failure on the manager's side (lost, no worker, ...) or a worker of
	// an earlier release. It is not part of Error's message.
	Worker string
	// Stage is, in a pipeline (manager.From), the number of the step the
	// element failed in, from 1; Func is that step's. 0 outside one.
	Stage int
	// Key is, past a pipeline's by-key step, the key (as %v prints it) of
	// the pair the failed element came from; Index is then -1.
	Key string
}

func (e *TaskError) Error() string {
	what := fmt.Sprintf("element %d of %q", e.Index, e.Func)
	switch {
	case e.Stage > 0 && e.Key != "":
		what = fmt.Sprintf("key %q in step %d (%q)", e.Key, e.Stage, e.Func)
	case e.Stage > 0:
		what = fmt.Sprintf("element %d in step %d (%q)", e.Index, e.Stage, e.Func)
	}
	if e.Attempt > 0 {
		return fmt.Sprintf("redmap: %s, attempt %d: %v", what, e.Attempt+1, e.Err)
	}
	return fmt.Sprintf("redmap: %s: %v", what, e.Err)
}

// Unwrap returns the cause.
func (e *TaskError) Unwrap() error { return e.Err }

// BatchError lists every failed element of a batch, in index order. Map and
// Batch.Wait return it alongside the outputs of the elements that succeeded,
// so a caller can re-run just the failed ones.
type BatchError struct {
	Total  int          // elements in the batch
	Failed []*TaskError // one per failed element, in index order
}

// Error groups the failures by cause, the most frequent first, each with its
// count and first indexes: "redmap: 300 of 300 elements failed: 295
// elements (0, 1, 2, ...): 429 from API; 5 elements (7, ...): task timed
// out". Messages that differ only in the numbers, ids, paths or quoted
// strings they name are one cause, shown by its first message ("messages
// like: ..."). At most 4 causes are shown, each cut at 320 bytes; errors.As
// gives every failure.
func (e *BatchError) Error() string {
	const (
		shownCauses  = 4
		shownIndexes = 3
		causeBytes   = 320
	)
	type group struct {
		cause  string // the first message
		varied bool   // another message of the group differs from it
		first  []int  // up to shownIndexes, in index order
		n      int
	}
	var groups []*group
	byCause := map[string]*group{}
	// A fingerprint costs microseconds (regular expressions): each distinct
	// line is fingerprinted once, not each of a batch's 10,000 failures.
	prints := map[string]string{}
	for _, f := range e.Failed {
		c := causeLine(f.Err, causeBytes)
		key, ok := prints[c]
		if !ok {
			key = wire.Fingerprint(c)
			prints[c] = key
		}
		g := byCause[key]
		if g == nil {
			g = &group{cause: c}
			byCause[key] = g
			groups = append(groups, g)
		}
		g.varied = g.varied || c != g.cause
		if g.n++; len(g.first) < shownIndexes {
			g.first = append(g.first, f.Index)
		}
	}
	// Stable: among causes as frequent, the one met first comes first.
	slices.SortStableFunc(groups, func(a, b *group) int { return b.n - a.n })
	var b strings.Builder
	fmt.Fprintf(&b, "redmap: %d of %d elements failed", len(e.Failed), e.Total)
	for i, g := range groups {
		sep := "; "
		if i == 0 {
			sep = ": "
		}
		if i == shownCauses {
			rest := 0
			for _, g := range groups[i:] {
				rest += g.n
			}
			fmt.Fprintf(&b, "; and %d more causes (%d elements)", len(groups)-i, rest)
			break
		}
		if g.n == 1 {
			fmt.Fprintf(&b, "%selement %d: %s", sep, g.first[0], g.cause)
			continue
		}
		like := ""
		if g.varied {
			like = "messages like: "
		}
		idx := make([]string, len(g.first))
		for j, x := range g.first {
			idx[j] = strconv.Itoa(x)
		}
		if g.n > len(g.first) {
			idx = append(idx, "...")
		}
		fmt.Fprintf(&b, "%s%d elements (%s): %s%s", sep, g.n, strings.Join(idx, ", "), like, g.cause)
	}
	return b.String()
}

// causeLine is err's message for a BatchError's: on one line, without the
// "redmap: " the BatchError's own message begins with, cut at max bytes.
func causeLine(err error, max int) string {
	c := strings.TrimPrefix(fmt.Sprint(err), "redmap: ")
	c = strings.Join(strings.Fields(c), " ")
	if len(c) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(c[cut]) {
			cut--
		}
		c = c[:cut] + "…"
	}
	return c
}

// Unwrap returns the element errors, so errors.Is and errors.As look into them.
func (e *BatchError) Unwrap() []error {
	errs := make([]error, len(e.Failed))
	for i, f := range e.Failed {
		errs[i] = f
	}
	return errs
}

// Indexes returns the indexes of the failed elements, in order.
func (e *BatchError) Indexes() []int {
	idx := make([]int, len(e.Failed))
	for i, f := range e.Failed {
		idx[i] = f.Index
	}
	return idx
}

// RemoteError is an error returned by a function on a worker, carried back by
// its message; the original value and type stay on the worker.
type RemoteError struct {
	Msg string // the error's message, as the function's error.Error() gave it on the worker
}

func (e *RemoteError) Error() string { return e.Msg }
