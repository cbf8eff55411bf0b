package redisbroker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/keys"
)

// Admin answers an operator's questions about every queue under a prefix.
type Admin struct {
	c      redis.UniversalClient
	prefix string
}

// NewAdmin returns the operator's view of the queues under prefix on c.
func NewAdmin(c redis.UniversalClient, prefix string) *Admin {
	followFailovers(c)
	return &Admin{c: c, prefix: prefix}
}

// Queue returns the protocol of queue's shard 0, where its queue-wide
// records live (its limits).
func (a *Admin) Queue(queue string) *Broker { return New(a.c, a.prefix, queue) }

// Ping checks that Redis answers. One round trip.
func (a *Admin) Ping(ctx context.Context) error {
	return wrap("ping", nil, "PING", a.c.Ping(ctx).Err())
}

// Queues lists the queues the index of queues names (keys.QueueIndex):
// those whose managers published or workers heartbeated within
// keys.QueueIndexAge, sorted. One round trip, whatever else the database
// holds.
func (a *Admin) Queues(ctx context.Context) ([]string, error) {
	var now *redis.TimeCmd
	var zs *redis.ZSliceCmd
	_, err := a.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		now = p.Time(ctx)
		zs = p.ZRangeWithScores(ctx, keys.QueueIndex(a.prefix), 0, -1)
		return nil
	})
	if err != nil {
		return nil, wrap("queues", nil, "TIME or ZRANGE", err)
	}
	// Writers drop the names too old as they write; with none writing, the
	// reader does not list them either.
	oldest := float64(now.Val().Add(-keys.QueueIndexAge).UnixMilli())
	qs := make([]string, 0, len(zs.Val()))
	for _, z := range zs.Val() {
		q, _ := z.Member.(string)
		if z.Score >= oldest && keys.CheckQueue(q) == nil {
			qs = append(qs, q)
		}
	}
	slices.Sort(qs)
	return qs, nil
}

// ScanQueues lists the queues that have any key under the prefix, found by
// SCAN of the whole keyspace (on a Cluster, of every master): what an
// earlier build, which kept no index of queues, left is found too. Its cost
// grows with every key of the database, redmap's or not; it names each
// queue it finds in the index (IndexQueues), so that Queues finds them from
// then on. The shards of a sharded queue are listed once, under the
// queue's name.
func (a *Admin) ScanQueues(ctx context.Context) ([]string, error) {
	seen := map[string]bool{}
	err := a.scan(ctx, keys.QueuesPattern(a.prefix), func(k string) error {
		k = strings.TrimPrefix(k, a.prefix+":{")
		if q, _, ok := strings.Cut(k, "}:"); ok {
			q, _ = keys.SplitShard(q)
			if keys.CheckQueue(q) == nil { // not the index's own tag
				seen[q] = true
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("scan: %w", err)
	}
	qs := make([]string, 0, len(seen))
	for q := range seen {
		qs = append(qs, q)
	}
	slices.Sort(qs)
	return qs, a.IndexQueues(ctx, &broker.IndexQueuesParams{Queues: qs})
}

// IndexQueues names queues in the index of queues, as their managers and
// workers do. One script call a queue.
func (a *Admin) IndexQueues(ctx context.Context, p *broker.IndexQueuesParams) error {
	queues := p.Queues
	r := New(a.c, a.prefix, "")
	for _, q := range queues {
		if err := keys.CheckQueue(q); err != nil {
			return err
		}
		if err := indexQueue(ctx, r, q); err != nil {
			return err
		}
	}
	return nil
}

// Shards returns the names of queue's shards (see keys.Shard): the queue
// itself, and those in its list of shard names.
func (a *Admin) Shards(ctx context.Context, p *broker.QueueParams) ([]string, error) {
	queue := p.Queue
	if err := keys.CheckQueue(queue); err != nil {
		return nil, err
	}
	names, err := a.c.LRange(ctx, keys.ShardNames(a.prefix, queue), 0, keys.MaxShards).Result()
	if err != nil {
		return nil, fmt.Errorf("shards: %w", err)
	}
	return append([]string{queue}, names...), nil
}

// Workers returns the registered workers of queue, live or not yet reaped,
// as shard 0 has them (a worker serves every shard), with the tasks they
// hold in all shards.
func (a *Admin) Workers(ctx context.Context, p *broker.QueueParams) ([]wire.Registered, error) {
	queue := p.Queue
	if err := keys.CheckQueue(queue); err != nil {
		return nil, err
	}
	shards, err := a.Shards(ctx, &broker.QueueParams{Queue: queue})
	if err != nil {
		return nil, err
	}
	zs, err := a.c.ZRangeWithScores(ctx, keys.Workers(a.prefix, queue), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("workers: %w", err)
	}
	out := make([]wire.Registered, len(zs))
	cmds := make([]*redis.MapStringStringCmd, len(zs))
	held := make([][]*redis.IntCmd, len(zs))
	var races *redis.MapStringStringCmd
	_, err = a.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		races = p.HGetAll(ctx, keys.Races(a.prefix, queue))
		for i, z := range zs {
			wid := z.Member.(string)
			out[i] = wire.Registered{Queue: queue, ID: wid, Deadline: int64(z.Score)}
			cmds[i] = p.HGetAll(ctx, keys.WorkerInfo(a.prefix, queue, wid))
			for _, sh := range shards {
				held[i] = append(held[i], p.SCard(ctx, keys.Held(a.prefix, sh, wid)))
			}
		}
		return nil
	})
	if err != nil && err != redis.Nil {
		return nil, fmt.Errorf("workers: %w", err)
	}
	for i := range out {
		out[i].Info, out[i].Malformed = wire.DecodeWorkerInfo(cmds[i].Val())
		for _, h := range held[i] {
			out[i].Held += h.Val()
		}
		out[i].Races, out[i].Lost = raceCount(races.Val(), out[i].ID)
	}
	return out, nil
}

// raceCount returns worker wid's backup races and those it lost, from
// the queue's races (keys.Races); a count that is not a number is none.
func raceCount(races map[string]string, wid string) (n, lost int64) {
	n, _ = strconv.ParseInt(races[wid+"\traces"], 10, 64)
	lost, _ = strconv.ParseInt(races[wid+"\tlost"], 10, 64)
	return max(n, 0), min(max(lost, 0), max(n, 0))
}

// Gone returns the workers of queue that stopped or died since since (Redis
// ms), with the last info each published, except those registered again.
func (a *Admin) Gone(ctx context.Context, p *broker.GoneParams) ([]wire.Registered, error) {
	queue, since := p.Queue, p.Since
	if err := keys.CheckQueue(queue); err != nil {
		return nil, err
	}
	ids, err := a.c.ZRangeByScore(ctx, keys.Gone(a.prefix, queue), &redis.ZRangeBy{Min: strconv.FormatInt(since, 10), Max: "+inf"}).Result()
	if err != nil {
		return nil, wrap("gone workers", nil, "ZRANGEBYSCORE", err)
	}
	out := make([]wire.Registered, 0, len(ids))
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	live := make([]*redis.FloatCmd, len(ids))
	_, err = a.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, wid := range ids {
			cmds[i] = p.HGetAll(ctx, keys.WorkerInfo(a.prefix, queue, wid))
			live[i] = p.ZScore(ctx, keys.Workers(a.prefix, queue), wid)
		}
		return nil
	})
	if err != nil && err != redis.Nil {
		return nil, wrap("gone workers", nil, "HGETALL or ZSCORE", err)
	}
	for i, wid := range ids {
		h := cmds[i].Val()
		if live[i].Err() == nil || len(h) == 0 { // registered again, or its record expired
			continue
		}
		r := wire.Registered{Queue: queue, ID: wid}
		r.Info, r.Malformed = wire.DecodeWorkerInfo(h)
		out = append(out, r)
	}
	return out, nil
}

