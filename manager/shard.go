package manager

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/keys"
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
	k := uint64(m.opts.Shards)
	if !private || k == 1 {
		return m.seq.Add(1)
	}
	last := m.seq.Add(k) // reserves (last-k, last], which holds one multiple of k
	return last - last%k
}

// shardOf returns the shard of task tid: its sequence number modulo the
// shard count, so consecutive chunks of a batch go to consecutive shards.
func (m *Manager) shardOf(tid string) *shard {
	shards := m.shardList()
	if len(shards) == 1 {
		return shards[0]
	}
	seq, _ := id.Seq(tid)
	return shards[seq%uint64(len(shards))]
}

// shardList returns the manager's shards: shard 0 alone until the first
// submit opens the others.
func (m *Manager) shardList() []*shard { return *m.shards.Load() }

// byShard groups task ids by their shard.
func (m *Manager) byShard(tids []string) map[*shard][]string {
	out := make(map[*shard][]string)
	for _, tid := range tids {
		s := m.shardOf(tid)
		out[s] = append(out[s], tid)
	}
	return out
}

// tasksByShard groups tasks by their shard.
func (m *Manager) tasksByShard(tasks []rdb.Task) map[*shard][]rdb.Task {
	if shards := m.shardList(); len(shards) == 1 {
		return map[*shard][]rdb.Task{shards[0]: tasks}
	}
	out := make(map[*shard][]rdb.Task)
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
	for _, s := range m.shardList() {
		d = max(d, s.outage.length())
	}
	return d
}

// openShards opens the manager's shards other than 0, before its first
// submit: it proposes names for them (on a Cluster, names whose slots are
// on different masters: see proposeNames), takes those the queue's list of
// shard names already has (so every manager of a queue names its shards
// alike), and starts their collectors. A queue of one shard does nothing.
func (m *Manager) openShards(ctx context.Context) error {
	if m.opts.Shards == 1 || len(m.shardList()) > 1 {
		return nil
	}
	started := time.Now()
	names, err := m.rdb.PublishShards(ctx, true, m.proposeNames(ctx))
	if err != nil {
		return m.redisError("publishing the queue's shard names", started, err)
	}
	if len(names) != m.opts.Shards-1 {
		return fmt.Errorf("manager: publishing the queue's shard names: Redis returned %d names, want %d", len(names), m.opts.Shards-1)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return redmap.ErrClosed
	}
	if len(m.shardList()) > 1 {
		return nil // another submit opened them meanwhile
	}
	shards := []*shard{m.shardList()[0]}
	for i, name := range names {
		s := newShard(rdb.NewShard(m.client, m.opts.Prefix, name, i+1))
		shards = append(shards, s)
		m.collectors.Go(func() { m.collect(m.ctx, s) })
	}
	m.names = names
	m.shards.Store(&shards)
	m.log.Info("queue spread over shards", "shards", names)
	return nil
}

// proposeNames returns names for shards 1 to Shards-1. On a Cluster, shard
// i is to be on the i-th master after the one holding shard 0 (masters in
// the order of their slots, round and round), so that K shards of a
// Cluster of K masters or more use K masters' cores: each name is the
// first of keys.ShardName's candidates whose slot is there. Elsewhere, or if
// the Cluster does not say its slots, keys.Shard's names.
func (m *Manager) proposeNames(ctx context.Context) []string {
	names := make([]string, m.opts.Shards-1)
	for i := range names {
		names[i] = keys.Shard(m.opts.Queue, i+1)
	}
	cm, cluster, err := rdb.ClusterMasters(ctx, m.client)
	if !cluster {
		return names
	}
	if err != nil || len(cm.Addrs) == 0 {
		m.log.Warn("the Cluster did not say which master has which slots; shards are named without regard to masters", "err", err)
		return names
	}
	masters, owner := cm.Addrs, cm.Owner
	first := slices.Index(masters, owner(keys.Slot(m.opts.Queue)))
	if first < 0 {
		return names
	}
	for i := range names {
		want := masters[(first+i+1)%len(masters)]
		for j := range 10 * keys.MaxShards {
			if name := keys.ShardName(m.opts.Queue, i+1, j); owner(keys.Slot(name)) == want {
				names[i] = name
				break
			}
		}
	}
	return names
}

// publishShards adds the manager's shard names to the queue's list, every
// Poll, in case Redis lost it: workers serve what it names.
func (m *Manager) publishShards(ctx context.Context) error {
	if len(m.shardList()) == 1 {
		return nil
	}
	_, err := m.rdb.PublishShards(ctx, false, m.names)
	return err
}
