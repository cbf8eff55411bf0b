package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/failure"
	"github.com/redmap/redmap/internal/part"
)

// maintainer keeps the worker in good standing, once a Heartbeat: it renews
// the lease (publishing the worker's info), reaps dead workers, records the
// batches of managers that died as "manager lost", cancels running tasks no
// longer wanted, and writes failure records for operators.
type maintainer struct {
	maintainerParams
	*part.Runner
}

// maintainerParams is what a maintainer is built from.
type maintainerParams struct {
	wid      string
	lease    time.Duration // Options.Lease
	source   *source
	held     *held
	failures *failure.Log
	counters *counters
	info     func() wire.WorkerInfo // what the worker publishes for operators
	problem  *problem
	failed   func(op string, err error)
	drain    func()      // an operator asked the worker to drain
	draining func() bool // the worker drains already
	// beat is told of each heartbeat, and whether Redis took it (the
	// worker's probes: Worker.Healthy, Worker.Ready).
	beat func(ok bool)
	// leaving reports that the worker cannot report its results and
	// leaves: it renews its lease no more, so that its tasks are reaped.
	leaving func() bool
	log     *slog.Logger
}

func newMaintainer(p maintainerParams, heartbeat time.Duration) *maintainer {
	m := &maintainer{maintainerParams: p}
	m.Runner = part.Every(heartbeat, func(ctx context.Context) { _ = m.tick(ctx) })
	return m
}

// tick runs each upkeep step once and returns the heartbeat's error. A step
// that fails is logged (at error level if Redis refuses it for good) and
// published with the next heartbeat for operators.
func (m *maintainer) tick(ctx context.Context) error {
	if m.leaving != nil && m.leaving() {
		return nil
	}
	if err := m.heartbeat(ctx); err != nil {
		return err
	}
	ok := m.reap(ctx)
	ok = m.loseManagers(ctx) && ok
	ok = m.cancelUnwanted(ctx) && ok
	ok = m.recordFailures(ctx) && ok
	if ok {
		if was := m.problem.set(""); was != "" {
			m.log.Info("Redis answers the worker's calls again", "after", was)
		}
	}
	return nil
}

// heartbeat renews the lease on every shard the worker serves, publishing
// the worker's info in shard 0, and starts the drain an operator asked for.
func (m *maintainer) heartbeat(ctx context.Context) error {
	info := m.info()
	beat, err := m.source.heartbeat(ctx, &info)
	m.beat(err == nil)
	if err != nil {
		if ctx.Err() == nil {
			m.failed("heartbeat", err)
			// The lease could not be renewed; say why where operators look.
			m.source.first.PublishError(ctx, &broker.PublishErrorParams{Worker: m.wid, Lease: m.lease, Msg: m.problem.get()})
		}
		return err
	}
	if beat.Drain && !m.draining() {
		m.log.Info("drain requested: taking no more tasks, exiting when idle")
		m.drain()
	}
	return nil
}

// reap gives the tasks of workers whose lease expired back to the queue,
// on every shard.
func (m *maintainer) reap(ctx context.Context) bool {
	r, err := m.source.reap(ctx) // what the shards before a failed one reaped counts
	// A reap can give back tasks and reap no worker: another reaper's call
	// emptied the worker last, or it had more than one Reap does.
	if r != (wire.Reaped{}) {
		m.counters.reaped.Add(int64(r.Workers))
		m.counters.requeued.Add(int64(r.Requeued))
		m.log.Info("reaped dead workers", "workers", r.Workers, "requeued", r.Requeued, "lost", r.Lost)
	}
	if err != nil {
		if ctx.Err() == nil {
			m.failed("reap dead workers", err)
		}
		return false
	}
	return true
}

// loseManagers records the running batches of managers that stopped
// publishing their progress as "manager lost" in the queue's history, so
// operators see how they ended even when no one watches.
func (m *maintainer) loseManagers(ctx context.Context) bool {
	n, err := m.source.first.LoseManagers(ctx)
	if n > 0 {
		m.log.Info("recorded the batches of managers that stopped publishing as manager lost", "batches", n)
	}
	if err != nil {
		if ctx.Err() == nil {
			m.failed("record batches of lost managers", err)
		}
		return false
	}
	return true
}

// cancelUnwanted cancels the context of running tasks no longer wanted:
// their batch was cancelled, or its manager is gone, or the task's other
// copy won its backup race (those are marked outrun: see held.cancel).
func (m *maintainer) cancelUnwanted(ctx context.Context) bool {
	unwanted, err := m.source.unwanted(ctx, m.held.running())
	m.held.cancel(unwanted.Tasks, unwanted.Outrun) // what the shards that answered said
	if err != nil {
		if ctx.Err() == nil {
			m.failed("check running tasks are wanted", err)
		}
		return false
	}
	return true
}

// recordFailures adds the failures counted since the last tick to the
// queue's failure groups; on a failed write they are counted again with the
// next.
func (m *maintainer) recordFailures(ctx context.Context) bool {
	if err := countFailures(ctx, m.source.first, m.wid, m.failures, m.log); err != nil {
		m.failed("record failures", err)
		return false
	}
	return true
}

// countFailures writes the failures log has counted into the queue's
// failure groups, and puts them back in the log if the write fails.
// A malformed group found in Redis is replaced, and said here once: the
// replacement leaves nothing to say again.
func countFailures(ctx context.Context, q broker.Queue, wid string, log *failure.Log, logger *slog.Logger) error {
	gs := log.Take()
	if len(gs) == 0 {
		return nil
	}
	got, err := q.CountFailures(ctx, &broker.CountFailuresParams{Worker: wid, Groups: gs})
	if err != nil {
		log.PutBack(gs)
		return err
	}
	if got.Malformed > 0 {
		logger.Warn("replaced malformed failure groups in Redis (bytes no worker wrote); their counts are lost", "groups", got.Malformed)
	}
	return nil
}