// Now returns the Redis clock, ms.
func (a *Admin) Now(ctx context.Context) (int64, error) {
	t, err := a.c.Time(ctx).Result()
	if err != nil {
		return 0, fmt.Errorf("time: %w", err)
	}
	return t.UnixMilli(), nil
}

// Depth returns the number of task ids in queue's lanes, in all its shards.
func (a *Admin) Depth(ctx context.Context, p *broker.QueueParams) (int64, error) {
	shards, err := a.Shards(ctx, p)
	if err != nil {
		return 0, err
	}
	return a.depth(ctx, shards)
}

// depth returns the number of task ids in the lanes of shards: a script
// call a shard.
func (a *Admin) depth(ctx context.Context, shards []string) (int64, error) {
	var total int64
	for _, sh := range shards {
		n, err := depth(ctx, a.c, keys.Base(a.prefix, sh), keys.Rings(a.prefix, sh))
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// Batches returns the published progress of running batches of queue: of
// the managers that publish (keys.Managers) and of the durable batches'
// owners (keys.Durables), which are all the managers whose progress hash
// exists. Two round trips, whatever else the database holds.
func (a *Admin) Batches(ctx context.Context, p *broker.QueueParams) ([]wire.PublishedBatch, error) {
	queue := p.Queue
	if err := keys.CheckQueue(queue); err != nil {
		return nil, err
	}
	mids, err := a.union(ctx, func(p redis.Pipeliner) (managers, owners *redis.StringSliceCmd) {
		return p.ZRange(ctx, keys.Managers(a.prefix, queue), 0, -1), p.HKeys(ctx, keys.Durables(a.prefix, queue))
	})
	if err != nil {
		return nil, wrap("batches", nil, "ZRANGE or HKEYS", err)
	}
	// One pipeline for every manager's hash: a thousand managers cost one
	// round trip, not a thousand.
	cmds := make([]*redis.MapStringStringCmd, len(mids))
	_, err = a.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, mid := range mids {
			cmds[i] = p.HGetAll(ctx, keys.Batches(a.prefix, queue, mid))
		}
		return nil
	})
	if err != nil && err != redis.Nil {
		return nil, wrap("batches", nil, "HGETALL", err)
	}
	var out []wire.PublishedBatch
	for i, mid := range mids {
		for bid, s := range cmds[i].Val() {
			p, err := wire.DecodeProgress(s)
			out = append(out, wire.PublishedBatch{Queue: queue, Manager: mid, ID: bid, Progress: p, Malformed: err})
		}
	}
	return out, nil
}

