package redisbroker

import (
	"context"
	"time"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/keys"
)

// PublishBatches replaces manager mid's published batch progress with
// batches (batch id -> progress), living ttl; none deletes it. It says the
// manager's next publish is due within due (past it, the manager is lost:
// see LoseManagers), adds ended (elements ended since the last call) to the
// queue's throughput counter of now, and takes the batch ids an operator
// asked the manager to cancel. One script call per ScriptBudget batches:
// past that, the slices build the next hash beside the published one, and
// the last call puts it in place; on shard 0, at the first call and then
// every keys.QueueIndexEvery, one more to name the queue in the index of
// queues.
func (r *Broker) PublishBatches(ctx context.Context, p *broker.PublishBatchesParams) (cancels []string, err error) {
	mid, batches, ttl, due, ended := p.Manager, p.Batches, p.TTL, p.Due, p.Ended
	ks := []string{keys.Batches(r.prefix, r.queue, mid), keys.Cancels(r.prefix, r.queue, mid),
		keys.Managers(r.prefix, r.queue),
		keys.Throughput(r.prefix, r.queue, time.Now().Unix()/int64(keys.ThroughputBucket/time.Second)),
		keys.BatchesNext(r.prefix, r.queue, mid)}
	fence, held := r.fenceOf(mid)
	if fence != "" {
		ks = append(ks, fence)
	}
	head := []any{mid, ttl.Milliseconds(), due.Milliseconds(), ended, keys.ThroughputSpan.Milliseconds()}
	pairs := make([]any, 0, 2*len(batches))
	for id, b := range batches {
		pairs = append(pairs, id, wire.EncodeProgress(b))
	}
	mode := "whole"
	if len(pairs) > 2*broker.ScriptBudget {
		mode = "first"
	}
	for {
		n := min(len(pairs), 2*broker.ScriptBudget)
		if mode != "whole" && n == len(pairs) {
			mode = "last"
		}
		args := append(append(append(make([]any, 0, len(head)+2+n), head...), mode, held), pairs[:n]...)
		cmd := publishScript.run(ctx, r.c, ks, args...)
		if mode == "whole" || mode == "last" {
			cancels, err = cmd.StringSlice()
			if err != nil {
				return nil, wrap("publish batches", publishScript, "", err)
			}
			r.nameQueue(ctx)
			return cancels, nil
		}
		if err := cmd.Err(); err != nil {
			return nil, wrap("publish batches", publishScript, "", err)
		}
		pairs, mode = pairs[n:], "more"
	}
}
