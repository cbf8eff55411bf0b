package redisbroker

import (
	"context"
	"strings"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/keys"
)

// Unwanted returns those of p.Tasks that their managers no longer want,
// and those of them a backup's race ended. One script call.
func (r *Broker) Unwanted(ctx context.Context, p *broker.UnwantedParams) (*broker.UnwantedResult, error) {
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
	res := &broker.UnwantedResult{Tasks: out}
	for i, tid := range out {
		if t, ok := strings.CutPrefix(tid, "+"); ok {
			out[i] = t
			res.Outrun = append(res.Outrun, t)
		}
	}
	return res, nil
}