// Failures returns the queue's failure groups, most frequent first, and how
// many could not be read. One HGETALL.
func (a *Admin) Failures(ctx context.Context, p *broker.QueueParams) (*broker.FailuresResult, error) {
	queue := p.Queue
	var groups []wire.FailureGroup
	var malformed int
	var err error
	if err := keys.CheckQueue(queue); err != nil {
		return nil, err
	}
	h, err := a.c.HGetAll(ctx, keys.FailureGroups(a.prefix, queue)).Result()
	if err != nil {
		return nil, wrap("failures", nil, "HGETALL", err)
	}
	for _, s := range h {
		g, err := wire.DecodeGroup(s)
		if err != nil {
			malformed++
			continue
		}
		groups = append(groups, g)
	}
	slices.SortFunc(groups, func(a, b wire.FailureGroup) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), strings.Compare(a.Key(), b.Key()))
	})
	return &broker.FailuresResult{Groups: groups, Malformed: malformed}, nil
}

// Throughput returns the queue's throughput counters (see keys.Throughput)
// of the last span before now, oldest first: elements ended per
// keys.ThroughputBucket, 0 where none. One MGET.
func (a *Admin) Throughput(ctx context.Context, p *broker.ThroughputParams) ([]int64, error) {
	queue, now, span := p.Queue, p.Now, p.Span
	if err := keys.CheckQueue(queue); err != nil {
		return nil, err
	}
	step := int64(keys.ThroughputBucket / time.Second)
	last := now.Unix() / step
	n := int64(span / keys.ThroughputBucket)
	ks := make([]string, 0, n)
	for b := last - n + 1; b <= last; b++ {
		ks = append(ks, keys.Throughput(a.prefix, queue, b))
	}
	vs, err := a.c.MGet(ctx, ks...).Result()
	if err != nil {
		return nil, fmt.Errorf("throughput: %w", err)
	}
	out := make([]int64, len(vs))
	for i, v := range vs {
		if s, ok := v.(string); ok {
			out[i], _ = strconv.ParseInt(s, 10, 64)
		}
	}
	return out, nil
}

// CancelBatch asks manager mid of queue to cancel its batch bid: the
// manager does at its next Poll, if the batch still runs.
func (a *Admin) CancelBatch(ctx context.Context, p *broker.CancelBatchParams) error {
	queue, mid, bid := p.Queue, p.Manager, p.Batch
	if err := keys.CheckQueue(queue); err != nil {
		return err
	}
	// A manager that no longer publishes would never read the ask: say so
	// rather than ask. Its batches are recorded lost, and their tasks
	// withdrawn, by the next look at the queue (lost.lua).
	due, err := a.c.ZScore(ctx, keys.Managers(a.prefix, queue), mid).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("cancel: %w", err)
	}
	now, nerr := a.Now(ctx)
	if nerr != nil {
		return nerr
	}
	if errors.Is(err, redis.Nil) || int64(due) < now {
		return fmt.Errorf("cancel: manager %s of queue %q no longer publishes its progress (stopped, killed or cut off): none would read the cancel; its batches are recorded \"manager lost\" and their tasks withdrawn when it is found lost", mid, queue)
	}
	key := keys.Cancels(a.prefix, queue, mid)
	_, err = a.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.SAdd(ctx, key, bid)
		p.PExpire(ctx, key, time.Minute)
		return nil
	})
	if err != nil {
		return fmt.Errorf("cancel: %w", err)
	}
	return nil
}

// CancelDurable cancels durable batch name of queue for an operator (see
// cancel.lua): it marks the batch cancelled and withdraws its outstanding
// tasks from every shard, whoever holds it; a manager holding it is asked
// to end its call too (within its Poll). It returns "asked" (a manager
// holds it), "cancelled", "already" (cancelled before, none holds it),
// "ended" (none holds it and every task has ended:
// its results wait for the call that takes it over, and nothing is done
// unless discard), or "unknown" if Redis has nothing of the batch. A
// pipeline and one script call, then two commands per ScriptBudget tasks
// withdrawn on each shard.
func (a *Admin) CancelDurable(ctx context.Context, p *broker.CancelDurableParams) (string, error) {
	queue, name, reason, discard := p.Queue, p.Name, p.Reason, p.Discard
	if err := keys.CheckDurable(name); err != nil {
		return "", err
	}
	return a.CancelOwner(ctx, &broker.CancelOwnerParams{Queue: queue, Owner: id.Durable(name), Reason: reason, Discard: discard})
}

