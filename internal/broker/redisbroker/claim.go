package redisbroker

import (
	"context"
	"fmt"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/keys"
)

// Claim takes, renews or (a Lease of 0) releases c.Holder's claim on
// durable batch c.Owner: a claim whose record is exactly c.Steal (not "")
// is taken over. A claim taken gets the next token of the batch and becomes
// its fence (keys.Fence); one renewed or released is c.Fence, the record a
// Claim that took it returned, and is refused with a *FencedError once
// another claim was taken since. Taken or renewed, the batch's entry in the
// queue's list of durable batches expires c.TTL from now. It returns
// whether c.Holder holds the claim now and the claim's record: its own, or
// another holder's. One script call.
func (r *Broker) Claim(ctx context.Context, c *broker.ClaimParams) (*wire.Claimed, error) {
	ms := c.Lease.Milliseconds()
	if c.Lease > 0 {
		ms = max(ms, 1)
	}
	ks := []string{keys.Claim(r.prefix, r.queue, c.Owner), keys.Durables(r.prefix, r.queue), keys.Fence(r.prefix, r.queue, c.Owner)}
	vals, err := claimScript.run(ctx, r.c, ks, c.Holder.Manager, wire.EncodeHolder(c.Holder), ms, c.Steal,
		c.Owner, max(c.TTL.Milliseconds(), 1), c.Name, c.Fence).Slice()
	if err != nil {
		return nil, wrap("claim a durable batch", claimScript, "", err)
	}
	if len(vals) != 2 {
		return nil, fmt.Errorf("claim a durable batch: %d values in the reply, want 2", len(vals))
	}
	n, _ := vals[0].(int64)
	s, _ := vals[1].(string)
	got := wire.Claimed{Held: n == 1, Record: s}
	if s == "" { // released
		return &got, nil
	}
	if got.Holder, err = wire.DecodeHolder(s); err != nil {
		return nil, fmt.Errorf("claim a durable batch: %w", err)
	}
	return &got, nil
}
