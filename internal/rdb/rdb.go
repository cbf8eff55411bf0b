// Package rdb is the only code in redmap that sends Redis commands. Its
// methods say what happens in protocol terms (Submit, Take, Finish, Collect);
// the Lua scripts they run are in lua/, one file per script, each beginning
// with its contract, loaded once and run by SHA.
package rdb

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/wire"
)

// maxGroup caps the tasks or results sent in one script call, and maxGroupBytes
// their bytes: a script call blocks Redis while it runs, so one call of a huge
// batch would stall every other client.
const (
	maxGroup      = 1000
	maxGroupBytes = 8 << 20
	// ScriptBudget is the most units of work one call of a script that
	// works in slices does (prelude.lua's BUDGET): a batch published or
	// recorded, a lane or a task withdrawn, a task purged or reaped, each a
	// few commands. Its caller calls again until the work is done, so no
	// call holds Redis for long (a few ms) whatever the sizes: publishing
	// 100,000 batches, recording them lost, purging 100,000 tasks, reaping
	// a dead worker's 100,000 private tasks.
	ScriptBudget = 500
	// Inline is the largest payload a take returns, or result a finish
	// takes, through its script (prelude.lua's INLINE): larger ones go out
	// and in with plain commands beside the script (a submit's payloads
	// always do). Redis copies a string into Lua and out again at about 1 ns
	// a byte: an EVAL that HSETs one argument costs 1.7 µs of Redis for 256
	// bytes, 3.1 µs for 2 KiB, 17 µs for 16 KiB, a plain HSET of it under
	// 0.3 µs plus its own call of a µs or two. Under 2 KiB the copy costs
	// about what the extra call (or, for a take, round trip) would.
	Inline = 2 << 10
)

// RDB speaks the protocol of one queue, or of one shard of a sharded queue
// (see keys.Shard): each shard is a queue of its own in Redis, with its own
// task sets, result lists, workers and leases.
type RDB struct {
	c      redis.UniversalClient
	prefix string
	queue  string // the shard's name
	shard  int
	base   string
	rings  []string    // the rings of lanes, highest priority first
	keep   bool        // a durable batch's: results trimmed are kept (KeepingResults)
	index  *indexClock // when the queue's name is due in the index of queues
	fence  *Fence      // a durable batch's owner's: the claim its writes carry (Fenced)
	wait   *waiter     // c's: bounds its blocking reads (WaitResults)
}

// New returns the protocol of queue under prefix on c.
func New(c redis.UniversalClient, prefix, queue string) *RDB { return NewShard(c, prefix, queue, 0) }

// NewShard returns the protocol of the shard named name (see keys.Shard)
// under prefix on c, which its user numbers i: tasks it takes say so
// (Taken.Shard).
func NewShard(c redis.UniversalClient, prefix, name string, i int) *RDB {
	followFailovers(c)
	return &RDB{c: c, prefix: prefix, queue: name, shard: i, base: keys.Base(prefix, name), rings: keys.Rings(prefix, name),
		index: &indexClock{}, wait: waiterOf(c)}
}

// Name returns the name of r's shard (the queue's, for shard 0).
func (r *RDB) Name() string { return r.queue }

// Shard returns the number of r's shard: 0 for an unsharded queue.
func (r *RDB) Shard() int { return r.shard }

// Submit stores tasks of manager mid and queues them on their batch's lane
// (lane, whose ring it joins), or on worker wid's private list if wid is not
// empty, then wakes idle workers.
// It costs one script call per group of up to 1,000 tasks or CallBytes, in a
// MULTI behind a plain HSET of the group's payloads (one call if there are
// none: it then only checks, and installs a new epoch). The manager's task
// set gets the given TTL.
//
// The task set counts the tasks ever submitted to it and names its history
// with an epoch. Submit returns the count after its last group, and whether
// each group found the set as expected (the first as exp says, the others as
// the group before left it): if not, Redis lost writes of this manager (see
// Submitted). A group that fails after others were queued returns a
// *PartlySubmitted saying what was: the caller sends only the rest again.
func (r *RDB) Submit(ctx context.Context, p *broker.SubmitParams) (_ *broker.SubmitResult, err error) {
	mid, wid, lane, tasks, ttl, exp := p.Manager, p.Worker, p.Lane, p.Tasks, p.TTL, p.Expect
	var count int64
	var intact bool
	ring := keys.Ring(r.prefix, r.queue, keys.DefaultPriority)
	if len(tasks) > 0 {
		ring = keys.Ring(r.prefix, r.queue, id.Priority(tasks[0].ID, keys.DefaultPriority))
	}
	list := keys.Lane(r.prefix, r.queue, lane.Name)
	if wid != "" {
		list = keys.Private(r.prefix, r.queue, wid)
	}
	ks := []string{keys.Tasks(r.prefix, r.queue, mid), list, keys.Idle(r.prefix, r.queue), ring, keys.Lanes(r.prefix, r.queue, mid), keys.Widest(r.prefix, r.queue, mid)}
	fence, held := r.fenceOf(mid)
	if fence != "" {
		ks = append(ks, fence, keys.Aside(r.prefix, r.queue, mid))
	}
	intact = true
	queued := 0 // tasks of the groups done
	for first := true; first || len(tasks) > 0; first = false {
		n, size := 0, 0
		for n < len(tasks) && n < maxGroup && (n == 0 || size+len(tasks[n].Payload) <= CallBytes) {
			size += len(tasks[n].Payload)
			n++
		}
		// The payloads go in with a plain HSET in the script's MULTI: Redis
		// never copies them into Lua (see submit.lua).
		args := make([]any, 11, 11+n)
		copy(args, []any{r.base, ttl.Milliseconds(), wid, exp.Count, exp.Epoch, exp.NewEpoch, lane.Name, lane.Calls})
		args[10] = held
		stored := make([]any, 0, 2*n) // id, payload, ...
		widest, elements := 0, 0
		for _, t := range tasks[:n] {
			stored = append(stored, t.ID, t.Payload)
			args = append(args, t.ID)
			widest = max(widest, len(t.Payload))
			elements += id.Size(t.ID)
		}
		args[8], args[9] = widest, elements
		var reply []int64
		var err error
		if n == 0 {
			reply, err = submitScript.run(ctx, r.c, ks, args...).Int64Slice()
		} else {
			reply, err = r.submitStored(ctx, ks, stored, args)
		}
		if err != nil {
			err = onKey(wrap("submit", submitScript, "", err), ks[0])
			if queued > 0 {
				err = &PartlySubmitted{Queued: queued, Count: count, Intact: intact, Err: err}
			}
			return &broker.SubmitResult{Count: count, Intact: false}, err
		}
		if len(reply) != 2 {
			return &broker.SubmitResult{Count: count, Intact: false}, fmt.Errorf("submit: script returned %v, not 2 integers", reply)
		}
		count = reply[0]
		intact = intact && reply[1] == 1
		exp.Count = count
		if exp.NewEpoch != "" {
			exp.Epoch, exp.NewEpoch = exp.NewEpoch, ""
		}
		tasks = tasks[n:]
		queued += n
	}
	return &broker.SubmitResult{Count: count, Intact: intact}, nil
}

