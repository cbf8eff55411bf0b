package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/keys"
)

// router is where the manager's sharding lives: the queue's shards, which
// shard a task goes to, and opening shards 1 and up at the first submit.
// The other parts see one queue through it.
type router struct {
	p   routerParams
	seq atomic.Uint64 // the last task sequence number handed out

	shards atomic.Pointer[[]*shard] // shard 0 alone until open

	mu     sync.Mutex
	names  []string // the names of shards 1 and up, once open
	closed bool
}

// routerParams is what a router is built from.
type routerParams struct {
	queue  string
	shards int // Options.Shards
	first  broker.Queue
	// open returns shard i of the queue, named name (redisbroker.NewShard).
	open func(name string, i int) broker.Shard
	// masters says which Cluster master has which slot (redisbroker.ClusterMasters);
	// ok is false when Redis is not a Cluster.
	masters func(ctx context.Context) (m broker.Masters, ok bool, err error)
	// opened is called with each shard the router opens, before any task
	// goes there: it starts the shard's collector.
	opened func(*shard)
	log    *slog.Logger
}

func newRouter(p routerParams) *router {
	r := &router{p: p}
	r.shards.Store(&[]*shard{newShard(p.first)})
	return r
}

// queue returns shard 0's Redis, where the queue-wide records live.
func (r *router) queue() broker.Queue { return r.p.first }

// list returns the manager's shards: shard 0 alone until the first submit
// opens the others.
func (r *router) list() []*shard { return *r.shards.Load() }

// first returns shard 0.
func (r *router) first() *shard { return r.list()[0] }

// sharded reports whether the manager's tasks go to more than one shard.
func (r *router) sharded() bool { return len(r.list()) > 1 }

// nextSeq returns the sequence number of the manager's next public task.
func (r *router) nextSeq() uint64 { return r.seq.Add(1) }

// nextPrivateSeq returns the sequence number of the manager's next task of
// a private batch (OnWorker): a multiple of the shard count, so it goes to
// shard 0. A worker registers there before any other shard (it learns of
// the others from there), so a private task is never queued where its
// worker, were it to die, would not be reaped.
func (r *router) nextPrivateSeq() uint64 {
	k := uint64(r.p.shards)
	if k == 1 {
		return r.seq.Add(1)
	}
	last := r.seq.Add(k) // reserves (last-k, last], which holds one multiple of k
	return last - last%k
}

// of returns the shard of task tid: its sequence number modulo the shard
// count, so consecutive chunks of a batch go to consecutive shards.
func (r *router) of(tid string) *shard {
	shards := r.list()
	return shards[shardIndex(tid, len(shards))]
}

// byShard groups task ids by their shard.
func (r *router) byShard(tids []string) map[*shard][]string {
	out := make(map[*shard][]string)
	for _, tid := range tids {
		s := r.of(tid)
		out[s] = append(out[s], tid)
	}
	return out
}

// tasksByShard groups tasks by their shard.
func (r *router) tasksByShard(tasks []wire.Task) map[*shard][]wire.Task {
	if shards := r.list(); len(shards) == 1 {
		return map[*shard][]wire.Task{shards[0]: tasks}
	}
	out := make(map[*shard][]wire.Task)
	for _, t := range tasks {
		s := r.of(t.ID)
		out[s] = append(out[s], t)
	}
	return out
}

// everyShard returns every shard, each with a zero T: for eachShard.
func everyShard[T any](r *router) map[*shard]T {
	out := make(map[*shard]T)
	for _, s := range r.list() {
		var zero T
		out[s] = zero
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

// outageLength returns the longest outage of any shard's Redis, or stall
// (calls that time out while Redis answers, none completing).
func (r *router) outageLength() time.Duration {
	var d time.Duration
	for _, s := range r.list() {
		d = max(d, s.outage.length(), s.outage.stall())
	}
	return d
}

// openAll opens the shards other than 0, before the manager's first
// submit: it proposes names for them (on a Cluster, names whose slots are
// on different masters: see proposeNames), takes those the queue's list of
// shard names already has (so every manager of a queue names its shards
// alike), and calls opened for each. A queue of one shard does nothing. It
// returns Redis's error as a redisCall (see feeder.openShards), ErrClosed
// once the router is closed.
func (r *router) openAll(ctx context.Context) error {
	if r.p.shards == 1 || r.sharded() {
		return nil
	}
	names, err := r.p.first.AdoptShards(ctx, &broker.ShardsParams{Names: r.proposeNames(ctx)})
	if err != nil {
		return redisCall{err}
	}
	if len(names) != r.p.shards-1 {
		return fmt.Errorf("manager: publishing the queue's shard names: Redis returned %d names, want %d", len(names), r.p.shards-1)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return redmap.ErrClosed
	}
	if r.sharded() {
		return nil // another submit opened them meanwhile
	}
	shards := []*shard{r.first()}
	for i, name := range names {
		s := newShard(r.p.open(name, i+1))
		shards = append(shards, s)
		r.p.opened(s)
	}
	r.names = names
	r.shards.Store(&shards)
	r.p.log.Info("queue spread over shards", "shards", names)
	return nil
}

// redisCall is an error Redis gave a call, for the caller to say what it
// means (faults.of).
type redisCall struct{ err error }

func (e redisCall) Error() string { return e.err.Error() }
func (e redisCall) Unwrap() error { return e.err }

// close makes openAll fail from now on, so the shards it returns are all
// the manager will have.
func (r *router) close() []*shard {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	return r.list()
}

// proposeNames returns names for shards 1 to Shards-1. On a Cluster, shard
// i is to be on the i-th master after the one holding shard 0 (masters in
// the order of their slots, round and round), so that K shards of a
// Cluster of K masters or more use K masters' cores: each name is the
// first of keys.ShardName's candidates whose slot is there. Elsewhere, or if
// the Cluster does not say its slots, keys.Shard's names.
func (r *router) proposeNames(ctx context.Context) []string {
	queue := r.p.queue
	names := make([]string, r.p.shards-1)
	for i := range names {
		names[i] = keys.Shard(queue, i+1)
	}
	cm, cluster, err := r.p.masters(ctx)
	if !cluster {
		return names
	}
	if err != nil || len(cm.Addrs) == 0 {
		r.p.log.Warn("the Cluster did not say which master has which slots; shards are named without regard to masters", "err", err)
		return names
	}
	masters, owner := cm.Addrs, cm.Owner
	first := slices.Index(masters, owner(keys.Slot(queue)))
	if first < 0 {
		return names
	}
	for i := range names {
		want := masters[(first+i+1)%len(masters)]
		for j := range 10 * keys.MaxShards {
			if name := keys.ShardName(queue, i+1, j); owner(keys.Slot(name)) == want {
				names[i] = name
				break
			}
		}
	}
	return names
}

// publish adds the manager's shard names to the queue's list, in case
// Redis lost it: workers serve what it names.
func (r *router) publish(ctx context.Context) error {
	r.mu.Lock()
	names := r.names
	r.mu.Unlock()
	if len(names) == 0 {
		return nil
	}
	_, err := r.p.first.AddShards(ctx, &broker.ShardsParams{Names: names})
	return err
}
