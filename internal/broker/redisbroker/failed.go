package redisbroker

import (
	"cmp"
	"context"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/keys"
)

// failedSlice is how many failed elements one call of failed.lua
// records: about 100 KiB of arguments at most (wire.MaxFailedError bytes
// of error each, and a few fields).
const failedSlice = 200

// RecordFailed records failed elements fs of ended batch bid, in index
// order, for operators (keys.FailedElements), with omitted more failed
// elements left out: at most wire.MaxFailedElements of them, the others
// counted among omitted. The hash lives age, the history's age, and goes
// with the batch's record when the history is trimmed. One script call per
// 200 elements (failed.lua); none for no failed element.
func (r *Broker) RecordFailed(ctx context.Context, p *broker.RecordFailedParams) error {
	bid, fs, omitted, age := p.Batch, p.Failed, p.Omitted, p.Age
	if len(fs) == 0 && omitted == 0 {
		return nil
	}
	if over := len(fs) - wire.MaxFailedElements; over > 0 {
		fs, omitted = fs[:wire.MaxFailedElements], omitted+over
	}
	k := []string{keys.FailedElements(r.prefix, r.queue, bid)}
	for first := true; first || len(fs) > 0; first = false {
		n := min(len(fs), failedSlice)
		args := make([]any, 0, 4+2*n)
		args = append(args, "", age.Milliseconds(), wire.MaxFailedElements, 0)
		if first {
			args[0], args[3] = "1", omitted
		}
		for _, f := range fs[:n] {
			args = append(args, f.Field(), wire.EncodeFailed(f))
		}
		if err := failedScript.run(ctx, r.c, k, args...).Err(); err != nil {
			return wrap("record failed elements", failedScript, "", err)
		}
		fs = fs[n:]
	}
	return nil
}

// FailedElements returns the failed elements recorded of queue's ended
// batch bid (Broker.RecordFailed), in index order, how many failed without
// being recorded, and how many entries did not decode; nothing if none was
// recorded (the batch had none, or its record left the history). Paged
// with HSCAN: a round trip per 250 elements, at most
// wire.MaxFailedElements of them.
func (a *Admin) FailedElements(ctx context.Context, p *broker.FailedElementsParams) (*broker.FailedElementsResult, error) {
	queue, bid := p.Queue, p.Batch
	var out wire.FailedElements
	var malformed int
	var err error
	if err := keys.CheckQueue(queue); err != nil {
		return nil, err
	}
	k := keys.FailedElements(a.prefix, queue, bid)
	byField := make(map[string]wire.FailedElement)
	var cursor uint64
	// The hash holds wire.MaxFailedElements + 1 fields at most; the bound
	// on the pages is for a key written by someone else.
	for pages := 0; pages < 4*wire.MaxFailedElements/250+4; pages++ {
		var kv []string
		kv, cursor, err = a.c.HScan(ctx, k, cursor, "", 250).Result()
		if err != nil && err != redis.Nil {
			return nil, wrap("failed elements", nil, "HSCAN", err)
		}
		for j := 0; j+1 < len(kv); j += 2 {
			if kv[j] == wire.FailedOmittedField {
				out.Omitted, _ = strconv.Atoi(kv[j+1])
				continue
			}
			f, err := wire.DecodeFailed(kv[j+1])
			if err != nil {
				malformed++
				continue
			}
			byField[kv[j]] = f
		}
		if cursor == 0 {
			break
		}
	}
	out.Elements = make([]wire.FailedElement, 0, len(byField))
	for _, f := range byField {
		out.Elements = append(out.Elements, f)
	}
	// By index, a pipeline's keys (index -1) after the elements.
	index := func(f wire.FailedElement) uint { return uint(f.Index) }
	slices.SortFunc(out.Elements, func(a, b wire.FailedElement) int {
		return cmp.Or(cmp.Compare(index(a), index(b)), cmp.Compare(a.Key, b.Key))
	})
	return &broker.FailedElementsResult{Elements: out, Malformed: malformed}, nil
}