// submitStored runs submit.lua (KEYS ks, ARGV args) in a MULTI after a
// plain HSET of stored (id, payload, ...) into the task set ks[0], so that
// Redis never copies those payloads into Lua, and the tasks are queued in
// the step that stores them: no take finds an id before its payload, and a
// failure leaves neither (but NOSCRIPT, raised as EXEC runs: the HSET then
// went through alone, and is made again, with the whole script: inTx). A
// durable batch's owner's MULTI (ks holds its fence and aside keys) begins
// with fence.lua, so that a submit its fence refuses stores nothing.
func (r *RDB) submitStored(ctx context.Context, ks []string, stored, args []any) ([]int64, error) {
	for whole := false; ; whole = true {
		var run *redis.Cmd
		cmds, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			if len(ks) == 8 { // a fenced owner's: Submit appended the fence and aside keys
				fenceArgs := make([]any, 0, 1+len(stored)/2)
				fenceArgs = append(fenceArgs, args[10])
				for i := 0; i < len(stored); i += 2 {
					fenceArgs = append(fenceArgs, stored[i])
				}
				fenceScript.inTx(ctx, p, []string{ks[6], ks[0], ks[7]}, true, fenceArgs...)
			}
			p.HSet(ctx, ks[0], stored...)
			run = submitScript.inTx(ctx, p, ks, whole, args...)
			return nil
		})
		err = txErr(cmds, err)
		if err != nil && redis.HasErrorPrefix(run.Err(), "NOSCRIPT") && !whole {
			continue
		}
		if err != nil {
			return nil, err
		}
		return run.Int64Slice()
	}
}

// txErr returns the error of a MULTI that failed: the first command's
// that says why (OOM, NOPERM, ...), rather than the EXECABORT that only
// says the MULTI was discarded for it.
func txErr(cmds []redis.Cmder, err error) error {
	if err == nil {
		return nil
	}
	for _, c := range cmds {
		if cerr := c.Err(); cerr != nil && !redis.HasErrorPrefix(cerr, "EXECABORT") {
			return cerr
		}
	}
	return err
}

// Submitted returns how many tasks were ever submitted to manager mid's task
// set, as Redis has it now, and the set's epoch: 0 and "" if the set is
// gone. One HMGET.
func (r *RDB) Submitted(ctx context.Context, p *broker.ManagerParams) (*broker.SubmittedResult, error) {
	mid := p.Manager
	v, err := r.c.HMGet(ctx, keys.Tasks(r.prefix, r.queue, mid), "_", "_e").Result()
	if err != nil {
		return nil, onKey(wrap("check data", nil, "HMGET", err), keys.Tasks(r.prefix, r.queue, mid))
	}
	cs, _ := v[0].(string)
	epoch, _ := v[1].(string)
	if cs == "" {
		return &broker.SubmittedResult{Count: 0, Epoch: epoch}, nil
	}
	n, err := strconv.ParseInt(cs, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("check data: the task set's count is %q", cs)
	}
	return &broker.SubmittedResult{Count: n, Epoch: epoch}, nil
}

// Missing returns those of manager mid's tasks tids that its task set does not
// hold (delivered, their result waiting in the result list; withdrawn; or
// lost with Redis's data), and the set's count of submitted tasks and epoch
// (see Submitted), read in the same script call as the check, one call per
// 1,000 tasks. If they differ between calls (Redis lost data meanwhile, or
// clients moved to another server), it returns ErrChanged.
func (r *RDB) Missing(ctx context.Context, p *broker.MissingParams) (_ *broker.MissingResult, err error) {
	mid, tids := p.Manager, p.Tasks
	var missing []string
	var count int64
	var epoch string
	count = -1
	ks := []string{keys.Tasks(r.prefix, r.queue, mid)}
	for first := true; first || len(tids) > 0; first = false {
		n := min(len(tids), maxGroup)
		args := make([]any, n)
		for i, t := range tids[:n] {
			args[i] = t
		}
		got, err := missingScript.run(ctx, r.c, ks, args...).Slice()
		if err != nil {
			return nil, onKey(wrap("check data", missingScript, "", err), ks[0])
		}
		c, ok1 := got[0].(int64)
		e, ok2 := got[1].(string)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("check data: script returned %v, not a count and an epoch", got[:2])
		}
		if count >= 0 && (c != count || e != epoch) {
			return nil, ErrChanged
		}
		count, epoch = c, e
		for _, v := range got[2:] {
			tid, ok := v.(string)
			if !ok {
				return nil, fmt.Errorf("check data: script returned %T, not a task id", v)
			}
			missing = append(missing, tid)
		}
		tids = tids[n:]
	}
	return &broker.MissingResult{Missing: missing, Count: count, Epoch: epoch}, nil
}

// ErrChanged says that Redis's data changed under a check that needs it still.
var ErrChanged = errors.New("redis data changed during the check")

// Take takes up to p.Max tasks for worker p.Worker, private list first, with
// their payloads, in one script call; taking and recording the hold are one
// atomic step, and a worker Redis has lost from its workers set is
// registered again (for p.Lease) in it. Tasks no longer wanted are dropped,
// not returned. When it returns none, the worker is registered idle, and
// the next submit rings its bell (WaitBell).
func (r *RDB) Take(ctx context.Context, p *broker.TakeParams) (*broker.TakeResult, error) {
	ks := r.takeKeys(p.Worker)
	vals, err := takeScript.run(ctx, r.c, ks, r.takeArgs(p)...).Slice()
	if err != nil {
		return nil, wrap("take", takeScript, "", err)
	}
	return r.taken(ctx, p.Worker, vals)
}

// taken reads take.lua's reply (parseTaken) and reads the payloads over
// Inline the script left in their task sets: their lengths in one round
// trip, then the payloads with plain HGETs, pipelined in round trips of at
// most CallBytes (a larger payload alone), so that no reply of a take takes
// longer than CallBytes does on a slow link. A task whose payload is gone
// by then (its manager cancelled it, or has its result) is released unrun,
// as a worker releases a task it finds unwanted, and not returned.
func (r *RDB) taken(ctx context.Context, wid string, vals []any) (*broker.TakeResult, error) {
	taken, end, err := r.parseTaken(vals)
	if err != nil {
		return &broker.TakeResult{Taken: taken, End: end}, err
	}
	var fetch []int // indexes in taken
	for i, t := range taken {
		if t.Payload == nil {
			fetch = append(fetch, i)
		}
	}
	if fetch == nil {
		return &broker.TakeResult{Taken: taken, End: end}, nil
	}
	key := func(i int) string { return keys.Tasks(r.prefix, r.queue, id.Manager(taken[i].ID)) }
	// The tasks are held as those of a take whose reply was lost if a read
	// fails: the worker gives them back as orphans.
	lens := make([]*redis.IntCmd, len(fetch))
	if _, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for j, i := range fetch {
			lens[j] = p.HStrLen(ctx, key(i), taken[i].ID)
		}
		return nil
	}); err != nil {
		return nil, wrap("take", nil, "HSTRLEN", err)
	}
	var gone []wire.Done
	for j := 0; j < len(fetch); {
		n, size := 0, int64(0)
		for j+n < len(fetch) && (n == 0 || size+lens[j+n].Val() <= CallBytes) {
			size += lens[j+n].Val()
			n++
		}
		reads := make([]*redis.StringCmd, n)
		_, _ = r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for k, i := range fetch[j : j+n] {
				reads[k] = p.HGet(ctx, key(i), taken[i].ID)
			}
			return nil
		})
		for _, c := range reads {
			if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
				return nil, wrap("take", nil, "HGET", err)
			}
		}
		for k, i := range fetch[j : j+n] {
			if p := reads[k].Val(); p != "" {
				taken[i].Payload = []byte(p)
			} else {
				gone = append(gone, wire.Done{ID: taken[i].ID})
			}
		}
		j += n
	}
	if gone == nil {
		return &broker.TakeResult{Taken: taken, End: end}, nil
	}
	if _, err := r.Finish(ctx, &broker.FinishParams{Worker: wid, Done: gone}); err != nil {
		return nil, err // orphans too
	}
	kept := taken[:0]
	for _, t := range taken {
		if t.Payload != nil {
			kept = append(kept, t)
		}
	}
	return &broker.TakeResult{Taken: kept, End: end}, nil
}

