// Package manager submits batches to a redmap queue and collects their
// results. A Manager is a value inside a user's program; Map, MapWith and
// Submit are package-level generic functions because Go methods cannot have
// type parameters.
package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/cache"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/redisbroker"
	"github.com/redmap/redmap/internal/failure"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/part"
	"github.com/redmap/redmap/internal/tracing"
)

// Manager submits batches to one queue and collects their results. It has a
// random 128-bit id, its own task set and its own result list. It is safe for
// concurrent use by many goroutines and many batches.
//
// A Manager wires parts, each in its own file with one lifecycle
// (internal/part): per batch, a feeder submits its tasks (feeder.go); per
// shard of the queue, a collector reads results and hands them to their
// batches (collector.go); the keeper keeps the manager's keys and its
// batches' constants alive and publishes progress (keeper.go); the reaper
// reaps dead workers and checks that someone serves each batch (reaper.go);
// the recoverer puts back what Redis lost (recoverer.go). What they share
// are the pending tasks (pending.go), the running batches (registry.go),
// the held constants (holds.go) and the router, where sharding lives
// (router.go); faults.go says what a failed call to Redis means.
type Manager struct {
	managerConfig
	managerRedis
	managerParts
	managerTallies

	// What its parts and calls share, made by assemble (an owner shares
	// its manager's costs and pipes).
	pending  *pendingTasks
	batches  *registry
	holds    *holds
	costs    *costs // shared by a manager and its durable batches' owners
	pipes    *pipes // its pipelines running, for an operator's cancel; shared as costs
	limits   limits
	history  *history     // writes each batch's final record
	durables durables     // its durable batches running, each on its owner
	owned    *owned       // an owner's: its durable batch (durable.go); nil for a manager
	feeding  feederParams // what every batch's feeder is built from
	env      batchEnv     // what every batch is built with
}

// managerConfig is who a manager is and how it is set: written by New and
// assemble, read-only after.
type managerConfig struct {
	id     string
	opts   Options
	log    *slog.Logger
	label  string       // the value of ProfileLabel on its goroutines
	tracer trace.Tracer // from Options.TracerProvider or the global one (which delegates to a provider installed later)
}

// managerRedis is how a manager reaches Redis: its client (set by New), the
// queue's shards (router, written by assemble) and what it learns of Redis
// once (probed, typed, written by the calls that learn it).
type managerRedis struct {
	client redis.UniversalClient // New's, for its durable batches' owners; nil if assembled from seams alone (unit tests)
	addr   string                // where the client connects, for errors (redisbroker.Addr)
	router *router
	spill  shuffleStore // a map/reduce by key's partitions (shuffle.go): the queue's first shard
	faults *faults      // what a failed call to Redis means
	probed atomic.Bool  // Redis allowed every command redmap needs (see ready)
	typed  sync.Map     // signatures whose types are published (see publishTypes)
}

// managerParts are the parts a manager runs, which Close stops by ending
// ctx: its background parts (started by assemble), a collector per open
// shard (startCollector), a feeder per batch still submitting, and what a
// call runs beside itself.
type managerParts struct {
	ctx        context.Context // the parts'
	cancel     context.CancelFunc
	partsMu    sync.Mutex   // guards collectors
	collectors []*collector // one per open shard
	background part.List    // keeper, reaper, recoverer, stragglers
	feeders    part.Set     // one feeder per batch still submitting
	beside     part.Set     // what a call runs beside itself (a shuffle's renewal and reruns)
}

// managerTallies are what a manager counts since New, added to by its parts
// and batches: its batches' numbers, its diagnostics (Stats), its batches'
// backup tasks and what failed on its side.
type managerTallies struct {
	batchSeq atomic.Uint64
	stats    counters
	backups  backupCounts // its batches' backup tasks, and the races that ended (backup.go)
	failures failure.Log  // what failed on the manager's side, for the queue's failure groups
}

// historyBudget bounds the write of a batch's final record, retries
// included: Wait returns after it at the latest.
const historyBudget = 2 * time.Second

