package manager

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/broker"
)

// stragglerBatch returns a batch of n one-element tasks, all submitted, with
// backups on, its tasks named t0, t1, ... in lane order.
func stragglerBatch(n int) *Batch[int] {
	b := newBatch[int](batchEnv{backups: &backupCounts{}}, 1, "f", n, nil, false)
	b.bk.on = true
	for i := range n {
		b.feed.add(chunk{start: i, count: 1, tid: fmt.Sprintf("m-%d,1.1", i+1)})
	}
	return b
}

// finish ends chunk ci as the collector would, a result of a run of d
// that arrived at now.
func (b *Batch[Out]) finishAt(ci int, d time.Duration, now time.Time, backup bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.backupEnded(ci, &codec.Result{Nanos: d.Nanoseconds(), Backup: backup})
	b.feed.chunks[ci].began = now.Add(-d)
	b.feed.chunks[ci].over = true
	b.feed.settle(b.feed.chunks[ci])
}

// The rule of docs/programming.md, "Stragglers": a task is copied only
// once every task is submitted and at most the copy budget may still wait;
// only a task queued before one that finished, held past twice the median
// run (at least a second); the longest held first, a tenth of the tasks at
// most, never twice.
func TestBackupRule(t *testing.T) {
	now := time.Now()
	const n = 20
	b := stragglerBatch(n)
	ids := func(tids []string) []int {
		var out []int
		for _, tid := range tids {
			ci, _ := b.chunkOf(tid)
			out = append(out, ci)
		}
		slices.Sort(out)
		return out
	}
	// Tasks 2.. finish in turn, each run 100 ms, task i+2 at now-10s+i*100ms;
	// tasks 0 and 1 (a slow worker's) never do, nor 18 and 19 (the last:
	// they may still wait).
	if got := b.dueBackups(now, 1); got != nil {
		t.Fatalf("copies %v before any task finished", got)
	}
	for ci := 2; ci < n-2; ci++ {
		b.finishAt(ci, 100*time.Millisecond, now.Add(-10*time.Second+time.Duration(ci)*100*time.Millisecond), false)
	}
	got := ids(b.dueBackups(now, 1))
	if !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("copies of tasks %v; want 0 and 1, held ~10 s, and not 18, 19, which may still wait", got)
	}
	// The budget is a tenth of 20: 2. Both queued, nothing more is asked.
	b.backupsQueued([]broker.Backup{{Task: b.feed.chunks[0].tid, State: broker.BackupQueued, Holder: "slow"},
		{Task: b.feed.chunks[1].tid, State: broker.BackupQueued, Holder: "slow"}})
	if got := b.dueBackups(now.Add(time.Minute), 1); got != nil {
		t.Fatalf("copies %v past the budget of 2", got)
	}
	// Task 0's copy wins; task 1's original does.
	b.finishAt(0, 100*time.Millisecond, now, true)
	b.finishAt(1, 10*time.Second, now, false)
	if c := b.bk.counts; c.Started != 2 || c.Won != 1 || c.Wasted != 1 {
		t.Fatalf("counts %+v, want 2 started, 1 won, 1 wasted", c)
	}
	if races := b.env.backups.takeRaces(); len(races) != 2 || !races[0].Lost || races[1].Lost || races[0].Worker != "slow" {
		t.Fatalf("races %+v, want slow lost one, won one", races)
	}

	// A batch whose tail is held under the bar gets none; one with more
	// tasks that may still wait than its budget neither.
	b = stragglerBatch(n)
	for ci := 2; ci < n; ci++ {
		b.finishAt(ci, 400*time.Millisecond, now.Add(-400*time.Millisecond), false)
	}
	if got := b.dueBackups(now, 1); got != nil {
		t.Fatalf("copies %v of tasks held 800 ms, under the 1 s floor", got)
	}
	if got := b.dueBackups(now.Add(time.Second), 1); len(got) != 2 {
		t.Fatalf("copies %v of tasks held 1.8 s, want both", got)
	}
	b = stragglerBatch(n)
	for ci := 2; ci < 10; ci++ {
		b.finishAt(ci, 100*time.Millisecond, now.Add(-time.Minute), false)
	}
	if got := b.dueBackups(now, 1); got != nil {
		t.Fatalf("copies %v while 10 tasks may still wait", got)
	}
	// On two shards, a task is known taken only by a later one of its own
	// shard: odd sequence numbers are shard 1, even ones shard 0.
	b = stragglerBatch(n)
	for ci := 1; ci < n-1; ci++ {
		if ci != 17 {
			b.finishAt(ci, 100*time.Millisecond, now.Add(-time.Minute), false)
		}
	}
	if got := ids(b.dueBackups(now, 2)); !slices.Equal(got, []int{0}) {
		t.Fatalf("copies of tasks %v on two shards; want 0 only (17 has no later task of its shard that finished)", got)
	}
}

// A copy whose result comes before the reply of the call that queued it
// (its idle worker was rung at once) is counted started and won while the
// batch runs, once; the reply then records the race against the holder,
// and counts nothing again. A copy whose original's result came before
// the reply is counted wasted with the reply.
func TestBackupWonBeforeQueuedNoted(t *testing.T) {
	b := stragglerBatch(4)
	now := time.Now()
	b.finishAt(0, 10*time.Millisecond, now, true)
	if got := b.Progress().Backups; got.Started != 1 || got.Won != 1 || got.Wasted != 0 {
		t.Fatalf("after the copy's result: %+v; want 1 started, 1 won", got)
	}
	b.backupsQueued([]broker.Backup{{Task: b.feed.chunks[0].tid, State: broker.BackupQueued, Holder: "slow"}})
	if got := b.Progress().Backups; got.Started != 1 || got.Won != 1 || got.Wasted != 0 {
		t.Fatalf("after the reply: %+v; want 1 started, 1 won, still", got)
	}
	if st := b.env.backups; st.started.Load() != 1 || st.won.Load() != 1 {
		t.Fatalf("the manager's counts: started %d, won %d; want 1, 1", st.started.Load(), st.won.Load())
	}
	if races := b.env.backups.takeRaces(); !slices.Equal(races, []broker.Race{{Worker: "slow", Lost: true}}) {
		t.Fatalf("races %+v; want slow's, lost", races)
	}

	// The original's result before the reply: the copy is wasted at once.
	b.finishAt(1, 10*time.Millisecond, now, false)
	b.backupsQueued([]broker.Backup{{Task: b.feed.chunks[1].tid, State: broker.BackupQueued, Holder: "slow"}})
	if got := b.Progress().Backups; got.Started != 2 || got.Won != 1 || got.Wasted != 1 {
		t.Fatalf("after the original's result, then the reply: %+v; want 2 started, 1 won, 1 wasted", got)
	}
	if races := b.env.backups.takeRaces(); !slices.Equal(races, []broker.Race{{Worker: "slow", Lost: false}}) {
		t.Fatalf("races %+v; want slow's, won", races)
	}
}