// WaitTake waits for worker p.Worker's bell (up to p.Wait), as WaitBell, then takes, as Take, in
// one round trip: the take follows the wait in one pipeline, so Redis runs it
// as soon as a submit rings the bell, and its tasks come back with the
// wake-up. After the timeout the take runs all the same. A wait longer than
// the client's read timeout allows is made in two round trips instead.
func (r *RDB) WaitTake(ctx context.Context, p *broker.TakeParams) (*broker.TakeResult, error) {
	wid, timeout := p.Worker, p.Wait
	wait := max(timeout, time.Millisecond)
	if rt := readTimeout(r.c); rt > 0 && wait > rt/2 {
		if _, err := r.WaitBell(ctx, &broker.WaitBellParams{Worker: wid, Timeout: timeout}); err != nil {
			return nil, err
		}
		return r.Take(ctx, p)
	}
	ks := r.takeKeys(wid)
	var pop *redis.StringSliceCmd
	var take *redis.Cmd
	_, _ = r.c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		pop = blpop(ctx, pipe, ks[3], wait)
		take = takeScript.evalSha(ctx, pipe, ks, r.takeArgs(p)...)
		return nil
	})
	// A bell holding foreign data fails the BLPOP alone: take.lua, next in
	// the pipeline, set it aside (guarded), and the tasks it took are the
	// worker's.
	if err := pop.Err(); err != nil && !errors.Is(err, redis.Nil) && !redis.HasErrorPrefix(err, "WRONGTYPE") {
		return nil, wrap("wait", nil, "BLPOP", err)
	}
	vals, err := take.Slice()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		return r.Take(ctx, p) // loads the script
	}
	if err != nil {
		return nil, wrap("take", takeScript, "", err)
	}
	return r.taken(ctx, wid, vals)
}

// readTimeout returns the read timeout of c's connections, or 0 if there is
// none (or c does not say).
func readTimeout(c redis.UniversalClient) time.Duration {
	var rt time.Duration
	switch c := c.(type) {
	case *redis.Client:
		rt = c.Options().ReadTimeout
	case *redis.ClusterClient:
		rt = c.Options().ReadTimeout
	default:
		return 0
	}
	if rt == 0 {
		return 3 * time.Second // go-redis's default
	}
	return max(rt, 0)
}

// takeArgs returns the ARGV of take.lua.
func (r *RDB) takeArgs(p *broker.TakeParams) []any {
	args := make([]any, 0, 7+len(p.Serves))
	args = append(args,
		r.base,                 // ARGV[1] key base
		p.Max,                  // ARGV[2] n
		p.Worker,               // ARGV[3] worker id
		p.Lease.Milliseconds(), // ARGV[4] lease, ms
		p.Shards,               // ARGV[5] shard count known
		p.Holding,              // ARGV[6] tasks held on every shard
		p.Room,                 // ARGV[7] limited tasks startable now
	)
	for _, s := range p.Serves { // ARGV[8], ...
		args = append(args, s)
	}
	return args
}

// takeKeys returns the KEYS of take.lua for worker wid.
func (r *RDB) takeKeys(wid string) []string {
	return append([]string{
		keys.Private(r.prefix, r.queue, wid), keys.Held(r.prefix, r.queue, wid),
		keys.Idle(r.prefix, r.queue), keys.Bell(r.prefix, r.queue, wid), keys.Workers(r.prefix, r.queue),
		keys.ShardNames(r.prefix, r.queue),
	}, r.rings...)
}

// attemptOf reads a task's attempt as take.lua returns it: a string, or an
// integer from a script of another version.
func attemptOf(v any) (int, error) {
	switch v := v.(type) {
	case string:
		return strconv.Atoi(v)
	case int64:
		return int(v), nil
	}
	return 0, fmt.Errorf("attempt %v is %T", v, v)
}

// parseTaken reads take.lua's reply: the tasks, and whether the take left
// every list empty or left a suspect; it records the shard count if the
// reply gives it. The reply is each task's id and payload, with an array
// {attempt, mark} after a task that is not a first attempt from a lane,
// and last an array of flags.
func (r *RDB) parseTaken(vals []any) (taken []wire.Taken, end wire.TakeEnd, err error) {
	if len(vals) == 0 {
		return nil, end, errors.New("take: script returned nothing, not tasks and flags")
	}
	flags, ok := vals[len(vals)-1].([]any)
	if !ok {
		return nil, end, fmt.Errorf("take: script returned %T last, not its flags", vals[len(vals)-1])
	}
	if end, err = parseTakeEnd(flags); err != nil {
		return nil, end, err
	}
	vals = vals[:len(vals)-1]
	taken = make([]wire.Taken, 0, len(vals)/2)
	now := time.Now()
	for i := 0; i < len(vals); {
		if i+1 >= len(vals) {
			return nil, end, fmt.Errorf("take: script returned a task id %v without its payload", vals[i])
		}
		id, ok1 := vals[i].(string)
		payload, ok2 := vals[i+1].(string)
		if !ok1 || !ok2 {
			return nil, end, fmt.Errorf("take: script returned %T %T, not a task id and payload", vals[i], vals[i+1])
		}
		i += 2
		t := wire.Taken{ID: id, Shard: r.shard, At: now}
		if payload != "" { // else over Inline: see taken
			t.Payload = []byte(payload)
		}
		if i < len(vals) {
			if more, ok := vals[i].([]any); ok {
				i++
				if err := parseMore(&t, more); err != nil {
					return nil, end, fmt.Errorf("take: task %s: %w", id, err)
				}
			}
		}
		taken = append(taken, t)
	}
	return taken, end, nil
}

// parseMore reads the {attempt, mark} that follows a task in take.lua's
// reply when it is not a first attempt from a lane.
func parseMore(t *wire.Taken, more []any) error {
	if len(more) != 2 {
		return fmt.Errorf("%d values, not an attempt and a mark", len(more))
	}
	attempt, err := attemptOf(more[0])
	mark, ok := more[1].(string)
	if err != nil || !ok {
		return fmt.Errorf("%v %T, not an attempt and a mark", more[0], more[1])
	}
	t.Attempt = attempt
	mark, since, limited := strings.Cut(mark, "@")
	t.Private = mark == "!"
	if limited {
		if us, err := strconv.ParseInt(since, 10, 64); err == nil && us > 0 {
			t.HeldBack = time.Duration(us) * time.Microsecond
		}
	}
	return nil
}

// parseTakeEnd reads the flags that end take.lua's reply.
func parseTakeEnd(flags []any) (end wire.TakeEnd, err error) {
	for i := 0; i < len(flags); i++ {
		switch flags[i] {
		case "drained":
			end.Drained = true
		case "suspect":
			end.Suspect = true
		case "room":
			end.Room = true
		case "paused":
			end.Paused = true
		case "shards", "wait":
			var n int64
			if i+1 < len(flags) {
				n, _ = flags[i+1].(int64)
			}
			if n <= 0 {
				return end, fmt.Errorf("take: script returned %v without a count", flags[i])
			}
			if flags[i] == "shards" {
				end.Shards = int(n)
			} else {
				end.Wait = time.Duration(n) * time.Millisecond
			}
			i++
		default:
			return end, fmt.Errorf("take: script returned the flag %v", flags[i])
		}
	}
	return end, nil
}

// WaitBell blocks until a submit rings worker wid's bell or timeout passes.
// It reports whether the bell rang.
func (r *RDB) WaitBell(ctx context.Context, p *broker.WaitBellParams) (bool, error) {
	bell := keys.Bell(r.prefix, r.queue, p.Worker)
	err := r.asideOnce(ctx, bell, "list", func() error { return r.c.BLPop(ctx, blocking(p.Timeout), bell).Err() })
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, wrap("wait", nil, "BLPOP", err)
	}
	return true, nil
}

