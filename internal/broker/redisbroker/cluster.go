package redisbroker

import (
	"context"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/broker"
)

// ClusterMasters reads the map of slots to masters of c if it is a Cluster
// client; ok is false if it is not. One round trip.
func ClusterMasters(ctx context.Context, c redis.UniversalClient) (m broker.Masters, ok bool, err error) {
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		return m, false, nil
	}
	//lint:ignore SA1019 CLUSTER SHARDS came in Redis 7.0; redmap runs on 6.2 (MinVersion)
	ranges, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		return m, true, wrap("cluster slots", nil, "CLUSTER SLOTS", err)
	}
	slices.SortFunc(ranges, func(a, b redis.ClusterSlot) int { return a.Start - b.Start })
	for _, r := range ranges {
		if len(r.Nodes) == 0 {
			m.Slots = append(m.Slots, broker.SlotRange{Start: r.Start, End: r.End})
			continue
		}
		addr := r.Nodes[0].Addr
		m.Slots = append(m.Slots, broker.SlotRange{Start: r.Start, End: r.End, Addr: addr})
		if !slices.Contains(m.Addrs, addr) {
			m.Addrs = append(m.Addrs, addr)
		}
	}
	return m, true, nil
}
