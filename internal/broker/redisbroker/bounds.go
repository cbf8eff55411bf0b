package redisbroker

import (
	"context"
	"errors"
	"net"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/keys"
)

// CallBytes caps the bytes of payloads, results or constant parts that one
// call carries, beyond one item larger than it, which goes alone: a
// manager's submit group, read of staged results and upload pipeline; a
// worker's finish, the payloads a take reads beside its script, a
// constant's parts fetched. 1 MiB crosses a link of 10 MB/s in 0.1 s, far
// inside go-redis's read and write timeouts (3 s by default), so a slow link
// makes calls slower and never makes them time out above about 350 KB/s;
// at maxmemory one call never holds more than it. On loopback a round trip
// costs about what 100 KiB of bytes do, so the cap adds about a tenth to
// the time of moving large values.
const CallBytes = 1 << 20

// StagedSizes returns the bytes each of entries, read from manager mid's
// result list, stands for: its own length, or, for a "staged <field>"
// entry, the length of the result it refers to (0 if it is gone), so that
// a reader can read the staged results in calls of at most CallBytes
// (Unstaged). One pipeline of HSTRLEN, only if two entries or more are
// staged: a lone staged result is read alone anyway (its size is then 0).
func (r *Broker) StagedSizes(ctx context.Context, p *broker.EntriesParams) (out []int, err error) {
	mid, entries := p.Manager, p.Entries
	defer func() {
		if err != nil {
			err = r.setAside(ctx, mid, err)
		}
	}()
	sizes := make([]int, len(entries))
	at, fields := stagedFields(entries)
	for i, e := range entries {
		sizes[i] = len(e)
	}
	for _, i := range at {
		sizes[i] = 0
	}
	if len(at) < 2 {
		return sizes, nil
	}
	k := keys.Staged(r.prefix, r.queue, mid)
	cmds := make([]*redis.IntCmd, len(fields))
	_, err = r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for j, f := range fields {
			cmds[j] = p.HStrLen(ctx, k, f)
		}
		return nil
	})
	if err != nil {
		return nil, wrap("read staged results' sizes", nil, "HSTRLEN", err)
	}
	for j, i := range at {
		sizes[i] = int(cmds[j].Val())
	}
	return sizes, nil
}

// Within returns how many of the first items, whose sizes are given, one
// call carries: as many as fit in budget bytes (at most CallBytes), and at
// least one.
func Within(sizes []int, budget int) int {
	budget = min(budget, CallBytes)
	n, total := 0, 0
	for n < len(sizes) && (n == 0 || total+sizes[n] <= budget) {
		total += sizes[n]
		n++
	}
	return n
}

// Slow reports whether err is a call that timed out, or waited out the
// client's pool, rather than one refused or dropped: what a slow link or a
// pool too small for its callers does as well as a Redis gone. The caller
// tells them apart by asking Redis (Ping).
func Slow(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false // the caller's own deadline (which is a net.Error too)
	}
	if errors.Is(err, redis.ErrPoolTimeout) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// PartlySubmitted is the error of a Submit whose first groups were queued
// and a later one failed (Err): a call that made progress. Queued is how
// many of its tasks, from the first, Redis holds; Count and Intact are what
// their last group returned, as Submit returns them.
type PartlySubmitted struct {
	Queued int
	Count  int64
	Intact bool
	Err    error
}

func (e *PartlySubmitted) Error() string { return e.Err.Error() }

func (e *PartlySubmitted) Unwrap() error { return e.Err }

// stagedFields returns the indexes of entries that are "staged <field>"
// entries, and their fields.
func stagedFields(entries []string) (at []int, fields []string) {
	for i, e := range entries {
		if f, ok := wire.StagedField(e); ok {
			at = append(at, i)
			fields = append(fields, f)
		}
	}
	return at, fields
}