// blpop queues on p a BLPOP of key for timeout. go-redis's BLPop rounds a
// timeout below a second up to one (it sends whole seconds); Redis takes a
// decimal one (6.0 and later), which a worker waiting for a limit's next
// token needs: it sends that itself. The connection's read timeout covers
// a wait below a second.
func blpop(ctx context.Context, p redis.Pipeliner, key string, timeout time.Duration) *redis.StringSliceCmd {
	if timeout >= time.Second {
		return p.BLPop(ctx, timeout, key)
	}
	cmd := redis.NewStringSliceCmd(ctx, "blpop", key, strconv.FormatFloat(timeout.Seconds(), 'f', 3, 64))
	_ = p.Process(ctx, cmd)
	return cmd
}

// blocking returns the timeout to give a blocking command: at least a second,
// since go-redis rounds shorter ones up to that anyway, logging a warning
// each time.
func blocking(timeout time.Duration) time.Duration { return max(timeout, time.Second) }

// RingStop wakes worker wid if it is blocked in WaitBell or WaitTake, as a
// worker does to itself when it stops, and leaves a "stop" token on its bell
// that makes take.lua take nothing: a WaitTake whose wait this ring ends
// takes no task for a worker that is stopping.
func (r *RDB) RingStop(ctx context.Context, p *broker.RingStopParams) error {
	return r.push(ctx, "ring", keys.Bell(r.prefix, r.queue, p.Worker), "stop", "stop")
}

