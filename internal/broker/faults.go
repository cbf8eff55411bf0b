package broker

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/failure"
)

// What a failed operation means for its caller. The store's operations
// return the errors of its client (go-redis: a network error, a
// redis.Error reply) or the errors below, which the implementation makes
// of them; the predicates classify both, so that no caller needs to know
// the implementation.

// ErrNoAnswer is the error of a Preflight that had no answer from the
// store within its budget: it is unreachable (Unreachable says so).
var ErrNoAnswer = errors.New("no answer from Redis")

// ErrSetAside marks a read that met foreign data in one of its manager's
// own keys, which were then set aside: the read, made again, finds them
// absent. It is Transient.
var ErrSetAside = errors.New("foreign data set aside")

// Unreachable reports whether err means Redis could not be reached (a
// refused, dropped or timed-out connection), as opposed to an error reply
// from a server that is there (out of memory, a script error) or the
// caller's own context ending. A refusal (a *failure.CommandError, which
// keeps the reply as text, not as a redis.Error) is a reply too: were it
// taken for an outage, a refused call would be retried for as long as an
// outage is (a batch's history record waited out its 2 s budget on a
// revoked TIME before Wait returned). So is a *FencedError.
func Unreachable(err error) bool {
	if errors.Is(err, ErrNoAnswer) {
		return true // a Preflight's, whose pings ran out of its own time
	}
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || Refused(err) || IsFenced(err) {
		return false
	}
	var reply redis.Error
	return !errors.As(err, &reply)
}

// transientReplies are error replies of a server that is there but cannot
// serve for now: loading a dataset, a replica or a primary in a failover, a
// cluster resharding, a long script running, a blocked read ended because
// its node changed role (UNBLOCKED).
var transientReplies = []string{"LOADING", "READONLY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "BUSY", "MOVED", "ASK", "NOREPLICAS", "NOTBUSY", "UNBLOCKED"}

// Transient reports whether err may heal by itself: Redis unreachable, or
// busy with a restart or failover. Callers retry those for a bounded time.
func Transient(err error) bool {
	if Unreachable(err) || errors.Is(err, ErrSetAside) {
		return true
	}
	var reply redis.Error
	if !errors.As(err, &reply) {
		return false
	}
	if ReplyIn(err, transientReplies) {
		return true
	}
	msg := reply.Error()
	return strings.HasPrefix(msg, "ERR max number of clients") ||
		// A script's key moved to another node of a Cluster (its slot
		// migrating): the script's guard key keeps redmap's scripts from
		// it, this covers any other.
		strings.Contains(msg, "Script attempted to access a non local key") ||
		strings.Contains(msg, "Script attempted to execute a command while the cluster is down")
}

// ReplyIn reports whether err is an error reply whose first word is one of
// kinds.
func ReplyIn(err error, kinds []string) bool {
	var reply redis.Error
	if !errors.As(err, &reply) {
		return false
	}
	first, _, _ := strings.Cut(reply.Error(), " ")
	for _, k := range kinds {
		if first == k {
			return true
		}
	}
	return false
}

// OutOfMemory reports whether err is Redis refusing a write at maxmemory.
func OutOfMemory(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply) && strings.HasPrefix(reply.Error(), "OOM ")
}

// Refused reports whether err is a refusal (a *failure.CommandError):
// retrying the same call will fail the same way.
func Refused(err error) bool {
	var ce *failure.CommandError
	return errors.As(err, &ce)
}

// Slow reports whether err is a call that timed out, or waited out the
// client's pool, rather than one refused or dropped: what a slow link or a
// pool too small for its callers does as well as a Redis gone. The caller
// tells them apart by asking Redis (Ping).
func Slow(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false // the caller's own deadline (which is a net.Error too)
	}
	if errors.Is(err, redis.ErrPoolTimeout) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// PartlySubmitted is the error of a Submit whose first groups were queued
// and a later one failed (Err): a call that made progress. Queued is how
// many of its tasks, from the first, Redis holds; Count and Intact are what
// their last group returned, as Submit returns them.
type PartlySubmitted struct {
	Queued int
	Count  int64
	Intact bool
	Err    error
}

func (e *PartlySubmitted) Error() string { return e.Err.Error() }

func (e *PartlySubmitted) Unwrap() error { return e.Err }

// Fence is the claim on a durable batch as its owner holds it (the record
// Claim returned when it took it), shared by the owner's shards. The
// operations that write the batch's keys on the owner's behalf (submit,
// trim, renew, record, claim) compare it with the batch's fence in the
// store and refuse the write with a *FencedError if the fence holds
// another claim: another manager took the batch since. A fence the store
// lost (Redis restarted empty) refuses nothing. Before the owner's first
// claim it is empty, and its writes carry none.
type Fence struct {
	owner  string
	record atomic.Pointer[string]
}

// NewFence returns the empty fence of durable batch owner.
func NewFence(owner string) *Fence { return &Fence{owner: owner} }

// Owner returns the id of the durable batch's owner.
func (f *Fence) Owner() string { return f.owner }

// Set makes record, the claim the owner took, its fence.
func (f *Fence) Set(record string) { f.record.Store(&record) }

// Record returns the claim the owner holds, or "" before it took one.
func (f *Fence) Record() string {
	if r := f.record.Load(); r != nil {
		return *r
	}
	return ""
}

// FencedError is a write of a durable batch's owner that the store
// refused: another manager took the batch after the owner did (its claim
// lapsed while it could not reach Redis). Holder is the claim taken last.
type FencedError struct {
	Op     string
	Holder wire.Holder
}

func (e *FencedError) Error() string {
	return e.Op + ": another manager (" + e.Holder.Manager + " on " + e.Holder.Host + ") took the durable batch over"
}

// IsFenced reports whether err is a *FencedError.
func IsFenced(err error) bool {
	var fe *FencedError
	return errors.As(err, &fe)
}
