package redisbroker

import (
	"context"
	"time"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/keys"
)

// RecordBatches writes recs, batches of manager mid that ended, into the
// queue's history, keeping its last limit batches and none older than age,
// forgets them among mid's published running ones, and adds ended
// (elements ended since the manager last said) to the queue's throughput
// counter of now. One script call per ScriptBudget records.
func (r *Broker) RecordBatches(ctx context.Context, p *broker.RecordBatchesParams) error {
	mid, recs, limit, age, ended := p.Manager, p.Records, p.Limit, p.Age, p.Ended
	ks := []string{keys.History(r.prefix, r.queue), keys.HistoryIndex(r.prefix, r.queue), keys.Batches(r.prefix, r.queue, mid),
		keys.Throughput(r.prefix, r.queue, time.Now().Unix()/int64(keys.ThroughputBucket/time.Second))}
	fence, held := r.fenceOf(mid)
	if fence != "" {
		ks = append(ks, fence)
	}
	for first := true; first || len(recs) > 0; first = false {
		n := min(len(recs), broker.ScriptBudget)
		args := make([]any, 0, 6+2*n)
		args = append(args, limit, age.Milliseconds(), keys.Base(r.prefix, r.queue), ended, keys.ThroughputSpan.Milliseconds(), held)
		for _, rec := range recs[:n] {
			args = append(args, rec.ID, wire.EncodeRecord(rec))
		}
		if err := recordScript.run(ctx, r.c, ks, args...).Err(); err != nil {
			return wrap("record batches", recordScript, "", err)
		}
		recs, ended = recs[n:], 0
	}
	return nil
}
