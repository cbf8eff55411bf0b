package redisbroker

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/redmap/redmap/internal/keys"
)

// indexClock says when a queue's name is due in the index of queues again:
// RDBs of one shard made from one another (KeepingResults) share it.
type indexClock struct {
	next atomic.Int64 // Unix ns; 0: due now
}

// due reports whether the name is due at now, and if so takes the turn, so
// that of callers at once only one writes.
func (c *indexClock) due(now time.Time) bool {
	next := c.next.Load()
	return now.UnixNano() >= next && c.next.CompareAndSwap(next, now.Add(keys.QueueIndexEvery).UnixNano())
}

// nameQueue names r's queue in the index of queues (keys.QueueIndex), if
// r is its shard 0 and the name is due: at the first call, then at most
// every keys.QueueIndexEvery. One script call when due, none otherwise.
//
// Its failure is not its caller's (a heartbeat or a publish, which did
// their own work): the index is for operators, and a worker whose lease
// hung on a key of another Cluster slot would stop for nothing. The name is
// due again a keys.QueueIndexEvery later, as after a success, so that a
// refusal that lasts (an ACL without the index's key) costs no more than
// the index does.
func (r *Broker) nameQueue(ctx context.Context) {
	if r.shard != 0 || !r.index.due(time.Now()) {
		return
	}
	_ = indexQueue(ctx, r, r.queue)
}

// indexQueue names queue in the index of queues under r's prefix. One
// script call.
func indexQueue(ctx context.Context, r *Broker, queue string) error {
	err := indexScript.run(ctx, r.c, []string{keys.QueueIndex(r.prefix)}, queue, keys.QueueIndexAge.Milliseconds()).Err()
	return wrap("index the queue", indexScript, "", err)
}