// CancelOwner is CancelDurable of the durable batch whose owner id is o.
func (a *Admin) CancelOwner(ctx context.Context, p *broker.CancelOwnerParams) (string, error) {
	queue, o, reason, discard := p.Queue, p.Owner, p.Reason, p.Discard
	if err := keys.CheckQueue(queue); err != nil {
		return "", err
	}
	shards, err := a.Shards(ctx, &broker.QueueParams{Queue: queue})
	if err != nil {
		return "", err
	}
	ended := "0"
	if !discard {
		submitted, outstanding, err := a.taskCounts(ctx, shards, o)
		if err != nil {
			return "", err
		}
		if submitted > 0 && outstanding == 0 {
			ended = "1"
		}
	}
	// Its progress is read before the cancel: a live holder that reads it
	// ends the batch and deletes its progress, which the record names.
	progress := a.progressOf(ctx, queue, o)
	ks := []string{keys.Claim(a.prefix, queue, o), keys.Cancels(a.prefix, queue, o), keys.Tasks(a.prefix, queue, o),
		keys.Attempts(a.prefix, queue, o), keys.Cancelled(a.prefix, queue, o), keys.Durables(a.prefix, queue)}
	s, err := cancelScript.run(ctx, a.c, ks, o, reason, ended, time.Minute.Milliseconds()).Text()
	if err != nil {
		return "", wrap("cancel a durable batch", cancelScript, "", err)
	}
	if s != "cancelled" && s != "asked" && s != "already" {
		return s, nil
	}
	// Its tasks are withdrawn from every shard, so that workers skip them
	// (the set's count and epoch stay), even if its holder was killed
	// before it read the ask: ScriptBudget at a time, each a bounded
	// command however many tasks the batch has.
	for _, sh := range shards {
		if err := a.withdrawTasks(ctx, keys.Tasks(a.prefix, sh, o)); err != nil {
			return s, err
		}
	}
	// No result of it is accepted any more: what ran is final, and is
	// recorded, so that a holder killed before it read the ask, or none,
	// leaves a true record (the call that takes it over writes none). A
	// holder alive writes its own, over this one; a record there already
	// (its holder's, or this cancel's made before) stays.
	return s, a.recordCancelled(ctx, shards, queue, o, reason, s != "cancelled", progress)
}

// ForgetOwner deletes the keys of durable batch owner p.Owner of queue
// (its tasks, results, published progress, an operator's cancel of it, its
// entry in the queue's list of durable batches), in every shard, as its
// holder does when the batch ends, and reports whether it did: a batch a
// manager holds (its claim lives) is left alone. Its fence stays, so that
// a holder before it writes nothing more. An EXISTS, then a Drop a shard.
// p.Reason and p.Discard are not read.
func (a *Admin) ForgetOwner(ctx context.Context, p *broker.CancelOwnerParams) (bool, error) {
	queue, o := p.Queue, p.Owner
	shards, err := a.Shards(ctx, &broker.QueueParams{Queue: queue})
	if err != nil {
		return false, err
	}
	held, err := a.c.Exists(ctx, keys.Claim(a.prefix, queue, o)).Result()
	if err != nil {
		return false, wrap("forget a durable batch", nil, "EXISTS", err)
	}
	if held == 1 {
		return false, nil
	}
	for _, sh := range shards {
		if err := a.Queue(sh).Drop(ctx, &broker.ManagerParams{Manager: o}); err != nil {
			return false, err
		}
	}
	return true, nil
}

// DurableNames returns the names of queue's durable batches, by their
// owners' ids, as their entries in the queue's list say (an entry that does
// not decode is left out). An HKEYS and an HMGET.
func (a *Admin) DurableNames(ctx context.Context, p *broker.QueueParams) (map[string]string, error) {
	queue := p.Queue
	if err := keys.CheckQueue(queue); err != nil {
		return nil, err
	}
	k := keys.Durables(a.prefix, queue)
	owners, err := a.c.HKeys(ctx, k).Result()
	if err != nil {
		return nil, wrap("durable batches", nil, "HKEYS", err)
	}
	out := make(map[string]string, len(owners))
	if len(owners) == 0 {
		return out, nil
	}
	vs, err := a.c.HMGet(ctx, k, owners...).Result()
	if err != nil {
		return nil, wrap("durable batches", nil, "HMGET", err)
	}
	for i, v := range vs {
		if s, ok := v.(string); ok {
			if e, err := wire.DecodeDurable(s); err == nil && e.Name != "" {
				out[owners[i]] = e.Name
			}
		}
	}
	return out, nil
}

// taskCounts returns how many tasks durable batch owner o submitted and
// how many are outstanding, over the queue's shards: one pipeline of an
// HGET and an HLEN a shard.
func (a *Admin) taskCounts(ctx context.Context, shards []string, o string) (submitted, outstanding int64, err error) {
	counts := make([]*redis.StringCmd, len(shards))
	sizes := make([]*redis.IntCmd, len(shards))
	_, err = a.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, sh := range shards {
			k := keys.Tasks(a.prefix, sh, o)
			counts[i], sizes[i] = p.HGet(ctx, k, "_"), p.HLen(ctx, k)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, 0, wrap("cancel a durable batch", nil, "HGET or HLEN", err)
	}
	for i := range shards {
		n, _ := strconv.ParseInt(counts[i].Val(), 10, 64)
		submitted += n
		outstanding += max(sizes[i].Val()-2, 0) // "_" and "_e" are no tasks
	}
	return submitted, outstanding, nil
}

