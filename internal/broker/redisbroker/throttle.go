package redisbroker

import (
	"context"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/keys"
)

// Throttle pauses function fn's rate for d, if its limit in force has one
// (see throttle.lua): its element's service answered redmap.RetryAfter(d).
// It reports whether it did. One script call.
func (r *Broker) Throttle(ctx context.Context, p *broker.ThrottleParams) (bool, error) {
	fn, d := p.Func, p.Quiet
	n, err := throttleScript.run(ctx, r.c, []string{keys.Limits(r.prefix, r.queue), keys.LimitState(r.prefix, r.queue)},
		fn, d.Milliseconds()).Int()
	if err != nil {
		return false, wrap("throttle", throttleScript, "", err)
	}
	return n == 1, nil
}