// lostAfter is how long a manager that publishes every poll may go without
// publishing before operators' tools record its batches as "manager lost":
// several polls and at least 10 s, so that a failover's stall or a long
// pause does not declare a live manager lost; but no longer than its keys
// outlive it (ttl), when its batches are lost for certain; and always more
// than two polls.
func lostAfter(poll, ttl time.Duration) time.Duration {
	return max(min(max(5*poll, 10*time.Second), ttl), 2*poll)
}

// counters are the manager's diagnostics (Stats).
type counters struct {
	dropped     atomic.Int64 // results discarded as stale, duplicate or unreadable
	ended       atomic.Int64 // elements that ended (a value or an error), all batches
	resultBytes atomic.Int64 // bytes of results read
	// partialBytes and outputBytes: of map/reduce by key calls, the
	// partials their map tasks stored and the outputs their reduce tasks
	// stored (as the tasks' results said).
	partialBytes, outputBytes atomic.Int64
}

// ProfileLabel is the profiler label (runtime/pprof) on the goroutines of a
// manager's parts, its value the manager's id (<id>/<name> for those
// running its durable batch name): a goroutine profile of a program running
// several says whose each is.
const ProfileLabel = "redmap.manager"

// New returns a manager of client for opts.Queue and starts its result
// collector. It validates opts and returns an error naming the first bad
// field. Close it to release its goroutines and its keys in Redis.
func New(client redis.UniversalClient, opts Options) (*Manager, error) {
	if client == nil {
		return nil, errors.New("manager: nil Redis client")
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	m := assemble(clientSeams(client, opts), opts, id.New(), nil)
	m.addr = redisbroker.Addr(client)
	m.client = client
	return m, nil
}

// clientSeams returns the manager's seams to Redis through client.
func clientSeams(client redis.UniversalClient, opts Options) seams {
	return seams{
		queue: redisbroker.New(client, opts.Prefix, opts.Queue),
		shard: func(name string, i int) broker.Shard { return redisbroker.NewShard(client, opts.Prefix, name, i) },
		masters: func(ctx context.Context) (broker.Masters, bool, error) {
			return redisbroker.ClusterMasters(ctx, client)
		},
		store: cache.NewStore(client, opts.Prefix, opts.PartSize),
	}
}

// durableSeams are a durable batch's owner's seams: those of a manager,
// whose shards keep the results they read, and whose writes carry fence.
func durableSeams(client redis.UniversalClient, opts Options, fence *broker.Fence) seams {
	s := clientSeams(client, opts)
	s.queue = redisbroker.New(client, opts.Prefix, opts.Queue).KeepingResults().Fenced(fence)
	s.shard = func(name string, i int) broker.Shard {
		return redisbroker.NewShard(client, opts.Prefix, name, i).KeepingResults().Fenced(fence)
	}
	return s
}

// seams are the manager's ways to Redis: internal/broker/redisbroker's; the
// parts' unit tests wrap them to inject failures (manager/broker_test.go).
type seams struct {
	queue   broker.Queue
	shard   func(name string, i int) broker.Shard
	masters func(ctx context.Context) (broker.Masters, bool, error)
	store   constantStore
}

// assemble builds a manager's parts over its seams to Redis and starts them;
// opts have their defaults. mid is its id; o, if not nil, makes it the
// owner of a durable batch (durable.go).
func assemble(r seams, opts Options, mid string, o *owned) *Manager {
	m := &Manager{
		managerConfig: managerConfig{tracer: tracing.Tracer(opts.TracerProvider), id: mid, opts: opts,
			log: opts.Logger.With("manager", mid, "queue", opts.Queue)},
		owned:   o,
		pending: newPendingTasks(),
		batches: newRegistry(),
		costs:   newCosts(),
	}
	if o != nil && o.costs != nil {
		m.costs = o.costs
	}
	m.pipes = newPipes()
	if o != nil && o.pipes != nil {
		m.pipes = o.pipes
	}
	// Its parts' goroutines carry the label redmap.manager=<id> in a
	// goroutine profile (internal/part).
	// An owner's say whose durable batch it runs: <parent's id>/<name>.
	label := mid
	if o != nil {
		label = o.holder.Manager + "/" + o.name
	}
	m.label = label
	m.ctx, m.cancel = context.WithCancel(pprof.WithLabels(context.Background(), pprof.Labels(ProfileLabel, label)))
	m.spill = r.queue
	m.router = newRouter(routerParams{queue: opts.Queue, shards: opts.Shards, first: r.queue, open: r.shard,
		masters: r.masters, opened: m.startCollector, log: m.log})
	m.faults = &faults{mid: mid, router: m.router, pending: m.pending, queue: opts.Queue, timeout: opts.RedisTimeout, log: m.log}
	m.holds = newHolds(r.store, mid, opts.KeyTTL, m.log)
	ended := &unsaid{ended: &m.stats.ended}
	lanes := &endedLanes{}
	m.history = newHistory(historyParams{mid: mid, store: r.queue, limit: opts.History, age: opts.HistoryAge,
		budget: min(opts.RedisTimeout, historyBudget), unsaid: ended, failures: &m.failures, stages: m.pipes.stages, log: m.log})
	withdrawals := &withdrawal{mid: mid, pending: m.pending, router: m.router, log: m.log}
	m.env = batchEnv{mid: mid, tracer: m.tracer, log: m.log, ended: &m.stats.ended, unsaid: ended, lanes: lanes, costs: m.costs, batches: m.batches,
		history: m.history, tasks: withdrawals, durable: o != nil,
		failures: &m.failures, backups: &m.backups}
	m.feeding = feederParams{mid: mid, label: label, opts: opts, router: m.router, pending: m.pending, batches: m.batches,
		costs: m.costs, faults: m.faults, running: &m.feeders, publishTypes: m.publishTypes, limitOf: m.limitOf}
	if o != nil {
		m.feeding.owned, m.feeding.resume = o, m.resume
		m.feeding.redeliver = func(entries []string) {
			(&collector{collectorParams: m.collecting(m.router.first())}).dispatchAll(entries)
		}
	}
	keeping := keeperParams{mid: mid, ttl: opts.KeyTTL, router: m.router, holds: m.holds, batches: m.batches, pipes: m.pipes, withdrawals: withdrawals,
		ended: ended, lanes: lanes, failures: &m.failures, faults: m.faults, due: lostAfter(opts.Poll, opts.KeyTTL), log: m.log}
	if o != nil {
		keeping.claim, keeping.durable, keeping.renewEvery = m.renewClaim, o.name, opts.Poll
		if o.parent != nil {
			keeping.phases = o.parent.endPhases
		}
	}
	k := newKeeper(keeping, opts.Poll)
	m.feeding.publish = k.publishBatches
	m.background = part.List{
		k,
		newReaper(reaperParams{queue: opts.Queue, noWorkerTimeout: opts.NoWorkerTimeout, router: m.router,
			batches: m.batches, faults: m.faults, log: m.log}, opts.Poll),
		newRecoverer(recovererParams{mid: mid, ttl: opts.KeyTTL, router: m.router, pending: m.pending,
			holds: m.holds, stages: m.pipes.stages, faults: m.faults, log: m.log}, opts.Poll),
		newStragglers(stragglersParams{mid: mid, router: m.router, batches: m.batches, counts: &m.backups,
			faults: m.faults, log: m.log}, opts.Poll),
	}
	m.startCollector(m.router.first())
	m.history.Start(m.ctx)
	m.background.Start(m.ctx)
	return m
}

// startCollector starts a collector of shard s.
func (m *Manager) startCollector(s *shard) {
	c := newCollector(m.collecting(s))
	m.partsMu.Lock()
	m.collectors = append(m.collectors, c)
	m.partsMu.Unlock()
	c.Start(m.ctx)
}

// collecting returns what a collector of shard s is built from.
func (m *Manager) collecting(s *shard) collectorParams {
	p := collectorParams{shard: s, mid: m.id, poll: m.opts.Poll, maxFrame: m.opts.MaxFrame,
		pending: m.pending, faults: m.faults, dropped: &m.stats.dropped, stale: m.staleResult, bytes: &m.stats.resultBytes, log: m.log}
	if m.owned != nil {
		p.after = m.owned.resumed
		p.early = func(tid, entry string) bool { return m.owned.found.keep(tid, entry) }
		p.mayTrim = m.stillHolds
	}
	return p
}

// ID returns the manager's id.
func (m *Manager) ID() string { return m.id }

// Workers returns the ids of the queue's live workers, for OnWorker. One
// round trip.
func (m *Manager) Workers(ctx context.Context) ([]string, error) {
	var ids []string
	err := m.faults.callQueue("listing workers", func() (err error) {
		ids, err = m.router.queue().LiveWorkers(ctx)
		return err
	})
	return ids, err
}

// workerWait is how long a batch for a worker's private queue (OnWorker)
// waits for that worker to be live: a program that starts a worker's Run
// on a goroutine and submits to it at once is not refused for the moment
// Run takes to register it.
const workerWait = 2 * time.Second

// awaitWorker returns once worker wid is live, or fails with
// redmap.ErrNoWorker if it is not within workerWait.
func (m *Manager) awaitWorker(ctx context.Context, wid string) error {
	deadline := time.Now().Add(workerWait)
	for {
		live, err := m.Workers(ctx)
		if err != nil {
			return err
		}
		if slices.Contains(live, wid) {
			return nil
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("%w: %q on queue %q (not live within %v)", redmap.ErrNoWorker, wid, m.opts.Queue, workerWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stats are a manager's diagnostics, counted since New.
type Stats struct {
	// Dropped counts results discarded because no pending task wanted them:
	// stale, duplicate or unreadable.
	Dropped int64
	// ResultBytes counts the bytes of results read from Redis: what the
	// batches' outputs (or, for MapReduce, partials) cost to bring back.
	ResultBytes int64
	// ConstantUploads and ConstantBytes count the constants this manager
	// uploaded, and their bytes; a constant already in Redis is not
	// uploaded again.
	ConstantUploads, ConstantBytes int64
	// Elements counts the elements that ended, a value or an error, in
	// every batch.
	Elements int64
	// Pending is how many tasks wait for a result now.
	Pending int
	// Shards is how many shards of the queue the manager uses now.
	Shards int
	// PartialBytes and OutputBytes count the bytes of partials the map
	// tasks of its map/reduce by key calls (ReduceByKey) stored in Redis,
	// and of outputs their reduce tasks stored, runs again included: what
	// its shuffles put in Redis at most, all at once if nothing was
	// reduced before the last map task ended.
	PartialBytes, OutputBytes int64
	// BackupsStarted counts the backup tasks queued (Backups): copies of
	// tasks held far longer than their batch's typical task. Of their
	// races, a copy's result came first in BackupsWon; the original's
	// (the copy run for nothing, or never run) in BackupsWasted.
	BackupsStarted, BackupsWon, BackupsWasted int64
}

// Stats returns the manager's diagnostics, its durable batches' (Durable)
// included, running or ended. It costs no round trip.
func (m *Manager) Stats() Stats {
	st := m.ownStats()
	st.Shards = len(m.router.list())
	// Its durable batches run on owners of their own (durable.go), whose
	// counts are the manager's too: those of the owners running, and those
	// the owners that ended left (durables.remove).
	m.durables.mu.Lock()
	defer m.durables.mu.Unlock()
	st.add(m.durables.ended)
	for _, o := range m.durables.owners {
		st.add(o.ownStats())
	}
	return st
}

// ownStats returns the manager's own counts, none of its owners', and no
// Shards.
func (m *Manager) ownStats() Stats {
	n, bytes := m.holds.store.Uploads()
	return Stats{
		Dropped: m.stats.dropped.Load(), ResultBytes: m.stats.resultBytes.Load(),
		ConstantUploads: n, ConstantBytes: bytes, Elements: m.stats.ended.Load(),
		Pending:      m.pending.count(),
		PartialBytes: m.stats.partialBytes.Load(), OutputBytes: m.stats.outputBytes.Load(),
		BackupsStarted: m.backups.started.Load(), BackupsWon: m.backups.won.Load(), BackupsWasted: m.backups.wasted.Load(),
	}
}

// add adds o's counts to s's, all but Shards.
func (s *Stats) add(o Stats) {
	s.Dropped += o.Dropped
	s.ResultBytes += o.ResultBytes
	s.ConstantUploads += o.ConstantUploads
	s.ConstantBytes += o.ConstantBytes
	s.Elements += o.Elements
	s.Pending += o.Pending
	s.PartialBytes += o.PartialBytes
	s.OutputBytes += o.OutputBytes
	s.BackupsStarted += o.BackupsStarted
	s.BackupsWon += o.BackupsWon
	s.BackupsWasted += o.BackupsWasted
}

// Close ends every batch still running with ErrClosed, withdraws their tasks,
// stops the manager's parts (within one Poll) and deletes the manager's
// keys. It is safe to call more than once.
func (m *Manager) Close() error {
	m.detachDurables()
	tids, shards, first := m.halt(redmap.ErrClosed)
	if !first {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	groups := m.router.byShard(tids)
	for _, s := range shards {
		if _, ok := groups[s]; !ok {
			groups[s] = nil // dropped all the same
		}
	}
	err := eachShard(groups, func(s *shard, tids []string) error {
		return errors.Join(s.rdb.Cancel(ctx, &broker.CancelParams{Manager: m.id, Tasks: tids}), s.rdb.Drop(ctx, &broker.ManagerParams{Manager: m.id}))
	})
	if m.owned != nil && err == nil {
		m.unclaim()
	}
	return err
}

// halt ends the manager's batches still running with cause and stops its
// parts. It returns the tasks that were outstanding and the shards that
// were open, and whether it was the first call.
func (m *Manager) halt(cause error) (tids []string, shards []*shard, first bool) {
	outstanding, first := m.pending.close()
	if !first {
		return nil, nil, false
	}
	tids = make([]string, 0, len(outstanding))
	seen := make(map[batch]bool)
	for tid, p := range outstanding {
		tids = append(tids, tid)
		if !seen[p.batch] {
			seen[p.batch] = true
			p.batch.abort(cause)
		}
	}
	// And those with no task outstanding: a feeder waiting for room (a
	// stream whose reader is behind) would otherwise wait for ever, and a
	// durable batch's fail its elements rather than be left in Redis.
	for _, b := range m.batches.batches() {
		if !seen[b] {
			b.abort(cause)
		}
	}
	// The feeders stop first, then the history writer, which writes the
	// records of the batches ended (as closed) before it returns; then the
	// background parts and the collectors.
	part.List{m.history, &m.feeders}.Stop()
	shards = m.router.close()
	m.partsMu.Lock()
	parts := append(part.List{&m.beside}, m.background...)
	for _, c := range m.collectors {
		parts = append(parts, c)
	}
	m.partsMu.Unlock()
	parts.StopAll()
	m.cancel()
	return tids, shards, true
}

// ready checks, before the manager's first submit, that Redis answers within
// startTimeout, lets it run every command redmap needs, is recent enough, and
// cannot evict its keys (a warning if it can): see redisbroker.Preflight. So an
// unreachable Redis fails Submit in seconds with ErrUnavailable, and a
// missing ACL permission with an error naming the command, instead of a rare
// path failing later. Once it has passed it costs nothing.
func (m *Manager) ready(ctx context.Context) error {
	if m.probed.Load() {
		return nil
	}
	err := m.faults.callQueue("checking Redis at "+m.addr, func() error {
		return m.router.queue().Preflight(ctx, &broker.PreflightParams{Budget: startTimeout, Heal: m.opts.RedisTimeout, Log: m.log})
	})
	if broker.Refused(err) { // the credentials, or the ACL: say where
		return fmt.Errorf("manager: Redis at %s: %w", m.addr, err)
	}
	if err != nil {
		return err
	}
	m.probed.Store(true)
	return nil
}

// startTimeout bounds how long a manager's first Submit waits for Redis to
// answer before it fails with ErrUnavailable; a Redis that answers but
// cannot serve yet (a Cluster failing over), or that takes connections but
// is slow to answer (a starved machine, a pool shared by many managers),
// gets RedisTimeout.
const startTimeout = 2 * time.Second

// publishTypes stores the structure of a handle's types under its signature,
// once per handle per manager, so that a worker with other types can say
// which field differs (ErrTypeMismatch). One pipeline, on the first submit.
func (m *Manager) publishTypes(ctx context.Context, sig string, types []string) error {
	if _, done := m.typed.Load(sig); done {
		return nil
	}
	if err := m.faults.callQueue("publishing the types of a function", func() error {
		return m.router.queue().PublishTypes(ctx, &broker.PublishTypesParams{Sig: sig, Types: types})
	}); err != nil {
		return err
	}
	m.typed.Store(sig, true)
	return nil
}
