package redisbroker

import (
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/keys"
)

// Fenced returns r for a durable batch's owner: its writes of the batch's
// keys carry f.
func (r *Broker) Fenced(f *broker.Fence) *Broker {
	k := *r
	k.fence = f
	return &k
}

// fenceOf returns the fence key and the claim that manager mid's writes
// carry: "", "" unless mid is the owner of r's fence and holds a claim.
func (r *Broker) fenceOf(mid string) (key, record string) {
	if r.fence == nil || r.fence.Owner() != mid {
		return "", ""
	}
	if record = r.fence.Record(); record == "" {
		return "", ""
	}
	return keys.Fence(r.prefix, r.queue, mid), record
}

// fencedReply is the first word of a script's refusal of a fenced write,
// followed by the fence.
const fencedReply = "FENCED "

// fenced returns err as a *FencedError if it is a script's refusal of a
// fenced write, else nil.
func fenced(op string, err error) *broker.FencedError {
	var reply redis.Error
	if !errors.As(err, &reply) || !strings.HasPrefix(reply.Error(), fencedReply) {
		return nil
	}
	h, _ := wire.DecodeHolder(strings.TrimPrefix(reply.Error(), fencedReply)) // a fence that does not decode names no one
	return &broker.FencedError{Op: op, Holder: h}
}
