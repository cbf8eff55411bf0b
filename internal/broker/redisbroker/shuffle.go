package redisbroker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/keys"
)

// The partitions of a map/reduce by key (see keys.Partition): plain
// commands, no script. A map task stores its partials under its range, so
// that a run of the same task again replaces them (HSET of the same field)
// rather than adding to them; a reduce task reads the partials of the
// ranges its manager counted (HMGET: only those, whatever else a stale run
// wrote), and writes its output in the place of the partition's partials
// in one MULTI (the two keys share a hash tag).

// partitionKeys returns the keys of partition p of sh.
func (r *Broker) partitionKeys(sh *wire.Shuffle, p int) (part, out string) {
	return keys.Partition(r.prefix, r.queue, sh.Job, p, sh.Salt(p)), keys.PartitionOut(r.prefix, r.queue, sh.Job, p, sh.Salt(p))
}

// StorePartials stores a map task's partials, one per partition of sh,
// under field (wire.Range of the task's elements), each partition's hash
// expiring after sh.TTL. One pipeline (on a Cluster, one per master).
func (r *Broker) StorePartials(ctx context.Context, p *broker.StorePartialsParams) error {
	sh, field, partials := p.Shuffle, p.Field, p.Partials
	ttl := time.Duration(sh.TTL) * time.Millisecond
	cmds, err := r.c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, b := range partials {
			part, _ := r.partitionKeys(sh, i)
			pipe.HSet(ctx, part, field, b)
			pipe.PExpire(ctx, part, ttl)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, c := range cmds {
		if c.Err() != nil {
			return c.Err()
		}
	}
	return nil
}

// Partials returns partition p's partials of fields, nil for each one
// Redis does not have. One HMGET.
func (r *Broker) Partials(ctx context.Context, pp *broker.PartialsParams) ([][]byte, error) {
	sh, p, fields := pp.Shuffle, pp.Part, pp.Fields
	if len(fields) == 0 {
		return nil, nil
	}
	part, _ := r.partitionKeys(sh, p)
	vals, err := r.c.HMGet(ctx, part, fields...).Result()
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(vals))
	for i, v := range vals {
		if s, ok := v.(string); ok {
			out[i] = []byte(s)
		}
	}
	return out, nil
}

// maxPushBytes caps the bytes of pages one RPUSH carries.
const maxPushBytes = 8 << 20

// StoreOutput replaces partition p's partials with its reduced output,
// pages: in one MULTI, it deletes the output list, pushes the pages, sets
// their TTL (sh.TTL) and deletes the partials.
func (r *Broker) StoreOutput(ctx context.Context, pp *broker.StoreOutputParams) error {
	sh, p, pages := pp.Shuffle, pp.Part, pp.Pages
	part, out := r.partitionKeys(sh, p)
	_, err := r.c.TxPipelined(ctx, func(tx redis.Pipeliner) error {
		tx.Del(ctx, out)
		var args []any
		size := 0
		for _, pg := range pages {
			args = append(args, pg)
			size += len(pg)
			if size >= maxPushBytes {
				tx.RPush(ctx, out, args...)
				args, size = nil, 0
			}
		}
		if len(args) > 0 {
			tx.RPush(ctx, out, args...)
		}
		tx.PExpire(ctx, out, time.Duration(sh.TTL)*time.Millisecond)
		tx.Del(ctx, part)
		return nil
	})
	return err
}

// OutputPage returns page i of partition p's output. One LINDEX.
func (r *Broker) OutputPage(ctx context.Context, pp *broker.OutputPageParams) ([]byte, error) {
	sh, p, i := pp.Shuffle, pp.Part, pp.Page
	_, out := r.partitionKeys(sh, p)
	b, err := r.c.LIndex(ctx, out, int64(i)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, broker.ErrPageMissing
	}
	return b, err
}

