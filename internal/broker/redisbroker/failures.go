package redisbroker

import (
	"context"
	"fmt"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/keys"
)

// CountFailures adds the failure groups worker wid saw since its last call
// to the queue's (see failures.lua), and returns how many failures it
// added and how many malformed groups in Redis it replaced. One script
// call.
func (r *Broker) CountFailures(ctx context.Context, p *broker.CountFailuresParams) (*broker.CountFailuresResult, error) {
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