// withdrawTasks deletes the tasks of task set k, keeping its count and
// epoch: an HRANDFIELD and an HDEL per ScriptBudget tasks. A field deleted
// meanwhile (its task finished) is deleted twice, which does nothing.
func (a *Admin) withdrawTasks(ctx context.Context, k string) error {
	for {
		fields, err := a.c.HRandField(ctx, k, broker.ScriptBudget).Result()
		if err != nil {
			return wrap("cancel a durable batch", nil, "HRANDFIELD", err)
		}
		// With more than ScriptBudget fields, HRANDFIELD returns as many
		// distinct ones, not only the two kept.
		fields = slices.DeleteFunc(fields, func(f string) bool { return f == "_" || f == "_e" })
		if len(fields) == 0 {
			return nil
		}
		if err := a.c.HDel(ctx, k, fields...).Err(); err != nil {
			return wrap("cancel a durable batch", nil, "HDEL", err)
		}
	}
}

// DurableStates returns, for each durable batch owner of queue among
// owners, whether a manager holds it, how many of its tasks are
// outstanding, in every shard's task set, and whether an operator
// cancelled it (its mark, keys.Cancelled). One pipeline.
func (a *Admin) DurableStates(ctx context.Context, p *broker.DurableStatesParams) (*broker.DurableStatesResult, error) {
	queue, owners := p.Queue, p.Owners
	var held map[string]bool
	var outstanding map[string]int64
	var cancelled map[string]bool
	var err error
	held, outstanding, cancelled = make(map[string]bool), make(map[string]int64), make(map[string]bool)
	late := make(map[string]time.Duration)
	if len(owners) == 0 {
		return &broker.DurableStatesResult{Held: held, Outstanding: outstanding, Cancelled: cancelled, Late: late}, nil
	}
	shards, err := a.Shards(ctx, &broker.QueueParams{Queue: queue})
	if err != nil {
		return nil, err
	}
	marks := make([]*redis.IntCmd, len(owners))
	claims := make([]*redis.StringCmd, len(owners))
	lives := make([]*redis.DurationCmd, len(owners))
	sizes := make([][]*redis.IntCmd, len(owners))
	_, err = a.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, o := range owners {
			claims[i] = p.Get(ctx, keys.Claim(a.prefix, queue, o))
			lives[i] = p.PTTL(ctx, keys.Claim(a.prefix, queue, o))
			marks[i] = p.Exists(ctx, keys.Cancelled(a.prefix, queue, o))
			for _, sh := range shards {
				sizes[i] = append(sizes[i], p.HLen(ctx, keys.Tasks(a.prefix, sh, o)))
			}
		}
		return nil
	})
	if err != nil {
		// A claim's GET fails if it is none (redis.Nil) or not a string
		// (another's data: held, as EXISTS says, its holder unknown); any
		// other command's error is the read's.
		err = nil
		for i := range owners {
			for _, c := range append([]redis.Cmder{lives[i], marks[i]}, cmders(sizes[i])...) {
				err = cmp.Or(err, c.Err())
			}
		}
		if err != nil {
			return nil, wrap("durable batches", nil, "PTTL, EXISTS or HLEN", err)
		}
	}
	for i, o := range owners {
		held[o] = !errors.Is(claims[i].Err(), redis.Nil)
		// A holder renews its claim every Every, to its Lease: what is left
		// of the lease says when it last did. Past three renewals missed (a
		// second at least, for a slow Redis or a paused process), it is
		// gone, or cut off.
		if h, err := wire.DecodeHolder(claims[i].Val()); held[o] && err == nil && h.Every > 0 && h.Lease > 0 && lives[i].Val() > 0 {
			ago := time.Duration(h.Lease)*time.Millisecond - lives[i].Val()
			if ago > max(3*time.Duration(h.Every)*time.Millisecond, time.Second) {
				late[o] = ago
			}
		}
		cancelled[o] = marks[i].Val() == 1
		for _, n := range sizes[i] {
			outstanding[o] += max(n.Val()-2, 0) // "_" and "_e" are no tasks
		}
	}
	return &broker.DurableStatesResult{Held: held, Outstanding: outstanding, Cancelled: cancelled, Late: late}, nil
}

// cmders returns cs as redis.Cmders.
func cmders(cs []*redis.IntCmd) []redis.Cmder {
	out := make([]redis.Cmder, len(cs))
	for i, c := range cs {
		out[i] = c
	}
	return out
}

// Drain asks worker wid of queue to take no more tasks and exit when idle.
func (a *Admin) Drain(ctx context.Context, p *broker.DrainParams) error {
	queue, wid := p.Queue, p.Worker
	if err := keys.CheckQueue(queue); err != nil {
		return err
	}
	if err := keys.CheckWorker(wid); err != nil {
		return err
	}
	if err := a.c.Set(ctx, keys.Drain(a.prefix, queue, wid), "1", 0).Err(); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	return nil
}

