package manager_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
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
	// The set's own fields (the count "_", the epoch "_e") are no tasks.
	tids = slices.DeleteFunc(tids, func(tid string) bool { return strings.HasPrefix(tid, "_") })
	if len(tids) == 0 {
		return "", nil
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
	// Not queued, held or private: look in every held set (of workers the
	// workers set no longer lists too) and in lanes no ring lists.
	var nowhere []string
	for _, tid := range tids {
		if where[tid] == "" {
			nowhere = append(nowhere, tid)
		}
	}
	if len(nowhere) > 0 {
		helds, err := scanAll(ctx, c, keys.Glob(keys.Base("redmap", name))+"w:*:held")
		if err != nil {
			return "", err
		}
		for _, k := range helds {
			for _, tid := range nowhere {
				if where[tid] == "" && (c.SIsMember(ctx, k, tid).Val() || c.SIsMember(ctx, k, "!"+tid).Val()) {
					wid := strings.TrimSuffix(strings.TrimPrefix(k, keys.Base("redmap", name)+"w:"), ":held")
					where[tid] = "held by unlisted " + wid[:min(8, len(wid))]
				}
			}
		}
	}
	attempts, err := c.HGetAll(ctx, keys.Attempts("redmap", name, mid)).Result()
	if err != nil {
		return "", err
	}
	// The manager's lanes: length, listed in a ring or not, what they call,
	// the attempt of the task at the head.
	lanes, err := c.HGetAll(ctx, keys.Lanes("redmap", name, mid)).Result()
	if err != nil {
		return "", err
	}
	inRing := map[string]bool{}
	for _, ring := range keys.Rings("redmap", name) {
		for _, l := range c.LRange(ctx, ring, 0, -1).Val() {
			inRing[l] = true
		}
	}
	var laneNotes []string
	for lane, calls := range lanes {
		full := mid + "." + lane
		ids := c.LRange(ctx, keys.Lane("redmap", name, full), 0, -1).Val()
		if len(ids) == 0 {
			continue
		}
		if !inRing[full] {
			for _, id := range ids {
				if outstanding[id] && where[id] == "" {
					where[id] = "in a lane no ring lists"
				}
			}
		}
		laneNotes = append(laneNotes, fmt.Sprintf("lane %s (%q) %d ids, ringed %v, head attempt %q",
			lane, calls, len(ids), inRing[full], attempts[ids[0]]))
	}
	sort.Strings(laneNotes)
	idle := c.SMembers(ctx, keys.Idle("redmap", name)).Val()
	var workerNotes []string
	for _, w := range ws {
		wid := w.Member.(string)
		workerNotes = append(workerNotes, fmt.Sprintf("%s holds %d", wid[:min(8, len(wid))], c.SCard(ctx, keys.Held("redmap", name, wid)).Val()))
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
	return fmt.Sprintf("%d outstanding (%d with an attempt counted): %s; %d results unread; %s; workers %s; idle %d",
		len(tids), retried, strings.Join(parts, ", "), results, strings.Join(laneNotes, "; "), strings.Join(workerNotes, ", "), len(idle)), nil
}

// scanAll returns the keys matching pattern, on every master of a Cluster.
func scanAll(ctx context.Context, c redis.UniversalClient, pattern string) ([]string, error) {
	var (
		mu  sync.Mutex
		out []string
	)
	scan := func(ctx context.Context, c redis.Cmdable) error {
		it := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for it.Next(ctx) {
			mu.Lock()
			out = append(out, it.Val())
			mu.Unlock()
		}
		return it.Err()
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
		return out, err
	}
	return out, scan(ctx, c)
}
