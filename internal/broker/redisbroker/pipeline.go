package redisbroker

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/keys"
)

// Pipeline reads durable pipeline owner's record: nil if it has none. A
// key that holds anything but a record (another type, bytes that do not
// decode) is an error naming the key. One GET.
func (r *Broker) Pipeline(ctx context.Context, p *broker.PipelineParams) (*wire.PipelineRecord, error) {
	k := keys.Pipeline(r.prefix, r.queue, p.Owner)
	b, err := r.c.Get(ctx, k).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, wrap("read a durable pipeline's record", nil, "GET", err)
	}
	rec, err := wire.DecodePipelineRecord(b)
	if err != nil {
		return nil, fmt.Errorf("read a durable pipeline's record: %s does not hold one: %w", k, err)
	}
	return rec, nil
}

// RecordPipeline writes durable pipeline owner's record, living p.TTL, or
// deletes it (p.Record nil). One SET or DEL; for a holder of the
// pipeline's claim, one script call (pipeline.lua), refused with a
// *FencedError once another claim was taken.
func (r *Broker) RecordPipeline(ctx context.Context, p *broker.RecordPipelineParams) error {
	k := keys.Pipeline(r.prefix, r.queue, p.Owner)
	var enc []byte
	if p.Record != nil {
		var err error
		if enc, err = wire.EncodePipelineRecord(p.Record); err != nil {
			return fmt.Errorf("record a durable pipeline: %w", err)
		}
	}
	if fence, held := r.fenceOf(p.Owner); fence != "" {
		err := pipelineScript.run(ctx, r.c, []string{k, fence}, held, max(p.TTL.Milliseconds(), 1), enc).Err()
		return wrap("record a durable pipeline", pipelineScript, "", err)
	}
	if enc == nil {
		return wrap("record a durable pipeline", nil, "DEL", r.c.Del(ctx, k).Err())
	}
	return wrap("record a durable pipeline", nil, "SET", r.c.Set(ctx, k, enc, p.TTL).Err())
}

// DropPipeline deletes what durable pipeline name of queue keeps, unless
// a manager holds its claim (then it does nothing, and says so): its
// record (one script call, unrecord.lua, atomic with the check of the
// claim), then the partitions the record names, each by-key step's
// (UNLINKs in pipelines of 1,000 keys; on a Cluster, one per master each).
// A record that does not decode is deleted all the same, its partitions
// left to expire, and named in the error. A pipeline with no record
// deletes nothing.
func (a *Admin) DropPipeline(ctx context.Context, p *broker.DropPipelineParams) (*broker.DropPipelineResult, error) {
	queue, name := p.Queue, p.Name
	if err := keys.CheckDurable(name); err != nil {
		return nil, err
	}
	owner := id.Durable(name + "/pipeline")
	k := keys.Pipeline(a.prefix, queue, owner)
	vals, err := unrecordScript.run(ctx, a.c, []string{keys.Claim(a.prefix, queue, owner), k}).Slice()
	if err != nil {
		return nil, wrap("delete a durable pipeline's record", unrecordScript, "", err)
	}
	out := &broker.DropPipelineResult{}
	if what, _ := vals[0].(string); what == "held" {
		out.Held = true
		return out, nil
	} else if what != "deleted" || len(vals) < 2 {
		return out, nil
	}
	out.Record = true
	b, _ := vals[1].(string)
	rec, err := wire.DecodePipelineRecord([]byte(b))
	if err != nil {
		return out, fmt.Errorf("delete a durable pipeline's record: %s held no record (%w): deleted; its partitions, if any, expire", k, err)
	}
	// Only the partitions of the pipeline's own job: a record is read
	// back from Redis, and names no other job's keys.
	job := id.DurableJob("pipeline\x00" + name)
	for b, lv := range rec.Levels {
		if lv.Job != job && !strings.HasPrefix(lv.Job, job+".") {
			return out, fmt.Errorf("delete a durable pipeline's partitions: %s names job %q, not the pipeline's (%s): its by-key step %d's partitions are left to expire", k, lv.Job, job, b)
		}
		sh := wire.Shuffle{Job: lv.Job, Parts: max(lv.Partitions, len(lv.Salts)), Salts: lv.Salts}
		n, err := a.unlinkPartitions(ctx, queue, &sh)
		out.PartitionKeys += n
		if err != nil {
			return out, err
		}
	}
	return out, nil
}
