package redisbroker

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/keys"
)

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
