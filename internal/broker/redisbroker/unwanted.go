package redisbroker

import (
	"context"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/keys"
)

// Unwanted returns those of tids that their managers no longer want. One
// script call.
func (r *Broker) Unwanted(ctx context.Context, p *broker.UnwantedParams) ([]string, error) {
	wid, tids := p.Worker, p.Tasks
	args := make([]any, 0, 1+len(tids))
	args = append(args, r.base)
	for _, t := range tids {
		args = append(args, t)
	}
	out, err := unwantedScript.run(ctx, r.c, []string{keys.Held(r.prefix, r.queue, wid)}, args...).StringSlice()
	if err != nil {
		return nil, wrap("unwanted", unwantedScript, "", err)
	}
	return out, nil
}
