package redisbroker

import (
	"context"
	"slices"

	"github.com/redis/go-redis/v9"
)

// Masters is a Cluster's map of slots to masters, as CLUSTER SLOTS says it.
type Masters struct {
	ranges []redis.ClusterSlot // sorted by first slot
	// Addrs are the masters' addresses, in the order of their first slot.
	Addrs []string
}

// ClusterMasters reads the map of slots to masters of c if it is a Cluster
// client; ok is false if it is not. One round trip.
func ClusterMasters(ctx context.Context, c redis.UniversalClient) (m Masters, ok bool, err error) {
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
	m.ranges = ranges
	for _, r := range ranges {
		if len(r.Nodes) > 0 && !slices.Contains(m.Addrs, r.Nodes[0].Addr) {
			m.Addrs = append(m.Addrs, r.Nodes[0].Addr)
		}
	}
	return m, true, nil
}

// Owner returns the address of the master serving slot, or "".
func (m Masters) Owner(slot int) string {
	i, _ := slices.BinarySearchFunc(m.ranges, slot, func(r redis.ClusterSlot, s int) int {
		switch {
		case r.End < s:
			return -1
		case r.Start > s:
			return 1
		}
		return 0
	})
	if i < len(m.ranges) && m.ranges[i].Start <= slot && slot <= m.ranges[i].End && len(m.ranges[i].Nodes) > 0 {
		return m.ranges[i].Nodes[0].Addr
	}
	return ""
}