// push appends vs to list key and gives the list a minute to live, so a
// wake-up nobody pops leaks nothing.
func (r *RDB) push(ctx context.Context, what, key string, vs ...any) error {
	err := r.asideOnce(ctx, key, "list", func() error {
		_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.RPush(ctx, key, vs...)
			p.PExpire(ctx, key, time.Minute)
			return nil
		})
		return err
	})
	return wrap(what, nil, "RPUSH, PEXPIRE, MULTI or EXEC", err)
}

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
func (r *RDB) Finish(ctx context.Context, p *broker.FinishParams) (*wire.Finished, error) {
	wid, done := p.Worker, p.Done
	ks := []string{keys.Held(r.prefix, r.queue, wid)}
	var out wire.Finished
	var first error
	small, staged := r.byStaging(done)
	for i, part := range [2][]wire.Done{small, staged} {
		for len(part) > 0 {
			n, size := 0, 0
			for n < len(part) && n < maxGroup && (n == 0 || size+len(part[n].Result)+len(part[n].Record) <= CallBytes) {
				size += len(part[n].Result) + len(part[n].Record)
				n++
			}
			k, err := r.finishGroup(ctx, ks, wid, part[:n])
			switch {
			case err == nil:
				out.Sent += n
				out.Delivered += k
			case OutOfMemory(err):
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
func (r *RDB) byStaging(done []wire.Done) (small, staged []wire.Done) {
	isStaged := func(d wire.Done) bool { return len(d.Result) > Inline && id.Manager(d.ID) != "" }
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
func (r *RDB) finishGroup(ctx context.Context, ks []string, wid string, done []wire.Done) (int, error) {
	args := make([]any, 0, 2+2*len(done))
	args = append(args, r.base, "")
	var staged map[string][]any // staged results' key -> field, result, ...
	records := false
	for _, d := range done {
		records = records || d.Record != ""
		if mid := id.Manager(d.ID); len(d.Result) > Inline && mid != "" {
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
func (r *RDB) finishStaged(ctx context.Context, ks []string, staged map[string][]any, args []any) (int, error) {
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

// Unstaged returns entries, read from manager mid's result list or kept
// list, with each "staged <field>" entry replaced by the result it refers
// to (keys.Staged), read with one HMGET; one whose result is gone (Redis
// lost it) stays as it is: the manager then submits its task again. entries is
// not changed: the trim of the next read needs the entries as they are in
// the list. No round trip if none is staged.
func (r *RDB) Unstaged(ctx context.Context, p *broker.EntriesParams) (out []string, err error) {
	mid, entries := p.Manager, p.Entries
	defer func() {
		if err != nil {
			err = r.setAside(ctx, mid, err)
		}
	}()
	at, fields := stagedFields(entries)
	if at == nil {
		return entries, nil
	}
	vals, err := r.c.HMGet(ctx, keys.Staged(r.prefix, r.queue, mid), fields...).Result()
	if err != nil {
		return nil, wrap("read staged results", nil, "HMGET", err)
	}
	out = slices.Clone(entries)
	for j, i := range at {
		if v, ok := vals[j].(string); ok {
			out[i] = v
		}
	}
	return out, nil
}

// Heartbeat registers worker wid, or renews its lease, for lease from now by
// the Redis clock, and publishes info for operators (nil: none). One script
// call; on shard 0, at the first call and then every keys.QueueIndexEvery,
// one more to name the queue in the index of queues.
func (r *RDB) Heartbeat(ctx context.Context, p *broker.HeartbeatParams) (*wire.Beat, error) {
	wid, lease, info := p.Worker, p.Lease, p.Info
	ks := []string{keys.Workers(r.prefix, r.queue), keys.WorkerInfo(r.prefix, r.queue, wid), keys.Drain(r.prefix, r.queue, wid),
		keys.ShardNames(r.prefix, r.queue)}
	args := []any{wid, lease.Milliseconds(), keys.GoneFor.Milliseconds()}
	if info != nil {
		args = append(args, wire.EncodeWorkerInfo(*info)...)
	}
	n, err := heartbeatScript.run(ctx, r.c, ks, args...).Int64Slice()
	if err != nil {
		return nil, wrap("heartbeat", heartbeatScript, "", err)
	}
	r.nameQueue(ctx)
	if len(n) != 3 {
		return nil, fmt.Errorf("heartbeat: script returned %v, not 3 integers", n)
	}
	return &wire.Beat{Drain: n[1] == 1, Shards: int(n[2]) + 1}, nil
}

// AdoptShards is a manager's first record, before it submits, in the
// queue's list of shard names (in shard 0), of the shards other than 0 it
// uses, so that workers serve them: names are proposals; for each index
// the list already has, the manager takes the name there, and the list
// grows by the proposals beyond it. It returns the names the manager is to
// use. One script call.
func (r *RDB) AdoptShards(ctx context.Context, p *broker.ShardsParams) ([]string, error) {
	proposals := p.Names
	return r.publishShards(ctx, "adopt", proposals)
}

// AddShards adds to the queue's list of shard names those of names it
// lacks (after Redis lost it), and returns the list. One script call.
func (r *RDB) AddShards(ctx context.Context, p *broker.ShardsParams) ([]string, error) {
	names := p.Names
	return r.publishShards(ctx, "add", names)
}

// publishShards runs shards.lua in mode "adopt" or "add".
func (r *RDB) publishShards(ctx context.Context, mode string, names []string) ([]string, error) {
	args := []any{mode}
	for _, n := range names[:min(len(names), keys.MaxShards-1)] {
		args = append(args, n)
	}
	got, err := shardsScript.run(ctx, r.c, []string{keys.ShardNames(r.prefix, r.queue), keys.Paused(r.prefix, r.queue)}, args...).StringSlice()
	if err != nil {
		return nil, wrap("publish shards", shardsScript, "", err)
	}
	if n := len(got); n > 0 && strings.HasPrefix(got[n-1], pausedEntry) {
		mark := strings.TrimPrefix(got[n-1], pausedEntry)
		got = got[:n-1]
		if err := r.followPause(ctx, got, mark); err != nil {
			return nil, err
		}
	}
	return got, nil
}

// pausedEntry starts the last entry of shards.lua's reply when an
// operator paused the queue; the mark follows it.
const pausedEntry = "\npaused\n"

// followedPause is how long a shard's copy of a paused queue's mark lives
// (pause.lua, follow): renewed every Poll while the queue stays paused, it
// outlives a resume by that long at most.
const followedPause = 10 * time.Second

// followPause gives the queue's other shards, names, the pause mark of
// shard 0 (pause.lua, follow): a shard a manager adds to a paused queue is
// paused too. A script call a shard, only while the queue is paused.
func (r *RDB) followPause(ctx context.Context, names []string, mark string) error {
	for _, sh := range names {
		if sh == r.queue {
			continue
		}
		err := pauseScript.run(ctx, r.c, []string{keys.Paused(r.prefix, sh), keys.Idle(r.prefix, sh)}, "follow", mark, keys.Base(r.prefix, sh), followedPause.Milliseconds()).Err()
		if err != nil {
			return wrap("pause a new shard", pauseScript, "", err)
		}
	}
	return nil
}

// ShardNames returns the queue's list of shard names (see AdoptShards).
// One LRANGE.
func (r *RDB) ShardNames(ctx context.Context) ([]string, error) {
	var names []string
	key := keys.ShardNames(r.prefix, r.queue)
	err := r.asideOnce(ctx, key, "list", func() (err error) {
		names, err = r.c.LRange(ctx, key, 0, keys.MaxShards).Result()
		return err
	})
	if err != nil {
		return nil, wrap("shard names", nil, "LRANGE", err)
	}
	return names, nil
}

// CountFailures adds the failure groups worker wid saw since its last call
// to the queue's (see lua/failures.lua), and returns how many failures it
// added and how many malformed groups in Redis it replaced. One script
// call.
func (r *RDB) CountFailures(ctx context.Context, p *broker.CountFailuresParams) (*broker.CountFailuresResult, error) {
	wid, groups := p.Worker, p.Groups
	if len(groups) == 0 {
		return &broker.CountFailuresResult{}, nil
	}
	args := make([]any, 0, 3+2*len(groups))
	args = append(args, keys.MaxFailureGroups, keys.FailureGroupsFor.Milliseconds(), wid)
	for _, g := range groups {
		args = append(args, g.Key(), wire.EncodeGroup(g))
	}
	n, err := failuresScript.run(ctx, r.c, []string{keys.FailureGroups(r.prefix, r.queue)}, args...).Int64Slice()
	if err != nil {
		return nil, wrap("count failures", failuresScript, "", err)
	}
	if len(n) != 2 {
		return nil, fmt.Errorf("count failures: script returned %v, not 2 integers", n)
	}
	return &broker.CountFailuresResult{Added: n[0], Malformed: n[1]}, nil
}

// Retire ends worker wid's lease now and reaps it, as if it had died: what
// it still holds goes back to the queue, and tasks left in its private list
// are reported lost to their managers, who would otherwise wait for them for
// ever. With info (shard 0), the worker is listed "stopped" for operators
// with that last info, for keys.GoneFor. A heartbeat's script call, then
// Reap's calls (one per ScriptBudget tasks left).
func (r *RDB) Retire(ctx context.Context, p *broker.RetireParams) (*wire.Reaped, error) {
	wid, info := p.Worker, p.Info
	if info != nil {
		stopped := *info
		stopped.State = "stopped"
		info = &stopped
	}
	if _, err := r.Heartbeat(ctx, &broker.HeartbeatParams{Worker: wid, Lease: -time.Millisecond, Info: info}); err != nil {
		return nil, fmt.Errorf("retire: %w", err)
	}
	if err := r.c.Del(ctx, keys.Drain(r.prefix, r.queue, wid)).Err(); err != nil {
		return nil, wrap("retire", nil, "DEL", err)
	}
	return r.Reap(ctx)
}

// LiveWorkers returns the ids of the queue's workers whose lease has not
// expired by the Redis clock.
func (r *RDB) LiveWorkers(ctx context.Context) ([]string, error) {
	ids, err := liveScript.run(ctx, r.c, []string{keys.Workers(r.prefix, r.queue)}).StringSlice()
	if err != nil {
		return nil, wrap("live workers", liveScript, "", err)
	}
	return ids, nil
}

// ReadResults trims the entries of manager mid's result list that were read
// last time and handled since (the first handled ones, the last of which
// began with mark), and returns up to limit of those after them, in one round
// trip: trim.lua, then a plain LRANGE in the same pipeline (only this
// manager's collector trims its list; workers only append). Reading does not
// consume, and the trim happens once however often the call is retried: a
// reply lost on the way loses no result, and the manager discards entries it
// sees twice.
func (r *RDB) ReadResults(ctx context.Context, p *broker.ReadResultsParams) (out []string, err error) {
	mid, handled, mark, limit := p.Manager, p.Handled, p.Mark, p.Limit
	defer func() {
		if err != nil {
			err = r.setAside(ctx, mid, err)
		}
	}()
	l := keys.Results(r.prefix, r.queue, mid)
	if handled == 0 {
		entries, err := r.c.LRange(ctx, l, 0, int64(limit)-1).Result()
		if err != nil {
			return nil, wrap("read results", nil, "LRANGE", err)
		}
		return entries, nil
	}
	tk, ta := r.trimOf(l, mid, handled, mark)
	var trim *redis.Cmd
	var read *redis.StringSliceCmd
	_, _ = r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		trim = trimScript.evalSha(ctx, p, tk, ta...)
		read = p.LRange(ctx, l, 0, int64(limit)-1)
		return nil
	})
	return r.trimmedRead(ctx, tk, ta, limit, trim, read)
}

// trimmedRead returns what a pipelined trim.lua (KEYS tk, ARGV ta) and
// LRANGE read. If Redis
// did not know the script (restarted, flushed), the LRANGE read the list
// untrimmed: it loads the script, trims and reads again.
func (r *RDB) trimmedRead(ctx context.Context, tk []string, ta []any, limit int, trim *redis.Cmd, read *redis.StringSliceCmd) ([]string, error) {
	err := trim.Err()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		err = trimScript.run(ctx, r.c, tk, ta...).Err()
		if err == nil {
			read = r.c.LRange(ctx, tk[0], 0, int64(limit)-1)
		}
	}
	if err != nil {
		return nil, wrap("read results", trimScript, "", err)
	}
	entries, err := read.Result()
	if err != nil {
		return nil, wrap("read results", nil, "LRANGE", err)
	}
	return entries, nil
}

// trimOf returns the KEYS and ARGV of trim.lua for manager mid, n entries
// handled, the last with mark: its result list (results); for a durable
// batch's owner, its kept list (a manager's reads pay for no second key),
// with the flag that keeps the entries trimmed, and, once it holds the
// batch's claim, its fence and that claim.
func (r *RDB) trimOf(results, mid string, n int, mark string) ([]string, []any) {
	if !r.keep {
		return []string{results}, []any{n, mark, ""}
	}
	kept := keys.Kept(r.prefix, r.queue, mid)
	if fence, held := r.fenceOf(mid); fence != "" {
		return []string{results, kept, fence}, []any{n, mark, "1", held}
	}
	return []string{results, kept}, []any{n, mark, "1"}
}

// KeepingResults returns r for a durable batch's manager: the results its
// reads trim move onto the kept list (keys.Kept) instead of being dropped.
func (r *RDB) KeepingResults() *RDB {
	k := *r
	k.keep = true
	return &k
}

// WaitResults blocks until manager mid's result list holds an entry, or
// timeout passes, and returns its first entry ("" at the timeout) without
// removing it: one round trip that waits and reads (BLMOVE of the list onto
// itself), so a lone result reaches the manager in one. ReadResults trims it
// once handled. The timeout must be positive: a dead connection must not
// block the manager forever.
//
// The blocking reads of one client take at most a quarter of its pool (of
// each node's, in a Cluster): a
// wait beyond that (many managers on one client) is made by the client's one
// waiter, which reads the first entry of each list so waited on with one
// pipeline every 10 ms (see waiter).
func (r *RDB) WaitResults(ctx context.Context, p *broker.WaitResultsParams) (out string, err error) {
	mid, timeout := p.Manager, p.Timeout
	defer func() {
		if err != nil {
			err = r.setAside(ctx, mid, err)
		}
	}()
	if timeout <= 0 {
		return "", errors.New("wait results: timeout must be positive")
	}
	l := keys.Results(r.prefix, r.queue, mid)
	e, err := r.wait.first(ctx, l, timeout)
	if err != nil {
		return "", wrap("wait results", nil, "BLMOVE", err)
	}
	return e, nil
}

// ReadThenWait is ReadResults and, behind it in one pipeline, WaitResults:
// for a collector that expects to find nothing (its last entry came alone,
// from a wait), one round trip instead of two. If the read returns entries,
// the wait did not block (the list was not empty) and its entry, the read's
// first, is ignored; fromWait reports whether the entries came from the
// wait. A wait longer than the client's read timeout allows is made after
// the read instead.
func (r *RDB) ReadThenWait(ctx context.Context, p *broker.ReadResultsParams) (_ *broker.ReadThenWaitResult, err error) {
	mid, handled, mark, limit, timeout := p.Manager, p.Handled, p.Mark, p.Limit, p.Wait
	var entries []string
	defer func() {
		if err != nil {
			err = r.setAside(ctx, mid, err)
		}
	}()
	wait := blocking(timeout)
	release, free := func() {}, false
	if timeout > 0 {
		release, free = r.wait.block(ctx, keys.Results(r.prefix, r.queue, mid))
	}
	if rt := readTimeout(r.c); !free || rt > 0 && wait > rt/2 {
		if free {
			release()
		}
		if entries, err = r.ReadResults(ctx, &broker.ReadResultsParams{Manager: mid, Handled: handled, Mark: mark, Limit: limit}); err != nil || len(entries) > 0 || timeout <= 0 {
			return &broker.ReadThenWaitResult{Entries: entries, FromWait: false}, err
		}
		first, err := r.WaitResults(ctx, &broker.WaitResultsParams{Manager: mid, Timeout: timeout})
		if first == "" {
			return &broker.ReadThenWaitResult{Entries: nil, FromWait: true}, err
		}
		return &broker.ReadThenWaitResult{Entries: []string{first}, FromWait: true}, err
	}
	l := keys.Results(r.prefix, r.queue, mid)
	tk, ta := r.trimOf(l, mid, handled, mark)
	var trim *redis.Cmd
	var read *redis.StringSliceCmd
	var move *redis.StringCmd
	defer release()
	_, _ = r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		if handled > 0 {
			trim = trimScript.evalSha(ctx, p, tk, ta...)
		}
		read = p.LRange(ctx, l, 0, int64(limit)-1)
		move = p.BLMove(ctx, l, l, "LEFT", "LEFT", wait)
		return nil
	})
	if trim != nil && trim.Err() != nil {
		// NOSCRIPT (the read and the wait saw the list untrimmed) or a
		// failed trim: trimmedRead loads the script, or says the error.
		entries, err = r.trimmedRead(ctx, tk, ta, limit, trim, read)
		return &broker.ReadThenWaitResult{Entries: entries, FromWait: false}, err
	}
	if entries, err = read.Result(); err != nil || len(entries) > 0 {
		if err != nil {
			err = wrap("read results", nil, "LRANGE", err)
		}
		return &broker.ReadThenWaitResult{Entries: entries, FromWait: false}, err
	}
	first, err := move.Result()
	if errors.Is(err, redis.Nil) {
		return &broker.ReadThenWaitResult{Entries: nil, FromWait: true}, nil
	}
	if err != nil {
		return &broker.ReadThenWaitResult{Entries: nil, FromWait: true}, wrap("wait results", nil, "BLMOVE", err)
	}
	return &broker.ReadThenWaitResult{Entries: []string{first}, FromWait: true}, nil
}

// WakeCollector makes manager mid's blocked WaitResults return at once: it
// pushes a wake entry (EntryWake) onto the result list, which then lives a
// minute. A durable batch's owner's list (KeepingResults) keeps its TTL, as
// it may hold results for the batch's next holder, and its wake is refused
// once another claim was taken (*FencedError; wake.lua); an owner that holds
// no claim yet has no collector reading, and pushes nothing. One round trip.
func (r *RDB) WakeCollector(ctx context.Context, p *broker.ManagerParams) error {
	mid := p.Manager
	l, wake := keys.Results(r.prefix, r.queue, mid), wire.EncodeEntry(wire.Entry{Kind: wire.EntryWake})
	if !r.keep {
		return r.push(ctx, "wake", l, wake)
	}
	fence, held := r.fenceOf(mid)
	if fence == "" {
		return nil
	}
	err := wakeScript.run(ctx, r.c, []string{l, fence, keys.Tasks(r.prefix, r.queue, mid)}, held, wake).Err()
	return wrap("wake", wakeScript, "", err)
}

// Renew extends the TTL of manager mid's task set, attempt counts, result
// list and lanes. One script call.
func (r *RDB) Renew(ctx context.Context, p *broker.RenewParams) error {
	mid, ttl := p.Manager, p.TTL
	ks, held := r.managerKeys(mid)
	err := renewScript.run(ctx, r.c, ks, r.base, mid, max(ttl.Milliseconds(), 1), held).Err()
	return wrap("renew", renewScript, "", err)
}

// ForgetLanes deletes what manager mid keeps of its batches' lanes that
// ended (lanes: the lanes' numbers, the part of a lane's name after the
// '.'): their entries in its lanes hash, which renew.lua would otherwise
// keep alive, one per batch the manager ever ran, for as long as it lives;
// and their lists and the keys beside them, which hold no task still
// wanted. One round trip (a MULTI), at most one per Poll.
func (r *RDB) ForgetLanes(ctx context.Context, p *broker.ForgetLanesParams) error {
	mid, lanes := p.Manager, p.Lanes
	if len(lanes) == 0 {
		return nil
	}
	// A pipeline, not a MULTI: deletes each idempotent, which Redis at
	// maxmemory takes but refuses whole in a MULTI (EXECABORT).
	cmds, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HDel(ctx, keys.Lanes(r.prefix, r.queue, mid), lanes...)
		for _, l := range lanes {
			name := mid + "." + l
			p.Del(ctx, keys.Lane(r.prefix, r.queue, name), keys.LaneElements(r.prefix, r.queue, name), keys.LaneTimes(r.prefix, r.queue, name))
		}
		return nil
	})
	if err != nil && len(cmds) > 0 && redis.HasErrorPrefix(cmds[0].Err(), "WRONGTYPE") {
		// Foreign data over the lanes hash: there is nothing of it to
		// forget (renew.lua sets the key aside); the deletes stand alone.
		err = nil
		for _, c := range cmds[1:] {
			if c.Err() != nil {
				err = c.Err()
				break
			}
		}
	}
	return wrap("forget lanes", nil, "HDEL or DEL", err)
}

// managerKeys returns the KEYS of renew.lua for manager mid, and the
// claim its writes carry (its ARGV[4]: see fenceOf).
func (r *RDB) managerKeys(mid string) ([]string, string) {
	ks := []string{keys.Tasks(r.prefix, r.queue, mid), keys.Attempts(r.prefix, r.queue, mid),
		keys.Results(r.prefix, r.queue, mid), keys.Lanes(r.prefix, r.queue, mid), keys.Kept(r.prefix, r.queue, mid), keys.Sums(r.prefix, r.queue, mid),
		keys.Staged(r.prefix, r.queue, mid), keys.Widest(r.prefix, r.queue, mid)}
	fence, held := r.fenceOf(mid)
	if fence != "" {
		ks = append(ks, fence)
	}
	return ks, held
}

// Claim takes, renews or (a Lease of 0) releases c.Holder's claim on
// durable batch c.Owner: a claim whose record is exactly c.Steal (not "")
// is taken over. A claim taken gets the next token of the batch and becomes
// its fence (keys.Fence); one renewed or released is c.Fence, the record a
// Claim that took it returned, and is refused with a *FencedError once
// another claim was taken since. Taken or renewed, the batch's entry in the
// queue's list of durable batches expires c.TTL from now. It returns
// whether c.Holder holds the claim now and the claim's record: its own, or
// another holder's. One script call.
func (r *RDB) Claim(ctx context.Context, c *broker.ClaimParams) (*wire.Claimed, error) {
	ms := c.Lease.Milliseconds()
	if c.Lease > 0 {
		ms = max(ms, 1)
	}
	ks := []string{keys.Claim(r.prefix, r.queue, c.Owner), keys.Durables(r.prefix, r.queue), keys.Fence(r.prefix, r.queue, c.Owner)}
	vals, err := claimScript.run(ctx, r.c, ks, c.Holder.Manager, wire.EncodeHolder(c.Holder), ms, c.Steal,
		c.Owner, max(c.TTL.Milliseconds(), 1), c.Name, c.Fence).Slice()
	if err != nil {
		return nil, wrap("claim a durable batch", claimScript, "", err)
	}
	if len(vals) != 2 {
		return nil, fmt.Errorf("claim a durable batch: %d values in the reply, want 2", len(vals))
	}
	n, _ := vals[0].(int64)
	s, _ := vals[1].(string)
	got := wire.Claimed{Held: n == 1, Record: s}
	if s == "" { // released
		return &got, nil
	}
	if got.Holder, err = wire.DecodeHolder(s); err != nil {
		return nil, fmt.Errorf("claim a durable batch: %w", err)
	}
	return &got, nil
}

// Resume returns what a manager taking over durable batch owner finds of it
// on r's shard (see resume.lua): the task set's count and epoch, the length
// of the kept list, which now holds every result delivered so far, and the
// tasks outstanding (queued, or held by a worker). The claim r's fence
// holds, if any, becomes the shard's fence, living ttl: a holder before it
// writes nothing more of the batch there. One script call; read the kept
// results with Kept.
func (r *RDB) Resume(ctx context.Context, p *broker.ResumeParams) (*wire.Resumed, error) {
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
func (r *RDB) Kept(ctx context.Context, p *broker.KeptParams) ([]string, error) {
	owner, from, n := p.Owner, p.From, p.N
	es, err := r.c.LRange(ctx, keys.Kept(r.prefix, r.queue, owner), from, from+n-1).Result()
	if err != nil {
		return nil, wrap("read kept results", nil, "LRANGE", err)
	}
	sizes, err := r.StagedSizes(ctx, &broker.EntriesParams{Manager: owner, Entries: es})
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(es))
	for done := 0; done < len(es); {
		k := Within(sizes[done:], CallBytes)
		read, err := r.Unstaged(ctx, &broker.EntriesParams{Manager: owner, Entries: es[done : done+k]})
		if err != nil {
			return nil, err
		}
		out = append(out, read...)
		done += k
	}
	return out, nil
}

// AddSums records the sums of durable batch owner's tasks' inputs (task id
// → sum), as they are first submitted, so that a call that takes the batch
// over can tell its input from another. One HSET; for an owner that holds
// the batch's claim, one script call (sums.lua), refused with a
// *FencedError once another claim was taken.
func (r *RDB) AddSums(ctx context.Context, p *broker.AddSumsParams) error {
	owner, sums, ttl := p.Owner, p.Sums, p.TTL
	if len(sums) == 0 {
		return nil
	}
	k := keys.Sums(r.prefix, r.queue, owner)
	if fence, held := r.fenceOf(owner); fence != "" {
		args := make([]any, 0, 2+2*len(sums))
		args = append(args, held, max(ttl.Milliseconds(), 1))
		for tid, sum := range sums {
			args = append(args, tid, sum)
		}
		err := sumsScript.run(ctx, r.c, []string{k, fence}, args...).Err()
		return wrap("record a durable batch's inputs", sumsScript, "", err)
	}
	err := r.asideOnce(ctx, k, "hash", func() error {
		_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.HSet(ctx, k, sums)
			p.PExpire(ctx, k, ttl)
			return nil
		})
		return err
	})
	return wrap("record a durable batch's inputs", nil, "HSET", err)
}

