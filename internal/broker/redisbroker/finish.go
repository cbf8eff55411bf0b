package redisbroker

import (
	"cmp"
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/keys"
)

// Finish delivers the results of worker wid's finished tasks whose managers
// still want them and drops the rest, releasing the worker's hold on all of
// them. Finishing a task twice delivers it once.
//
// It sends one script call per group of up to 1,000 results or CallBytes,
// the results under Inline bytes first and the staged ones (a plain HSET
// each, in the call's MULTI) in calls of their own: at maxmemory Redis
// refuses the HSETs of a staged group whole, and its refusal must not hold
// back the small results of other batches. A group refused for want of
// memory goes in Full and the next groups are sent; a group that fails
// otherwise (Redis unreachable) and every group after it go in Failed, and
// the error is returned with what was reported before it. The error is the
// first one met.
func (r *Broker) Finish(ctx context.Context, p *broker.FinishParams) (*wire.Finished, error) {
	wid, done := p.Worker, p.Done
	ks := []string{keys.Held(r.prefix, r.queue, wid)}
	var out wire.Finished
	var first error
	small, staged := r.byStaging(done)
	for i, part := range [2][]wire.Done{small, staged} {
		for len(part) > 0 {
			n, size := 0, 0
			for n < len(part) && n < maxGroup && (n == 0 || size+len(part[n].Result)+len(part[n].Record) <= broker.CallBytes) {
				size += len(part[n].Result) + len(part[n].Record)
				n++
			}
			k, err := r.finishGroup(ctx, ks, wid, part[:n])
			switch {
			case err == nil:
				out.Sent += n
				out.Delivered += k
			case broker.OutOfMemory(err):
				out.Full = append(out.Full, part[:n]...)
				first = cmp.Or(first, err)
			default:
				out.Failed = append(out.Failed, part...)
				if i == 0 {
					out.Failed = append(out.Failed, staged...)
				}
				return &out, wrap("finish", finishScript, "", cmp.Or(first, err))
			}
			part = part[n:]
		}
	}
	return &out, wrap("finish", finishScript, "", first)
}

// byStaging splits done into the results sent through finish.lua and
// those staged beside it (over Inline bytes, of a task that names its
// manager), each in the order given; no copy if all are of one kind.
func (r *Broker) byStaging(done []wire.Done) (small, staged []wire.Done) {
	isStaged := func(d wire.Done) bool { return len(d.Result) > broker.Inline && id.Manager(d.ID) != "" }
	n := 0
	for _, d := range done {
		if isStaged(d) {
			n++
		}
	}
	switch n {
	case 0:
		return done, nil
	case len(done):
		return nil, done
	}
	small, staged = make([]wire.Done, 0, len(done)-n), make([]wire.Done, 0, n)
	for _, d := range done {
		if isStaged(d) {
			staged = append(staged, d)
		} else {
			small = append(small, d)
		}
	}
	return small, staged
}

// finishGroup runs finish.lua once for done (at most maxGroup results),
// staging the large results beside it, and returns how many were
// delivered; the error is Redis's, unwrapped.
func (r *Broker) finishGroup(ctx context.Context, ks []string, wid string, done []wire.Done) (int, error) {
	args := make([]any, 0, 2+2*len(done))
	args = append(args, r.base, "")
	var staged map[string][]any // staged results' key -> field, result, ...
	records := false
	for _, d := range done {
		records = records || d.Record != ""
		if mid := id.Manager(d.ID); len(d.Result) > broker.Inline && mid != "" {
			if staged == nil {
				staged = make(map[string][]any)
			}
			field := d.ID + " " + wid + " " + strconv.FormatUint(stagedSeq.Add(1), 36)
			k := keys.Staged(r.prefix, r.queue, mid)
			staged[k] = append(staged[k], field, d.Result)
			args = append(args, d.ID, "="+field)
		} else {
			args = append(args, d.ID, d.Result)
		}
		if d.Record != "" {
			args = append(args, soloToken(d), d.Record)
		}
	}
	// What finish.lua must look for among the pairs: history records
	// ("#"), staged results ("="); it spares every other call a look at
	// each task's.
	switch {
	case records && staged != nil:
		args[1] = "#="
	case records:
		args[1] = "#"
	case staged != nil:
		args[1] = "="
	}
	if staged == nil {
		return finishScript.run(ctx, r.c, ks, args...).Int()
	}
	return r.finishStaged(ctx, ks, staged, args)
}

// soloToken is what stands, in finish.lua's arguments, in a task id's
// place before the history record of d's batch, its only task: "#" and
// the history's bounds, the throughput counter of now, and its life.
func soloToken(d wire.Done) string {
	bucket := time.Now().Unix() / int64(keys.ThroughputBucket/time.Second)
	return "#" + strconv.Itoa(d.Keep) + "," + strconv.FormatInt(d.AgeMs, 10) + "," +
		strconv.FormatInt(bucket, 10) + "," + strconv.FormatInt(keys.ThroughputSpan.Milliseconds(), 10)
}

// stagedSeq numbers this process's staged results, so that no two finishes
// of a task by one worker share a field.
var stagedSeq atomic.Uint64

// finishStaged runs finish.lua (KEYS ks, ARGV args) in a MULTI after plain
// HSETs of the staged results (keys.Staged key -> field, result, ...), so
// that Redis never copies them into Lua; the script refers to each from
// its result list, or deletes it, in the same step. On NOSCRIPT (raised as
// EXEC runs, after the HSETs) all is made again with the whole script
// (inTx): the fields it did not refer to were left, and are overwritten.
func (r *Broker) finishStaged(ctx context.Context, ks []string, staged map[string][]any, args []any) (int, error) {
	for whole := false; ; whole = true {
		var run *redis.Cmd
		cmds, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			for k, fvs := range staged {
				p.HSet(ctx, k, fvs...)
			}
			run = finishScript.inTx(ctx, p, ks, whole, args...)
			return nil
		})
		err = txErr(cmds, err)
		if err != nil && redis.HasErrorPrefix(run.Err(), "NOSCRIPT") && !whole {
			continue
		}
		if err != nil {
			return 0, err
		}
		return run.Int()
	}
}
