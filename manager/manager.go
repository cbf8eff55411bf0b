// Package manager submits batches to a redmap queue and collects their
// results. A Manager is a value inside a user's program; Map, MapWith and
// Submit are package-level generic functions because Go methods cannot have
// type parameters.
package manager

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/cache"
	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/rdb"
)

// collectMax caps the results read from Redis in one round trip.
const collectMax = 1024

// Manager submits batches to one queue and collects their results. It has a
// random 128-bit id, its own task set and its own result list. It is safe for
// concurrent use by many goroutines and many batches.
type Manager struct {
	id     string
	rdb    *rdb.RDB // shard 0's: where the queue-wide records live
	client redis.UniversalClient
	opts   Options
	// shards holds shard 0 until the first submit opens the others
	// (openShards); each has a collector.
	shards     atomic.Pointer[[]*shard]
	names      []string        // the names of shards 1 and up, once open
	ctx        context.Context // the collectors'
	collectors sync.WaitGroup  // collectors running
	log        *slog.Logger

	seq      atomic.Uint64
	holdSeq  atomic.Uint64
	batchSeq atomic.Uint64
	store    *cache.Store

	mu       sync.Mutex
	pending  map[string]pending // task id → where its result goes
	holds    map[string]hold    // holder → the constant a running batch holds
	batches  map[string]batch   // id → running batch, for operators
	finished map[string]batch   // id → batch ended since the last publish
	closed   bool

	stop    context.CancelFunc
	stopped chan struct{}  // closed when every shard's collector has returned
	feeders sync.WaitGroup // batches' feeders still submitting

	probed atomic.Bool // Redis allowed every command redmap needs (see ready)
	typed  sync.Map    // signatures whose types are published (see publishTypes)

	costMu      sync.Mutex
	costs       map[string]float64 // function name → nanoseconds per element, smoothed
	dropped     atomic.Int64       // results discarded as stale, duplicate or unreadable
	ended       atomic.Int64       // elements that ended (a value or an error), all batches
	endedSaid   int64              // ended, as the last publish counted it (owned by shard 0's collector)
	resultBytes atomic.Int64       // bytes of results read

	hooks hooks // given by tests to newManager; all nil otherwise
}

// hooks are what a test of the package injects (newManager). Each is nil in
// use.
type hooks struct {
	send    func() // before each submit script is sent
	checked func() // after each check for lost data
}

// pending is an outstanding task: the batch that waits for it and the index of
// its chunk in that batch.
type pending struct {
	batch batch
	chunk int
}

// batch is the untyped face of a *Batch the collector delivers to.
type batch interface {
	deliver(chunk int, r *codec.Result, err error)
	fail(chunk, attempt int, cause error)
	abort(err error)
	resubmission(chunk int) (rdb.Task, string, error)
	snapshot() Progress
	function() (name string, public bool)
	served(ok bool, now time.Time, timeout time.Duration, why string) (began, expired bool)
	failWaiting(cause error)
}

// New returns a manager of client for opts.Queue and starts its result
// collector. It validates opts and returns an error naming the first bad
// field. Close it to release its goroutine and its keys in Redis.
func New(client redis.UniversalClient, opts Options) (*Manager, error) {
	return newManager(client, opts, hooks{})
}