// Queued returns how many tasks wait in queue's public and private lists,
// in all its shards.
func (a *Admin) Queued(ctx context.Context, p *broker.QueueParams) (int64, error) {
	shards, err := a.Shards(ctx, p)
	if err != nil {
		return 0, err
	}
	n, err := a.depth(ctx, shards)
	if err != nil {
		return 0, err
	}
	for _, sh := range shards {
		lists, err := a.privates(ctx, sh)
		if err != nil {
			return 0, err
		}
		for _, l := range lists {
			k, err := a.c.LLen(ctx, l).Result()
			if err != nil {
				return 0, fmt.Errorf("queued: %w", err)
			}
			n += k
		}
	}
	return n, nil
}

// Purge drops every queued task id of queue, public and private, in all its
// shards, and tells their managers; see purge.lua. It returns how many
// tasks it failed in their batches, and how many ids it dropped in all (the
// others were of tasks no manager wanted any more).
func (a *Admin) Purge(ctx context.Context, p *broker.QueueParams) (*broker.PurgeResult, error) {
	queue := p.Queue
	var purged, dropped int
	if err := keys.CheckQueue(queue); err != nil {
		return nil, err
	}
	shards, err := a.Shards(ctx, &broker.QueueParams{Queue: queue})
	if err != nil {
		return nil, err
	}
	for _, sh := range shards {
		p, d, err := a.purge(ctx, sh)
		purged, dropped = purged+p, dropped+d
		if err != nil {
			return &broker.PurgeResult{Purged: purged, Dropped: dropped}, err
		}
	}
	return &broker.PurgeResult{Purged: purged, Dropped: dropped}, nil
}

// purge purges one shard: a script call per ScriptBudget ids, until its
// lists are empty (tasks submitted meanwhile are purged too).
func (a *Admin) purge(ctx context.Context, queue string) (purged, dropped int, err error) {
	rings := keys.Rings(a.prefix, queue)
	def := keys.Ring(a.prefix, queue, keys.DefaultPriority)
	args := []any{keys.Base(a.prefix, queue), len(rings) - 1}
	for _, r := range rings {
		if r != def {
			args = append(args, r)
		}
	}
	privates, err := a.privates(ctx, queue)
	if err != nil {
		return 0, 0, err
	}
	for _, l := range privates {
		args = append(args, l)
	}
	for {
		n, err := purgeScript.run(ctx, a.c, []string{def}, args...).Int64Slice()
		if err != nil {
			return purged, dropped, wrap("purge", purgeScript, "", err)
		}
		if len(n) != 3 {
			return purged, dropped, fmt.Errorf("purge: script returned %v, not 3 integers", n)
		}
		purged, dropped = purged+int(n[0]), dropped+int(n[1])
		if n[2] == 1 {
			return purged, dropped, nil
		}
	}
}

// privates returns the private lists of queue's workers: of those
// registered (keys.Workers) or gone lately (keys.Gone). A private batch is
// submitted only to a live worker, and reap.lua empties a reaped worker's
// list, so no other worker has one. One round trip.
func (a *Admin) privates(ctx context.Context, queue string) ([]string, error) {
	wids, err := a.union(ctx, func(p redis.Pipeliner) (live, gone *redis.StringSliceCmd) {
		return p.ZRange(ctx, keys.Workers(a.prefix, queue), 0, -1), p.ZRange(ctx, keys.Gone(a.prefix, queue), 0, -1)
	})
	if err != nil {
		return nil, wrap("private lists", nil, "ZRANGE", err)
	}
	lists := make([]string, len(wids))
	for i, wid := range wids {
		lists[i] = keys.Private(a.prefix, queue, wid)
	}
	return lists, nil
}

// union sends the two commands of read in one pipeline and returns the
// union of their replies, sorted, each string once.
func (a *Admin) union(ctx context.Context, read func(p redis.Pipeliner) (x, y *redis.StringSliceCmd)) ([]string, error) {
	var x, y *redis.StringSliceCmd
	_, err := a.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		x, y = read(p)
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := append(x.Val(), y.Val()...)
	slices.Sort(out)
	return slices.Compact(out), nil
}

// scan calls f with each key matching pattern, found by SCAN (which does not
// block Redis); on a Cluster, on every master, since a SCAN covers only the
// node it runs on. A key seen twice (SCAN may return one twice) is passed
// once.
func (a *Admin) scan(ctx context.Context, pattern string, f func(key string) error) error {
	seen := map[string]bool{}
	var mu sync.Mutex
	one := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			mu.Lock()
			k, again := iter.Val(), seen[iter.Val()]
			seen[k] = true
			mu.Unlock()
			if !again {
				if err := f(k); err != nil {
					return err
				}
			}
		}
		return iter.Err()
	}
	if cc, ok := a.c.(*redis.ClusterClient); ok {
		var fmu sync.Mutex // f is not safe for concurrent use
		return cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			fmu.Lock()
			defer fmu.Unlock()
			return one(ctx, node)
		})
	}
	return one(ctx, a.c)
}

