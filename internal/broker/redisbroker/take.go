package redisbroker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/keys"
)

// Take takes up to p.Max tasks for worker p.Worker, private list first, with
// their payloads, in one script call; taking and recording the hold are one
// atomic step, and a worker Redis has lost from its workers set is
// registered again (for p.Lease) in it. Tasks no longer wanted are dropped,
// not returned. When it returns none, the worker is registered idle, and
// the next submit rings its bell (WaitBell).
func (r *Broker) Take(ctx context.Context, p *broker.TakeParams) (*broker.TakeResult, error) {
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
func (r *Broker) taken(ctx context.Context, wid string, vals []any) (*broker.TakeResult, error) {
	taken, end, err := r.parseTaken(vals)
	if err != nil {
		return &broker.TakeResult{Taken: taken, End: end}, err
	}
	// The tasks are held as those of a take whose reply was lost if a read
	// fails: the worker gives them back as orphans.
	gone, err := r.readPayloads(ctx, taken)
	if err != nil {
		return nil, err
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

// readPayloads reads the payloads of the tasks taken without one (left in
// their task sets): their lengths in one round trip, then the payloads in
// round trips of at most broker.CallBytes each. It returns the tasks whose
// payload is gone.
func (r *Broker) readPayloads(ctx context.Context, taken []wire.Taken) (gone []wire.Done, err error) {
	var fetch []int // indexes in taken
	for i, t := range taken {
		if t.Payload == nil {
			fetch = append(fetch, i)
		}
	}
	if fetch == nil {
		return nil, nil
	}
	key := func(i int) string { return keys.Tasks(r.prefix, r.queue, id.Manager(taken[i].ID)) }
	lens := make([]*redis.IntCmd, len(fetch))
	if _, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for j, i := range fetch {
			lens[j] = p.HStrLen(ctx, key(i), taken[i].ID)
		}
		return nil
	}); err != nil {
		return nil, wrap("take", nil, "HSTRLEN", err)
	}
	for j := 0; j < len(fetch); {
		// As many as fit in CallBytes; a larger payload alone.
		n, size := 0, int64(0)
		for j+n < len(fetch) && (n == 0 || size+lens[j+n].Val() <= broker.CallBytes) {
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
		for k, i := range fetch[j : j+n] {
			if err := reads[k].Err(); err != nil && !errors.Is(err, redis.Nil) {
				return nil, wrap("take", nil, "HGET", err)
			}
			if p := reads[k].Val(); p != "" {
				taken[i].Payload = []byte(p)
			} else {
				gone = append(gone, wire.Done{ID: taken[i].ID})
			}
		}
		j += n
	}
	return gone, nil
}

// WaitTake waits for worker p.Worker's bell (up to p.Wait), as WaitBell, then takes, as Take, in
// one round trip: the take follows the wait in one pipeline, so Redis runs it
// as soon as a submit rings the bell, and its tasks come back with the
// wake-up. After the timeout the take runs all the same. A wait longer than
// the client's read timeout allows is made in two round trips instead.
func (r *Broker) WaitTake(ctx context.Context, p *broker.TakeParams) (*broker.TakeResult, error) {
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
func (r *Broker) takeArgs(p *broker.TakeParams) []any {
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
func (r *Broker) takeKeys(wid string) []string {
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
func (r *Broker) parseTaken(vals []any) (taken []wire.Taken, end wire.TakeEnd, err error) {
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
		if payload != "" { // else over broker.Inline: see taken
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
	t.Private, t.Backup = mark == "!", mark == "+"
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