// newManager is New with a test's hooks, in place before the collector
// starts.
func newManager(client redis.UniversalClient, opts Options, h hooks) (*Manager, error) {
	if client == nil {
		return nil, errors.New("manager: nil Redis client")
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	mid := id.New()
	ctx, stop := context.WithCancel(context.Background())
	s0 := newShard(rdb.New(client, opts.Prefix, opts.Queue))
	m := &Manager{
		hooks:    h,
		id:       mid,
		rdb:      s0.rdb,
		client:   client,
		ctx:      ctx,
		opts:     opts,
		log:      opts.Logger.With("manager", mid, "queue", opts.Queue),
		store:    cache.NewStore(client, opts.Prefix, opts.PartSize),
		pending:  make(map[string]pending),
		holds:    make(map[string]hold),
		batches:  make(map[string]batch),
		finished: make(map[string]batch),
		costs:    make(map[string]float64),
		stop:     stop,
		stopped:  make(chan struct{}),
	}
	m.shards.Store(&[]*shard{s0})
	m.collectors.Go(func() { m.collect(ctx, s0) })
	go func() {
		m.collectors.Wait()
		close(m.stopped)
	}()
	return m, nil
}

// ID returns the manager's id.
func (m *Manager) ID() string { return m.id }

// Workers returns the ids of the queue's live workers, for OnWorker. One
// round trip.
func (m *Manager) Workers(ctx context.Context) ([]string, error) {
	started := time.Now()
	ids, err := m.rdb.LiveWorkers(ctx)
	if err != nil {
		return nil, m.redisError("listing workers", started, err)
	}
	return ids, nil
}

// Dropped returns how many results the manager has discarded because no
// pending task wanted them (stale, duplicate or unreadable).
func (m *Manager) Dropped() int64 { return m.dropped.Load() }

// ResultBytes returns the bytes of results the manager has read from Redis:
// what its batches' outputs (or, for MapReduce, partials) cost to bring back.
func (m *Manager) ResultBytes() int64 { return m.resultBytes.Load() }

// Close ends every batch still running with ErrClosed, withdraws their tasks,
// stops the collector (within one Poll) and deletes the manager's keys. It is
// safe to call more than once.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	outstanding := m.pending
	m.pending = nil
	m.mu.Unlock()

	tids := make([]string, 0, len(outstanding))
	seen := make(map[batch]bool)
	for tid, p := range outstanding {
		tids = append(tids, tid)
		if !seen[p.batch] {
			seen[p.batch] = true
			p.batch.abort(redmap.ErrClosed)
		}
	}
	m.feeders.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m.stop()
	// Wake the collectors from their waits rather than wait out their
	// timeout. If Redis is unreachable they are not blocked there anyway.
	for _, s := range m.shardList() {
		_ = s.rdb.WakeCollector(ctx, m.id)
	}
	<-m.stopped
	groups := m.byShard(tids)
	for _, s := range m.shardList() {
		if _, ok := groups[s]; !ok {
			groups[s] = nil // dropped all the same
		}
	}
	return eachShard(groups, func(s *shard, tids []string) error {
		return errors.Join(s.rdb.Cancel(ctx, m.id, tids), s.rdb.Drop(ctx, m.id))
	})
}

// register records the tasks of b as pending, the first one as chunk first
// of b; it fails once the manager is closed.
func (m *Manager) register(b batch, tids []string, first int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return redmap.ErrClosed
	}
	for i, tid := range tids {
		m.pending[tid] = pending{batch: b, chunk: first + i}
	}
	return nil
}

// list records a running batch for operators; unlist forgets it, after
// the next publish shows it as it ended (see publishBatches).
func (m *Manager) list(id string, b batch) {
	m.mu.Lock()
	m.batches[id] = b
	m.mu.Unlock()
}

func (m *Manager) unlist(id string) {
	m.mu.Lock()
	if b, ok := m.batches[id]; ok {
		m.finished[id] = b
	}
	delete(m.batches, id)
	m.mu.Unlock()
}

// forget removes tasks from the pending set and returns the ones that were
// still pending.
func (m *Manager) forget(tids []string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var still []string
	for _, tid := range tids {
		if _, ok := m.pending[tid]; ok {
			delete(m.pending, tid)
			still = append(still, tid)
		}
	}
	return still
}

// withdraw forgets tasks and removes the ones still pending from Redis, so
// workers skip them and no result of theirs is delivered.
func (m *Manager) withdraw(tids []string) {
	still := m.forget(tids)
	if len(still) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := eachShard(m.byShard(still), func(s *shard, tids []string) error { return s.rdb.Cancel(ctx, m.id, tids) })
	if err != nil {
		m.log.Warn("withdrawing tasks failed; workers run them and their results are discarded", "tasks", len(still), "err", err)
	}
}

// ready checks, before the manager's first submit, that Redis answers within
// startTimeout, lets it run every command redmap needs, is recent enough, and
// cannot evict its keys (a warning if it can): see rdb.Preflight. So an
// unreachable Redis fails Submit in seconds with ErrUnavailable, and a
// missing ACL permission with an error naming the command, instead of a rare
// path failing later. Once it has passed it costs nothing.
func (m *Manager) ready(ctx context.Context) error {
	if m.probed.Load() {
		return nil
	}
	started := time.Now()
	if err := m.rdb.Preflight(ctx, startTimeout, m.opts.RedisTimeout, m.log); err != nil {
		return m.redisError("checking Redis", started, err)
	}
	m.probed.Store(true)
	return nil
}

// startTimeout bounds how long a manager's first Submit waits for Redis to
// answer before it fails with ErrUnavailable; a Redis that answers but
// cannot serve yet (a Cluster failing over) gets RedisTimeout.
const startTimeout = 2 * time.Second

// publishTypes stores the structure of a handle's types under its signature,
// once per handle per manager, so that a worker with other types can say
// which field differs (ErrTypeMismatch). One pipeline, on the first submit.
func (m *Manager) publishTypes(ctx context.Context, sig string, types []string) error {
	if _, done := m.typed.Load(sig); done {
		return nil
	}
	started := time.Now()
	if err := m.rdb.PublishTypes(ctx, sig, types); err != nil {
		return m.redisError("publishing the types of a function", started, err)
	}
	m.typed.Store(sig, true)
	return nil
}