// LoseManagers records the batches of queue's managers whose publish of
// progress is overdue as "manager lost" (see Broker.LoseManagers): all of
// them, a script call per ScriptBudget.
func (a *Admin) LoseManagers(ctx context.Context, p *broker.QueueParams) (int, error) {
	queue := p.Queue
	if err := keys.CheckQueue(queue); err != nil {
		return 0, err
	}
	return loseManagers(ctx, a.c, a.prefix, queue, 0)
}

// History returns queue's ended batches, newest first, at most n (all if n
// is 0 or less), and how many records did not decode.
func (a *Admin) History(ctx context.Context, p *broker.HistoryParams) (*broker.HistoryResult, error) {
	queue, n := p.Queue, p.N
	if err := keys.CheckQueue(queue); err != nil {
		return nil, err
	}
	ids, err := a.c.ZRangeArgs(ctx, redis.ZRangeArgs{Key: keys.HistoryIndex(a.prefix, queue), Start: 0, Stop: int64(n) - 1, Rev: true}).Result()
	if err != nil {
		return nil, wrap("history", nil, "ZRANGE", err)
	}
	if len(ids) == 0 {
		return &broker.HistoryResult{}, nil
	}
	vals, err := a.c.HMGet(ctx, keys.History(a.prefix, queue), ids...).Result()
	if err != nil {
		return nil, wrap("history", nil, "HMGET", err)
	}
	out := make([]wire.BatchRecord, 0, len(vals))
	malformed := 0
	for _, v := range vals {
		s, ok := v.(string)
		if !ok {
			continue // trimmed between the two reads
		}
		r, err := wire.DecodeRecord(s)
		if err != nil {
			malformed++
			continue
		}
		out = append(out, r)
	}
	return &broker.HistoryResult{Records: out, Malformed: malformed}, nil
}

// Stages returns the stage counts of each of pipelines of queue that has
// any (keys.Stages), by pipeline, its stages in no order; a field that
// does not parse counts 0. One pipeline of an HGETALL each.
func (a *Admin) Stages(ctx context.Context, p *broker.StagesParams) (map[string][]wire.StageCounts, error) {
	if err := keys.CheckQueue(p.Queue); err != nil {
		return nil, err
	}
	out := make(map[string][]wire.StageCounts)
	if len(p.Pipelines) == 0 {
		return out, nil
	}
	cmds := make([]*redis.MapStringStringCmd, len(p.Pipelines))
	_, err := a.c.Pipelined(ctx, func(pl redis.Pipeliner) error {
		for i, name := range p.Pipelines {
			cmds[i] = pl.HGetAll(ctx, keys.Stages(a.prefix, p.Queue, name))
		}
		return nil
	})
	if err != nil && err != redis.Nil {
		return nil, wrap("stages", nil, "HGETALL", err)
	}
	for i, name := range p.Pipelines {
		byStage := make(map[string]*wire.StageCounts)
		for f, v := range cmds[i].Val() {
			stage, field, ok := strings.Cut(f, "\t")
			if !ok {
				continue
			}
			s := byStage[stage]
			if s == nil {
				s = &wire.StageCounts{Stage: stage}
				byStage[stage] = s
			}
			setStageField(s, field, v)
		}
		for _, s := range byStage {
			out[name] = append(out[name], *s)
		}
	}
	return out, nil
}

// setStageField sets field of s (a field of keys.Stages after its stage's
// tab) to v; a count that does not parse is 0, an unknown field ignored.
func setStageField(s *wire.StageCounts, field, v string) {
	n, _ := strconv.ParseInt(v, 10, 64)
	switch field {
	case "func":
		s.Func = v
	case "outcome":
		s.Outcome = v
	case "batches":
		s.Batches = int(n)
	case "reruns":
		s.Reruns = int(n)
	case "total":
		s.Total = int(n)
	case "done":
		s.Done = int(n)
	case "failed":
		s.Failed = int(n)
	case "failed_keys":
		s.FailedKeys = int(n)
	case "started":
		s.Started = n
	case "ended":
		s.Ended = n
	}
}

// InHistory says which of the batches ids queue's history holds. One
// HMGET, none for no ids.
func (a *Admin) InHistory(ctx context.Context, p *broker.InHistoryParams) (map[string]bool, error) {
	queue, ids := p.Queue, p.IDs
	if err := keys.CheckQueue(queue); err != nil {
		return nil, err
	}
	in := make(map[string]bool)
	if len(ids) == 0 {
		return in, nil
	}
	vals, err := a.c.HMGet(ctx, keys.History(a.prefix, queue), ids...).Result()
	if err != nil {
		return nil, wrap("history", nil, "HMGET", err)
	}
	for j, v := range vals {
		if v != nil {
			in[ids[j]] = true
		}
	}
	return in, nil
}

