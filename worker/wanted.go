package worker

import (
	"context"
	"sync"
	"time"
)

// wantedCheck asks Redis which of the tasks waiting to run their managers no
// longer want. One round trip answers for every waiting task no check has
// asked about yet (or not for recheckAfter), so a task is asked about about
// once in the usual wait of a prefetch (about 10 ms of work a slot): asking
// again about every waiting task whenever one had waited past stale cost
// Redis ten HEXISTS a task of 1 ms with 80 waiting (issue 42's scale
// model, where it was two thirds of Redis's time).
type wantedCheck struct {
	mu      sync.Mutex
	asked   map[string]time.Time // waiting tasks asked about, and when
	dropped map[string]bool      // those the answer said are no longer wanted
}

// recheckAfter is how long an answer that a waiting task is wanted holds:
// a task that waits longer is asked about again before it runs. A batch
// cancelled less than this before one of its prefetched tasks starts may
// have that task run (its result is discarded); the prefetch holds about
// 10 ms of work a slot, so a task is asked about once. Each worker checks
// about once per recheckAfter while its tasks wait, so Redis gets
// workers/recheckAfter checks a second: with 1 ms tasks on workers of 8
// slots, an answer of 1 ms (as when every check asked about every waiting
// task) had 16 workers run 4,000 tasks/s at 150 µs of Redis CPU a task,
// one of 10 ms had 64 workers run 3,600 at 140 µs; 100 ms keeps the
// checks to a few hundred a second.
const recheckAfter = 100 * time.Millisecond

// unwanted reports whether j's manager no longer wants it: by the answer
// of a check that asked about it after it was taken, no longer than
// recheck (recheckAfter) ago, else by a new check, of j and every waiting task not
// asked about since. On an error it reports false: the task runs, and its
// result is discarded if unwanted. Each job is looked up once: its entry
// goes.
func (c *wantedCheck) unwanted(ctx context.Context, e *executors, j job) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.asked == nil {
		c.asked, c.dropped = make(map[string]time.Time), make(map[string]bool)
	}
	defer func() { delete(c.asked, j.ID); delete(c.dropped, j.ID) }()
	now := time.Now()
	if at, ok := c.asked[j.ID]; ok && at.After(j.takenAt) && now.Sub(at) <= e.recheck {
		return c.dropped[j.ID]
	}
	ask := map[int][]string{j.Shard: {j.ID}}
	waiting := e.held.waiting()
	var n int // tasks waiting
	for shard, ids := range waiting {
		n += len(ids)
		for _, tid := range ids {
			if at, ok := c.asked[tid]; (!ok || now.Sub(at) > e.recheck) && tid != j.ID {
				ask[shard] = append(ask[shard], tid)
			}
		}
	}
	unwanted, err := e.source.unwanted(ctx, ask)
	if err != nil {
		return false
	}
	for _, ids := range ask {
		for _, tid := range ids {
			c.asked[tid] = now
			delete(c.dropped, tid)
		}
	}
	for _, tid := range unwanted.Tasks {
		c.dropped[tid] = true
	}
	// Tasks no longer waiting (run unlooked-up, or given back) leave no
	// entry behind for long.
	if len(c.asked) > 2*n+64 {
		still := make(map[string]bool, n)
		for _, ids := range waiting {
			for _, tid := range ids {
				still[tid] = true
			}
		}
		for tid := range c.asked {
			if !still[tid] {
				delete(c.asked, tid)
				delete(c.dropped, tid)
			}
		}
	}
	return c.dropped[j.ID]
}
