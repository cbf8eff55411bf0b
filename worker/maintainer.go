package worker

import (
	"context"
	"os"
	"time"

	"github.com/redmap/redmap/internal/rdb"
)

// maintainer keeps the worker in good standing, once a Heartbeat: it renews
// the lease (publishing the worker's info), reaps dead workers, cancels
// running tasks no longer wanted, and writes failure records for operators.
type maintainer struct {
	w     *Worker
	drain func() // an operator asked the worker to drain
	stopT context.CancelFunc
	done  chan struct{}
}

func newMaintainer(w *Worker, drain func()) *maintainer {
	return &maintainer{w: w, drain: drain, done: make(chan struct{})}
}

// start ticks every Heartbeat until stopped.
func (m *maintainer) start(ctx context.Context) {
	ctx, m.stopT = context.WithCancel(ctx)
	go func() {
		defer close(m.done)
		t := time.NewTicker(m.w.opts.Heartbeat)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			m.tick(ctx)
		}
	}()
}

func (m *maintainer) stop() { m.stopT() }
func (m *maintainer) wait() { <-m.done }

// tick runs each upkeep step once and returns the heartbeat's error. A step
// that fails is logged (at error level if Redis refuses it for good) and
// published with the next heartbeat for operators.
func (m *maintainer) tick(ctx context.Context) error {
	if err := m.heartbeat(ctx); err != nil {
		return err
	}
	ok := m.reap(ctx)
	ok = m.cancelUnwanted(ctx) && ok
	ok = m.recordFailures(ctx) && ok
	if ok {
		m.w.setProblem("")
	}
	return nil
}

// heartbeat renews the lease on every shard the worker serves, publishes
// the worker's info in shard 0, serves more shards if the queue's managers
// now use more, and starts the drain an operator asked for.
func (m *maintainer) heartbeat(ctx context.Context) error {
	w := m.w
	info := m.info()
	beat, err := w.rdb.Heartbeat(ctx, w.opts.ID, w.opts.Lease, &info)
	if err == nil {
		w.grow(ctx, beat.Shards)
	}
	// Every shard's lease is renewed even if another's Redis fails: on a
	// Cluster with a master down, the worker still holds its tasks of the
	// others.
	for _, r := range w.shards()[1:] {
		if _, serr := r.Heartbeat(ctx, w.opts.ID, w.opts.Lease, nil); serr != nil && err == nil {
			err = serr
		}
	}
	if err != nil {
		if ctx.Err() == nil {
			w.failed("heartbeat", err)
			// The lease could not be renewed; say why where operators look.
			w.rdb.PublishError(ctx, w.opts.ID, w.opts.Lease, w.problem())
		}
		return err
	}
	if beat.Drain && !w.draining.Load() {
		w.log.Info("drain requested: taking no more tasks, exiting when idle")
		m.drain()
	}
	return nil
}

// info is what the worker publishes for operators.
func (m *maintainer) info() rdb.WorkerInfo {
	w := m.w
	st := w.Stats()
	host, _ := os.Hostname()
	state := "running"
	if w.draining.Load() {
		state = "draining"
	}
	return rdb.WorkerInfo{
		Host: host, PID: os.Getpid(), Concurrency: w.opts.Concurrency, Lease: w.opts.Lease,
		Started: w.started, Heartbeat: time.Now(),
		Running: st.Running, Taken: st.Taken, Delivered: st.Delivered, Failed: st.Failed,
		Functions: w.names(), State: state, Error: w.problem(),
		CacheHits: w.memo.Stats().Hits, CacheBytes: w.memo.Stats().BytesFetched,
	}
}

// reap gives the tasks of workers whose lease expired back to the queue,
// on every shard.
func (m *maintainer) reap(ctx context.Context) bool {
	w := m.w
	for _, s := range w.shards() {
		r, err := s.Reap(ctx)
		if err != nil {
			if ctx.Err() == nil {
				w.failed("reap dead workers", err)
			}
			return false
		}
		if r.Workers > 0 {
			w.counters.reaped.Add(int64(r.Workers))
			w.counters.requeued.Add(int64(r.Requeued))
			w.log.Info("reaped dead workers", "workers", r.Workers, "requeued", r.Requeued, "lost", r.Lost, "shard", s.Shard())
		}
	}
	return true
}

// cancelUnwanted cancels the context of running tasks whose batch no longer
// wants them (cancelled, or its manager gone).
func (m *maintainer) cancelUnwanted(ctx context.Context) bool {
	w := m.w
	for i, tids := range w.held.running() {
		unwanted, err := w.shard(i).Unwanted(ctx, w.opts.ID, tids)
		if err != nil {
			if ctx.Err() == nil {
				w.failed("check running tasks are wanted", err)
			}
			return false
		}
		w.held.cancel(unwanted)
	}
	return true
}

// recordFailures writes the failure records noted since the last tick.
func (m *maintainer) recordFailures(ctx context.Context) bool {
	recs := m.w.failures.take()
	if len(recs) == 0 {
		return true
	}
	if err := m.w.rdb.RecordFailures(ctx, recs); err != nil {
		m.w.failed("record failures", err)
		return false
	}
	return true
}
