package redisbroker

import (
	"context"
	"errors"
	"slices"

	"github.com/redis/go-redis/v9"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/keys"
)

// Unstaged returns entries, read from manager mid's result list or kept
// list, with each "staged <field>" entry replaced by the result it refers
// to (keys.Staged), read with one HMGET; one whose result is gone (Redis
// lost it) stays as it is: the manager then submits its task again. entries is
// not changed: the trim of the next read needs the entries as they are in
// the list. No round trip if none is staged.
func (r *Broker) Unstaged(ctx context.Context, p *broker.EntriesParams) (out []string, err error) {
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

// ReadResults trims the entries of manager mid's result list that were read
// last time and handled since (the first handled ones, the last of which
// began with mark), and returns up to limit of those after them, in one round
// trip: trim.lua, then a plain LRANGE in the same pipeline (only this
// manager's collector trims its list; workers only append). Reading does not
// consume, and the trim happens once however often the call is retried: a
// reply lost on the way loses no result, and the manager discards entries it
// sees twice.
func (r *Broker) ReadResults(ctx context.Context, p *broker.ReadResultsParams) (out []string, err error) {
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
func (r *Broker) trimmedRead(ctx context.Context, tk []string, ta []any, limit int, trim *redis.Cmd, read *redis.StringSliceCmd) ([]string, error) {
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
func (r *Broker) trimOf(results, mid string, n int, mark string) ([]string, []any) {
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
func (r *Broker) KeepingResults() *Broker {
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
func (r *Broker) WaitResults(ctx context.Context, p *broker.WaitResultsParams) (out string, err error) {
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
func (r *Broker) ReadThenWait(ctx context.Context, p *broker.ReadResultsParams) (_ *broker.ReadThenWaitResult, err error) {
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
func (r *Broker) WakeCollector(ctx context.Context, p *broker.ManagerParams) error {
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