// Sums returns the sums AddSums recorded for durable batch owner: one
// HKEYS, then one pipeline of HMGETs (the least-privilege ACL user has no
// HGETALL). A batch has at most a few thousand tasks without ChunkSize (see
// manager.Durable).
func (r *RDB) Sums(ctx context.Context, p *broker.SumsParams) (map[string]string, error) {
	owner := p.Owner
	k := keys.Sums(r.prefix, r.queue, owner)
	var tids []string
	err := r.asideOnce(ctx, k, "hash", func() (err error) {
		tids, err = r.c.HKeys(ctx, k).Result()
		return err
	})
	if err != nil {
		return nil, wrap("read a durable batch's inputs", nil, "HKEYS", err)
	}
	var pages []*redis.SliceCmd
	_, err = r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := 0; i < len(tids); i += maxGroup {
			pages = append(pages, p.HMGet(ctx, k, tids[i:min(i+maxGroup, len(tids))]...))
		}
		return nil
	})
	if err != nil {
		return nil, wrap("read a durable batch's inputs", nil, "HMGET", err)
	}
	sums := make(map[string]string, len(tids))
	for i, page := range pages {
		for j, v := range page.Val() {
			if s, ok := v.(string); ok {
				sums[tids[i*maxGroup+j]] = s
			}
		}
	}
	return sums, nil
}

