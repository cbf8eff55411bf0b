package manager

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/rdb"
)

// shard is the manager's side of one shard of its queue (Options.Shards):
// in Redis, a task set and a result list of its own, on the shard's slot;
// here, the collector that reads them and what checks that Redis kept what
// the manager submitted there. Every guarantee (fencing, leases, recovery
// after a data loss) holds per shard, as for a queue of one.
type shard struct {
	i   int
	rdb *rdb.RDB

	// sendMu orders submits against recovery: each submit holds it for
	// reading while its script runs, recovery for writing, so recovery sees
	// no submit half done.
	sendMu sync.RWMutex
	// acked is the highest count of tasks submitted to the shard's task
	// set that a submit script has returned (see rdb.Submit). Redis's count
	// only grows while it keeps its data, so it is at least acked; below it,
	// Redis lost writes.
	acked atomic.Int64
	// lossSeen is set when a submit found Redis's count below acked, and
	// cleared when recovery has put back what was lost.
	lossSeen atomic.Bool
	// epoch names the history of the task set the manager knows (see
	// submit.lua): set by its first submit, replaced by each recovery.
	epoch atomic.Pointer[string]
	// outage is how long the shard's Redis has been unreachable: on a
	// Cluster one master may be down while the others answer.
	outage  outage
	renewAt time.Time // owned by the shard's collector
}

func newShard(r *rdb.RDB) *shard {
	s := &shard{i: r.Shard(), rdb: r}
	epoch := id.New()[:16]
	s.epoch.Store(&epoch)
	return s
}

// nextSeq returns the sequence number of the manager's next task. A task of
// a private batch (OnWorker) gets a multiple of the shard count, so it goes
// to shard 0: a worker registers there before any other shard (it learns
// of the others from there), so a private task is never queued where its
// worker, were it to die, would not be reaped.
func (m *Manager) nextSeq(private bool) uint64 {
	k := uint64(len(m.shards))
	if !private || k == 1 {
		return m.seq.Add(1)
	}
	last := m.seq.Add(k) // reserves (last-k, last], which holds one multiple of k
	return last - last%k
}

// shardOf returns the shard of task tid: its sequence number modulo the
// shard count, so consecutive chunks of a batch go to consecutive shards.
func (m *Manager) shardOf(tid string) *shard {
	if len(m.shards) == 1 {
		return m.shards[0]
	}
	seq, _ := id.Seq(tid)
	return m.shards[seq%uint64(len(m.shards))]
}

// byShard groups task ids by their shard.
func (m *Manager) byShard(tids []string) map[*shard][]string {
	out := make(map[*shard][]string, len(m.shards))
	for _, tid := range tids {
		s := m.shardOf(tid)
		out[s] = append(out[s], tid)
	}
	return out
}

// tasksByShard groups tasks by their shard.
func (m *Manager) tasksByShard(tasks []rdb.Task) map[*shard][]rdb.Task {
	if len(m.shards) == 1 {
		return map[*shard][]rdb.Task{m.shards[0]: tasks}
	}
	out := make(map[*shard][]rdb.Task, len(m.shards))
	for _, t := range tasks {
		s := m.shardOf(t.ID)
		out[s] = append(out[s], t)
	}
	return out
}

// eachShard runs f for every shard that has tasks in groups, at once if
// there are several (each shard may be a different Redis core), and
// returns their errors joined.
func eachShard[T any](groups map[*shard]T, f func(*shard, T) error) error {
	if len(groups) == 1 {
		for s, g := range groups {
			return f(s, g)
		}
	}
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for s, g := range groups {
		wg.Go(func() {
			if err := f(s, g); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(errs) == 1 {
		return errs[0] // its type intact: a *redmap.CommandError, say
	}
	return errors.Join(errs...)
}

// outageLength returns the longest outage of any shard's Redis.
func (m *Manager) outageLength() time.Duration {
	var d time.Duration
	for _, s := range m.shards {
		d = max(d, s.outage.length())
	}
	return d
}

// publishShards tells workers, through shard 0, how many shards the
// manager spreads its tasks over: before its first submit, and every Poll
// (Redis may have lost it). A queue of one shard says nothing.
func (m *Manager) publishShards(ctx context.Context) error {
	if len(m.shards) == 1 {
		return nil
	}
	if err := m.rdb.PublishShards(ctx, len(m.shards)); err != nil {
		return err
	}
	m.shardsSaid.Store(true)
	return nil
}
