package redisbroker

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
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