// Cancel withdraws tasks of manager mid: removes them and their payloads from
// its task set. Their ids may stay queued; a worker that pops one drops it (see
// Take), and a result of one already running is discarded (see Finish). A
// durable batch's owner that holds its claim withdraws with retract.lua,
// refused with a *FencedError once another claim was taken.
func (r *RDB) Cancel(ctx context.Context, p *broker.CancelParams) error {
	mid, tids := p.Manager, p.Tasks
	tasks, attempts := keys.Tasks(r.prefix, r.queue, mid), keys.Attempts(r.prefix, r.queue, mid)
	fence, held := r.fenceOf(mid)
	for len(tids) > 0 {
		n := min(len(tids), maxGroup)
		if fence != "" {
			args := make([]any, 0, 1+n)
			args = append(args, held)
			for _, tid := range tids[:n] {
				args = append(args, tid)
			}
			if err := retractScript.run(ctx, r.c, []string{tasks, attempts, fence}, args...).Err(); err != nil {
				return wrap("cancel", retractScript, "", err)
			}
			tids = tids[n:]
			continue
		}
		_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.HDel(ctx, tasks, tids[:n]...)
			p.HDel(ctx, attempts, tids[:n]...)
			return nil
		})
		if err != nil {
			return wrap("cancel", nil, "HDEL, MULTI or EXEC", err)
		}
		tids = tids[n:]
	}
	return nil
}