// DropPartitions deletes the partials and outputs of partitions ps of sh.
// One pipeline (on a Cluster, one per master).
func (r *Broker) DropPartitions(ctx context.Context, p *broker.PartitionsParams) error {
	_, err := r.c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for _, i := range p.Parts {
			part, out := r.partitionKeys(p.Shuffle, i)
			pipe.Del(ctx, part)
			pipe.Del(ctx, out)
		}
		return nil
	})
	return err
}

// RecordShuffle writes where durable job sh's partitions are, for an
// operator's cancel of the job by its name (Admin.DropShuffle), living
// sh.TTL. One SET.
func (r *Broker) RecordShuffle(ctx context.Context, p *broker.RecordShuffleParams) error {
	sh := p.Shuffle
	rec := *sh
	rec.Phase = wire.PhaseMap // what it starts with; any phase would do
	enc, err := wire.EncodeShuffle(&rec)
	if err != nil {
		return err
	}
	if err := r.c.Set(ctx, keys.ShuffleJob(r.prefix, r.queue, sh.Job), enc, time.Duration(sh.TTL)*time.Millisecond).Err(); err != nil {
		return wrap("record a shuffle", nil, "SET", err)
	}
	return nil
}

// DropShuffle deletes the partitions of durable map/reduce by key job of
// queue, and the record that says where they are (RecordShuffle); it
// returns how many keys it deleted. A job with no record (none, or it
// expired) deletes nothing. A GET, then UNLINKs in pipelines of 1,000
// keys (on a Cluster, one per master each).
func (a *Admin) DropShuffle(ctx context.Context, p *broker.DropShuffleParams) (int64, error) {
	queue, job := p.Queue, p.Job
	k := keys.ShuffleJob(a.prefix, queue, job)
	b, err := a.c.Get(ctx, k).Bytes()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, wrap("drop a shuffle's partitions", nil, "GET", err)
	}
	sh, err := wire.DecodeShuffle(b)
	if err != nil || sh.Job != job {
		// Not a record of ours: nothing of it can be trusted to name keys.
		return 0, fmt.Errorf("drop a shuffle's partitions: %s does not hold a job's record (%v): left alone", k, err)
	}
	n, err := a.unlinkPartitions(ctx, queue, sh)
	if err != nil {
		return n, err
	}
	if err := a.c.Unlink(ctx, k).Err(); err != nil {
		return n, wrap("drop a shuffle's partitions", nil, "UNLINK", err)
	}
	return n, nil
}

// unlinkPartitions deletes the partials and outputs of every partition of
// sh, a job of queue, and returns how many keys it deleted: UNLINKs in
// pipelines of 1,000 keys (on a Cluster, one per master each).
func (a *Admin) unlinkPartitions(ctx context.Context, queue string, sh *wire.Shuffle) (int64, error) {
	var n int64
	const batch = 500 // partitions, two keys each
	for from := 0; from < sh.Parts; from += batch {
		cmds, err := a.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := from; i < min(from+batch, sh.Parts); i++ {
				p.Unlink(ctx, keys.Partition(a.prefix, queue, sh.Job, i, sh.Salt(i)), keys.PartitionOut(a.prefix, queue, sh.Job, i, sh.Salt(i)))
			}
			return nil
		})
		if err != nil {
			return n, wrap("drop a shuffle's partitions", nil, "UNLINK", err)
		}
		for _, c := range cmds {
			n += c.(*redis.IntCmd).Val()
		}
	}
	return n, nil
}

// RenewPartitions sets the TTL of partitions ps of sh again (sh.TTL), so
// that they outlive a long call. One pipeline (on a Cluster, one per
// master).
func (r *Broker) RenewPartitions(ctx context.Context, p *broker.PartitionsParams) error {
	sh, ps := p.Shuffle, p.Parts
	ttl := time.Duration(sh.TTL) * time.Millisecond
	_, err := r.c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for _, i := range ps {
			part, out := r.partitionKeys(sh, i)
			pipe.PExpire(ctx, part, ttl)
			pipe.PExpire(ctx, out, ttl)
		}
		return nil
	})
	return err
}
