package manager_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/keys"
)

// stallProbe returns a function that says, from what Redis holds, where the
// outstanding tasks of manager mid of queue are: queued (in a lane of the
// public rings), held by a worker (and whether that worker's lease has
// lapsed, by the Redis clock), in a worker's private list, or nowhere (not
// queued, not held: a take whose reply was lost settles at the worker's
// next heartbeat; a result not yet read is counted apart). A chaos run calls
// it each second of a stall, so the report says what a stalled batch waited
// on, shard by shard.
func stallProbe(c redis.UniversalClient, queue string, mid func() string) func() string {
	return func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		names, err := c.LRange(ctx, keys.ShardNames("redmap", queue), 0, -1).Result()
		if err != nil {
			return "probe: " + err.Error()
		}
		names = append([]string{queue}, names...)
		slices.Sort(names)
		names = slices.Compact(names)
		now, err := c.Time(ctx).Result()
		if err != nil {
			return "probe: " + err.Error()
		}
		var out []string
		for _, name := range names {
			s, err := probeShard(ctx, c, name, mid(), now)
			if err != nil {
				s = "probe: " + err.Error()
			}
			if s != "" {
				out = append(out, name+": "+s)
			}
		}
		return strings.Join(out, "; ")
	}
}

// probeShard is stallProbe's report of one shard; "" if the manager has no
// task outstanding there.
func probeShard(ctx context.Context, c redis.UniversalClient, name, mid string, now time.Time) (string, error) {
	tids, err := c.HKeys(ctx, keys.Tasks("redmap", name, mid)).Result()
	if err != nil || len(tids) == 0 {
		return "", err
	}
	outstanding := make(map[string]bool, len(tids))
	for _, tid := range tids {
		outstanding[tid] = true
	}
	where := map[string]string{}
	// Queued: the lanes of every ring.
	for _, ring := range keys.Rings("redmap", name) {
		lanes, err := c.LRange(ctx, ring, 0, -1).Result()
		if err != nil {
			return "", err
		}
		for _, lane := range lanes {
			ids, err := c.LRange(ctx, keys.Lane("redmap", name, lane), 0, -1).Result()
			if err != nil {
				return "", err
			}
			for _, id := range ids {
				if outstanding[id] {
					where[id] = "queued"
				}
			}
		}
	}
	// Held or private: every worker of the shard, with its lease.
	ws, err := c.ZRangeWithScores(ctx, keys.Workers("redmap", name), 0, -1).Result()
	if err != nil {
		return "", err
	}
	for _, w := range ws {
		wid := w.Member.(string)
		lease := time.UnixMilli(int64(w.Score)).Sub(now)
		state := "live"
		if lease < 0 {
			state = fmt.Sprintf("lease lapsed %.1fs ago", -lease.Seconds())
		}
		held, err := c.SMembers(ctx, keys.Held("redmap", name, wid)).Result()
		if err != nil {
			return "", err
		}
		for _, id := range held {
			if outstanding[id] && where[id] == "" {
				where[id] = "held by " + wid[:min(8, len(wid))] + " (" + state + ")"
			}
		}
		private, err := c.LRange(ctx, keys.Private("redmap", name, wid), 0, -1).Result()
		if err != nil {
			return "", err
		}
		for _, id := range private {
			if outstanding[id] && where[id] == "" {
				where[id] = "private of " + wid[:min(8, len(wid))]
			}
		}
	}
	attempts, err := c.HGetAll(ctx, keys.Attempts("redmap", name, mid)).Result()
	if err != nil {
		return "", err
	}
	results, err := c.LLen(ctx, keys.Results("redmap", name, mid)).Result()
	if err != nil {
		return "", err
	}
	counts := map[string]int{}
	retried := 0
	for _, tid := range tids {
		w := where[tid]
		if w == "" {
			w = "nowhere"
		}
		counts[w]++
		if n, _ := strconv.Atoi(attempts[tid]); n > 0 {
			retried++
		}
	}
	parts := make([]string, 0, len(counts))
	for w, n := range counts {
		parts = append(parts, fmt.Sprintf("%d %s", n, w))
	}
	sort.Strings(parts)
	return fmt.Sprintf("%d outstanding (%d with an attempt counted): %s; %d results unread",
		len(tids), retried, strings.Join(parts, ", "), results), nil
}
