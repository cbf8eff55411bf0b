package redisbroker

import (
	"errors"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/keys"
)

// Fence is the claim on a durable batch as its owner holds it (the record
// Claim returned when it took it), shared by the owner's RDBs (Fenced).
// The scripts that write the batch's keys on the owner's behalf (submit,
// trim, renew, record, claim) compare it with the batch's fence
// (keys.Fence) — one GET — and refuse the write with a *FencedError if the
// fence holds another claim: another manager took the batch since. A
// fence Redis lost (restarted empty) refuses nothing. Before the owner's
// first claim it is empty, and its writes carry none.
type Fence struct {
	owner  string
	record atomic.Pointer[string]
}

// NewFence returns the empty fence of durable batch owner.
func NewFence(owner string) *Fence { return &Fence{owner: owner} }

// Set makes record, the claim the owner took, its fence.
func (f *Fence) Set(record string) { f.record.Store(&record) }

// Record returns the claim the owner holds, or "" before it took one.
func (f *Fence) Record() string {
	if r := f.record.Load(); r != nil {
		return *r
	}
	return ""
}

// Fenced returns r for a durable batch's owner: its writes of the batch's
// keys carry f.
func (r *Broker) Fenced(f *Fence) *Broker {
	k := *r
	k.fence = f
	return &k
}

// fenceOf returns the fence key and the claim that manager mid's writes
// carry: "", "" unless mid is the owner of r's fence and holds a claim.
func (r *Broker) fenceOf(mid string) (key, record string) {
	if r.fence == nil || r.fence.owner != mid {
		return "", ""
	}
	if record = r.fence.Record(); record == "" {
		return "", ""
	}
	return keys.Fence(r.prefix, r.queue, mid), record
}

// FencedError is a write of a durable batch's owner that a script refused:
// another manager took the batch after the owner did (its claim lapsed
// while it could not reach Redis). Holder is the claim taken last.
type FencedError struct {
	Op     string
	Holder wire.Holder
}

func (e *FencedError) Error() string {
	return e.Op + ": another manager (" + e.Holder.Manager + " on " + e.Holder.Host + ") took the durable batch over"
}

// fencedReply is the first word of a script's refusal of a fenced write,
// followed by the fence.
const fencedReply = "FENCED "

// fenced returns err as a *FencedError if it is a script's refusal of a
// fenced write, else nil.
func fenced(op string, err error) *FencedError {
	var reply redis.Error
	if !errors.As(err, &reply) || !strings.HasPrefix(reply.Error(), fencedReply) {
		return nil
	}
	h, _ := wire.DecodeHolder(strings.TrimPrefix(reply.Error(), fencedReply)) // a fence that does not decode names no one
	return &FencedError{Op: op, Holder: h}
}

// IsFenced reports whether err is a *FencedError.
func IsFenced(err error) bool {
	var fe *FencedError
	return errors.As(err, &fe)
}