// Backlog reads what waits in queue's public lanes: one script call per
// shard, a few commands per lane (backlog.lua), whatever the lanes hold.
func (a *Admin) Backlog(ctx context.Context, p *broker.QueueParams) (*wire.Backlog, error) {
	queue := p.Queue
	if err := keys.CheckQueue(queue); err != nil {
		return nil, err
	}
	shards, err := a.Shards(ctx, &broker.QueueParams{Queue: queue})
	if err != nil {
		return nil, err
	}
	var b wire.Backlog
	for _, sh := range shards {
		rings := keys.Rings(a.prefix, sh)
		got, err := backlogScript.run(ctx, a.c, rings, keys.Base(a.prefix, sh)).Int64Slice()
		if err != nil {
			return nil, wrap("backlog", backlogScript, "", err)
		}
		if len(got) != 4 {
			return nil, fmt.Errorf("backlog: script returned %d integers, not 4", len(got))
		}
		b.Tasks += got[0]
		b.Elements += got[1]
		if got[2] > 0 && (b.Oldest.IsZero() || got[2] < b.Oldest.UnixMilli()) {
			b.Oldest = time.UnixMilli(got[2])
		}
		b.Now = time.UnixMilli(got[3])
	}
	return &b, nil
}

// Ended returns the totals the queue's history counted as batches ended
// (see write_histories in prelude.lua): batches by outcome, and failed
// elements by kind. They only grow: a trim of the history keeps them. One
// round trip.
func (a *Admin) Ended(ctx context.Context, p *broker.QueueParams) (*broker.EndedResult, error) {
	queue := p.Queue
	var outcomes, kinds map[string]int64
	var err error
	if err := keys.CheckQueue(queue); err != nil {
		return nil, err
	}
	all, err := a.c.HGetAll(ctx, keys.Ended(a.prefix, queue)).Result()
	if err != nil {
		return nil, wrap("ended totals", nil, "HGETALL", err)
	}
	outcomes, kinds = map[string]int64{}, map[string]int64{}
	backups := map[string]int64{}
	for k, v := range all {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			continue // not a count: nothing to add up
		}
		if o, ok := strings.CutPrefix(k, "outcome:"); ok {
			outcomes[o] = n
		} else if kind, ok := strings.CutPrefix(k, "kind:"); ok {
			kinds[kind] = n
		} else if b, ok := strings.CutPrefix(k, "backups:"); ok {
			backups[b] = n
		}
	}
	return &broker.EndedResult{Outcomes: outcomes, Kinds: kinds, Backups: backups}, nil
}

// Pause stops the taking of queue's tasks, on every shard, for an
// operator (by says who, for the record): workers finish what they hold
// and take nothing more until Resume. It reports whether the queue was
// running until now. A script call a shard.
func (a *Admin) Pause(ctx context.Context, p *broker.PauseParams) (bool, error) {
	queue, by := p.Queue, p.By
	shards, err := a.Shards(ctx, &broker.QueueParams{Queue: queue})
	if err != nil {
		return false, err
	}
	now, err := a.Now(ctx)
	if err != nil {
		return false, err
	}
	mark, err := json.Marshal(wire.Pause{Since: now, By: by})
	if err != nil {
		return false, err
	}
	paused := false
	for _, sh := range shards {
		v, err := pauseScript.run(ctx, a.c, []string{keys.Paused(a.prefix, sh), keys.Idle(a.prefix, sh)}, "pause", string(mark), keys.Base(a.prefix, sh), 0).Int64Slice()
		if err != nil {
			return paused, wrap("pause", pauseScript, "", err)
		}
		paused = paused || len(v) > 0 && v[0] == 1
	}
	return paused, nil
}

// Resume lets the workers of queue take its tasks again, on every shard,
// and rings its idle workers. It reports whether the queue was paused, and
// how many idle workers it rang. A script call a shard.
func (a *Admin) Resume(ctx context.Context, p *broker.QueueParams) (*broker.UnpauseResult, error) {
	queue := p.Queue
	shards, err := a.Shards(ctx, &broker.QueueParams{Queue: queue})
	if err != nil {
		return nil, err
	}
	resumed, rung := false, int64(0)
	for _, sh := range shards {
		v, err := pauseScript.run(ctx, a.c, []string{keys.Paused(a.prefix, sh), keys.Idle(a.prefix, sh)}, "resume", "", keys.Base(a.prefix, sh), 0).Int64Slice()
		if err != nil {
			return nil, wrap("resume", pauseScript, "", err)
		}
		if len(v) == 2 {
			resumed, rung = resumed || v[0] == 1, rung+v[1]
		}
	}
	return &broker.UnpauseResult{Paused: resumed, Rang: rung}, nil
}

// Paused returns queue's pause mark (on its first shard), or nil if it is
// not paused. A mark that does not decode says the queue is paused, since
// an unknown time. One GET.
func (a *Admin) Paused(ctx context.Context, p *broker.QueueParams) (*wire.Pause, error) {
	queue := p.Queue
	if err := keys.CheckQueue(queue); err != nil {
		return nil, err
	}
	s, err := a.c.Get(ctx, keys.Paused(a.prefix, queue)).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, wrap("paused", nil, "GET", err)
	}
	pause, err := wire.DecodePause(s)
	if err != nil {
		return &wire.Pause{}, nil
	}
	return &pause, nil
}
