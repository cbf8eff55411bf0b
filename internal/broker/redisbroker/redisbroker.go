// Package redisbroker is the broker contract (internal/broker) on Redis,
// and the only code in redmap that sends Redis commands. Each operation's
// Go and the Lua script it runs sit side by side (take.go and take.lua,
// finish.go and finish.lua, ...): the Go builds the script's KEYS and ARGV
// from the operation's params in one place; each script begins with its
// contract, and is loaded once (with what it uses of prelude.lua) and run
// by SHA. Admin is what the operators' tools ask of Redis.
package redisbroker

import (
	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/keys"
)

// maxGroup caps the tasks or results sent in one script call, and maxGroupBytes
// their bytes: a script call blocks Redis while it runs, so one call of a huge
// batch would stall every other client.
const (
	maxGroup      = 1000
	maxGroupBytes = 8 << 20
)

// Broker speaks the protocol of one queue, or of one shard of a sharded queue
// (see keys.Shard): each shard is a queue of its own in Redis, with its own
// task sets, result lists, workers and leases.
type Broker struct {
	c      redis.UniversalClient
	prefix string
	queue  string // the shard's name
	shard  int
	base   string
	rings  []string      // the rings of lanes, highest priority first
	keep   bool          // a durable batch's: results trimmed are kept (KeepingResults)
	index  *indexClock   // when the queue's name is due in the index of queues
	fence  *broker.Fence // a durable batch's owner's: the claim its writes carry (Fenced)
	wait   *waiter       // c's: bounds its blocking reads (WaitResults)
}

// New returns the protocol of queue under prefix on c.
func New(c redis.UniversalClient, prefix, queue string) *Broker { return NewShard(c, prefix, queue, 0) }

// NewShard returns the protocol of the shard named name (see keys.Shard)
// under prefix on c, which its user numbers i: tasks it takes say so
// (Taken.Shard).
func NewShard(c redis.UniversalClient, prefix, name string, i int) *Broker {
	followFailovers(c)
	return &Broker{c: c, prefix: prefix, queue: name, shard: i, base: keys.Base(prefix, name), rings: keys.Rings(prefix, name),
		index: &indexClock{}, wait: waiterOf(c)}
}

// Name returns the name of r's shard (the queue's, for shard 0).
func (r *Broker) Name() string { return r.queue }

// Shard returns the number of r's shard: 0 for an unsharded queue.
func (r *Broker) Shard() int { return r.shard }

// Broker is the broker contract on Redis.
var _ broker.Queue = (*Broker)(nil)
