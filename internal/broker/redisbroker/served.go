package redisbroker

import (
	"context"
	"fmt"
	"strings"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/keys"
)

// Served says, for what each of some batches calls (see Calls), whether a
// live worker of the queue registered it all with the same signatures, by
// the Redis clock and the workers' heartbeats. One script call.
func (r *Broker) Served(ctx context.Context, p *broker.ServedParams) ([]wire.Serving, error) {
	calls := p.Calls
	args := make([]any, 0, 1+len(calls))
	args = append(args, r.base)
	for _, c := range calls {
		args = append(args, c)
	}
	v, err := servedScript.run(ctx, r.c, []string{keys.Workers(r.prefix, r.queue)}, args...).Slice()
	if err != nil {
		return nil, wrap("served", servedScript, "", err)
	}
	if len(v) != 2*len(calls)+1 {
		return nil, fmt.Errorf("served: script returned %d values for %d batches", len(v), len(calls))
	}
	mark, paused := v[len(v)-1].(string)
	var since int64
	if paused {
		if p, err := wire.DecodePause(mark); err == nil {
			since = p.Since
		}
	}
	out := make([]wire.Serving, len(calls))
	for i := range out {
		code, _ := v[2*i].(int64)
		detail, _ := v[2*i+1].(string)
		name, sig, _ := strings.Cut(detail, "\t")
		out[i] = wire.Serving{Code: int(code), Name: name, Signature: sig, Paused: paused, PausedSince: since}
	}
	return out, nil
}
