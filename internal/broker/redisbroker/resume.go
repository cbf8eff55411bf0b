package redisbroker

import (
	"context"
	"fmt"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/keys"
)

// Resume returns what a manager taking over durable batch owner finds of it
// on r's shard (see resume.lua): the task set's count and epoch, the length
// of the kept list, which now holds every result delivered so far, and the
// tasks outstanding (queued, or held by a worker). The claim r's fence
// holds, if any, becomes the shard's fence, living ttl: a holder before it
// writes nothing more of the batch there. One script call; read the kept
// results with Kept.
func (r *Broker) Resume(ctx context.Context, p *broker.ResumeParams) (*wire.Resumed, error) {
	owner, ttl := p.Owner, p.TTL
	ks := []string{keys.Tasks(r.prefix, r.queue, owner), keys.Results(r.prefix, r.queue, owner), keys.Kept(r.prefix, r.queue, owner),
		keys.Cancelled(r.prefix, r.queue, owner)}
	fence, held := r.fenceOf(owner)
	if fence != "" {
		ks = append(ks, fence)
	}
	vals, err := resumeScript.run(ctx, r.c, ks, held, max(ttl.Milliseconds(), 1)).Slice()
	if err != nil {
		// Every key but the task set is set aside if it holds foreign data.
		return nil, onKey(wrap("resume a durable batch", resumeScript, "", err), ks[0])
	}
	if len(vals) < 4 {
		return nil, fmt.Errorf("resume a durable batch: %d values in the reply, want 4 or more", len(vals))
	}
	var res wire.Resumed
	res.Count, _ = vals[0].(int64)
	res.Epoch, _ = vals[1].(string)
	res.Kept, _ = vals[2].(int64)
	res.Cancelled, _ = vals[3].(string)
	for _, v := range vals[4:] {
		if tid, ok := v.(string); ok {
			res.Outstanding = append(res.Outstanding, tid)
		}
	}
	return &res, nil
}

// Kept returns up to n of durable batch owner's kept results from index
// from, staged results in place: one LRANGE (its entries are at most
// Inline bytes each), then the staged results in reads of at most
// CallBytes (StagedSizes, Unstaged), as the collector reads them.
func (r *Broker) Kept(ctx context.Context, p *broker.KeptParams) ([]string, error) {
	return r.entries(ctx, keys.Kept(r.prefix, r.queue, p.Owner), p.Owner, p.From, p.N)
}

// entries returns up to n entries of owner's result list or kept list
// (list) from index from, staged results in place, as Kept does.
func (r *Broker) entries(ctx context.Context, list, owner string, from, n int64) ([]string, error) {
	es, err := r.c.LRange(ctx, list, from, from+n-1).Result()
	if err != nil {
		return nil, wrap("read kept results", nil, "LRANGE", err)
	}
	sizes, err := r.StagedSizes(ctx, &broker.EntriesParams{Manager: owner, Entries: es})
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(es))
	for done := 0; done < len(es); {
		k := broker.Within(sizes[done:], broker.CallBytes)
		read, err := r.Unstaged(ctx, &broker.EntriesParams{Manager: owner, Entries: es[done : done+k]})
		if err != nil {
			return nil, err
		}
		out = append(out, read...)
		done += k
	}
	return out, nil
}