// Drop deletes every key of manager mid, its lanes included; a durable
// batch's owner whose fence another claim replaced deletes none
// (*FencedError).
func (r *RDB) Drop(ctx context.Context, p *broker.ManagerParams) error {
	mid := p.Manager
	ks, held := r.managerKeys(mid)
	if err := renewScript.run(ctx, r.c, ks, r.base, mid, 0, held).Err(); err != nil {
		return wrap("drop", renewScript, "", err)
	}
	// A pipeline, not a MULTI: at maxmemory Redis refuses every command
	// queued in a MULTI (EXECABORT), deletes included, and these free
	// memory; each is idempotent, and what one leaves expires.
	cmds, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		// UNLINK: a manager may have published 100,000 batches
		p.Unlink(ctx, keys.Batches(r.prefix, r.queue, mid), keys.BatchesNext(r.prefix, r.queue, mid), keys.Cancelled(r.prefix, r.queue, mid))
		p.ZRem(ctx, keys.Managers(r.prefix, r.queue), mid)
		p.HDel(ctx, keys.Durables(r.prefix, r.queue), mid) // a durable batch's owner's entry
		return nil
	})
	if err != nil {
		// An entry in a queue's key that holds foreign data went with it:
		// the next script to use the key sets it aside (lua/prelude.lua).
		err = nil
		for _, c := range cmds {
			if e := c.Err(); e != nil && !redis.HasErrorPrefix(e, "WRONGTYPE") {
				err = e
				break
			}
		}
	}
	return wrap("drop", nil, "UNLINK, ZREM or HDEL", err)
}

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
func (r *RDB) PublishBatches(ctx context.Context, p *broker.PublishBatchesParams) (cancels []string, err error) {
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
	if len(pairs) > 2*ScriptBudget {
		mode = "first"
	}
	for {
		n := min(len(pairs), 2*ScriptBudget)
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

// RecordBatches writes recs, batches of manager mid that ended, into the
// queue's history, keeping its last limit batches and none older than age,
// forgets them among mid's published running ones, and adds ended
// (elements ended since the manager last said) to the queue's throughput
// counter of now. One script call per ScriptBudget records.
func (r *RDB) RecordBatches(ctx context.Context, p *broker.RecordBatchesParams) error {
	mid, recs, limit, age, ended := p.Manager, p.Records, p.Limit, p.Age, p.Ended
	ks := []string{keys.History(r.prefix, r.queue), keys.HistoryIndex(r.prefix, r.queue), keys.Batches(r.prefix, r.queue, mid),
		keys.Throughput(r.prefix, r.queue, time.Now().Unix()/int64(keys.ThroughputBucket/time.Second))}
	fence, held := r.fenceOf(mid)
	if fence != "" {
		ks = append(ks, fence)
	}
	for first := true; first || len(recs) > 0; first = false {
		n := min(len(recs), ScriptBudget)
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

// LoseSlices is the most lost.lua calls one RDB.LoseManagers makes:
// 10,000 batches recorded (ScriptBudget a call). A worker calls it every
// heartbeat, which it must not delay for long; what is left, the next
// call records.
const LoseSlices = 20

// LoseManagers records the batches of the queue's managers whose publish
// of progress is overdue as ended with outcome "manager lost" (see
// lua/lost.lua), and returns how many it recorded. A script call per
// ScriptBudget batches recorded, LoseSlices calls at most: the next call
// records what is left (Admin.LoseManagers records them all).
func (r *RDB) LoseManagers(ctx context.Context) (int, error) {
	return loseManagers(ctx, r.c, r.prefix, r.queue, LoseSlices)
}

// loseManagers is LoseManagers for queue at prefix on c, with the default
// bounds of the history, in at most slices calls of lost.lua (0: as many
// as it takes).
//
// The managers found lost have their tasks withdrawn: from the queue's
// first shard in the script call that finds them, then from each of its
// other shards (withdraw.lua), so that workers run none of them. lost.lua
// is called until it says no work is left: each call records a slice of
// their batches.
func loseManagers(ctx context.Context, c redis.UniversalClient, prefix, queue string, slices int) (int, error) {
	total := 0
	for i := 1; ; i++ {
		n, more, mids, err := loseSlice(ctx, c, prefix, queue)
		total += n
		if err != nil {
			return total, err
		}
		if len(mids) > 0 {
			if err := withdrawShards(ctx, c, prefix, queue, mids); err != nil {
				return total, err
			}
		}
		if !more || i == slices {
			return total, nil
		}
	}
}

// loseSlice is one call of lost.lua: the batches it recorded, whether work
// is left, and the managers it found lost.
func loseSlice(ctx context.Context, c redis.UniversalClient, prefix, queue string) (n int, more bool, mids []any, err error) {
	ks := []string{keys.Managers(prefix, queue), keys.History(prefix, queue), keys.HistoryIndex(prefix, queue),
		keys.Durables(prefix, queue), keys.Losing(prefix, queue)}
	got, err := lostScript.run(ctx, c, ks, keys.Base(prefix, queue), keys.DefaultHistory, keys.DefaultHistoryAge.Milliseconds()).Slice()
	if err != nil {
		return 0, false, nil, wrap("lose managers", lostScript, "", err)
	}
	var count, left int64
	if len(got) >= 2 {
		count, _ = got[0].(int64)
		left, _ = got[1].(int64)
	}
	if len(got) < 2 || count < 0 {
		return 0, false, nil, fmt.Errorf("lose managers: script returned %v, not a count and a flag", got)
	}
	return int(count), left == 1, got[2:], nil
}

// withdrawShards withdraws the tasks of managers mids, found lost, from
// the queue's shards other than the first: one withdraw.lua call each.
func withdrawShards(ctx context.Context, c redis.UniversalClient, prefix, queue string, mids []any) error {
	shards, err := c.LRange(ctx, keys.ShardNames(prefix, queue), 0, -1).Result()
	if err != nil {
		return wrap("lose managers: list the shards", nil, "LRANGE", err)
	}
	args := append([]any{""}, mids...) // the shard's base, then the managers
	for _, sh := range shards {
		args[0] = keys.Base(prefix, sh)
		if err := withdrawScript.run(ctx, c, []string{keys.Workers(prefix, sh)}, args...).Err(); err != nil {
			return wrap("withdraw lost managers' tasks", withdrawScript, "", err)
		}
	}
	return nil
}

// Depth returns the number of task ids waiting in the shard's lanes.
func (r *RDB) Depth(ctx context.Context) (int64, error) {
	return depth(ctx, r.c, r.base, r.rings)
}

// depth returns the number of task ids in the lanes of rings, all of one
// shard at base. One script call.
func depth(ctx context.Context, c redis.UniversalClient, base string, rings []string) (int64, error) {
	n, err := depthScript.run(ctx, c, rings, base).Int64()
	return n, wrap("depth", depthScript, "", err)
}

// PublishTypes records the structure of a handle's types under its
// signature, for workers that refuse its tasks to compare with. One pipeline.
func (r *RDB) PublishTypes(ctx context.Context, p *broker.PublishTypesParams) error {
	key := keys.Types(r.prefix, r.queue)
	err := r.asideOnce(ctx, key, "hash", func() error {
		_, err := r.c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			pipe.HSet(ctx, key, p.Sig, strings.Join(p.Types, "\n"))
			pipe.PExpire(ctx, key, 7*24*time.Hour)
			return nil
		})
		return err
	})
	return wrap("publish types", nil, "HSET or PEXPIRE", err)
}

// Types returns the structure published for sig, or nil if there is none.
func (r *RDB) Types(ctx context.Context, p *broker.TypesParams) ([]string, error) {
	var s string
	key := keys.Types(r.prefix, r.queue)
	err := r.asideOnce(ctx, key, "hash", func() (err error) {
		s, err = r.c.HGet(ctx, key, p.Sig).Result()
		return err
	})
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, wrap("types", nil, "HGET", err)
	}
	return strings.Split(s, "\n"), nil
}

// RDB is the broker contract on Redis.
var _ broker.Queue = (*RDB)(nil)
