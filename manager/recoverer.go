package manager

import (
	"context"
	"log/slog"
	"time"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/part"
)

// recoverer checks, once per Poll while tasks are outstanding, with one
// HMGET per shard, that Redis still has every task the manager submitted
// there, and puts back what it lost (see recover); every auditEvery Polls it
// also checks that each outstanding task waits somewhere a worker can reach
// it, and queues again those that do not (see audit).
type recoverer struct {
	recovererParams
	*part.Runner
	ticks int // Polls so far, for the audit (auditEvery)
}

// recovererParams is what a recoverer is built from.
type recovererParams struct {
	mid     string
	ttl     time.Duration // Options.KeyTTL
	router  *router
	pending *pendingTasks
	holds   *holds
	stages  *stageBook // the stage counts of its pipelines, to put back
	faults  *faults
	log     *slog.Logger
}

func newRecoverer(p recovererParams, poll time.Duration) *recoverer {
	r := &recoverer{recovererParams: p}
	r.Runner = part.Every(poll, r.tick)
	return r
}

func (r *recoverer) tick(ctx context.Context) {
	r.ticks++
	auditing := r.ticks%auditEvery == 0
	_ = eachShard(everyShard[struct{}](r.router), func(s *shard, _ struct{}) error {
		r.check(ctx, s)
		if auditing {
			r.audit(ctx, s)
		}
		return nil
	})
	if auditing {
		r.restoreStages(ctx)
	}
}

// restoreStages puts back what Redis lost of the stage counts of the
// pipelines the manager runs (stageBook.restore: nothing written if it
// lost nothing): a loss with no task outstanding, between two phases, or
// of that key alone, is found too. A script call a pipeline running.
func (r *recoverer) restoreStages(ctx context.Context) {
	if r.stages == nil {
		return
	}
	s := r.router.first()
	r.faults.keep(ctx, s, "putting back pipelines' stage counts", quietOutage, func() error {
		return r.stages.restore(ctx, r.router.queue()) // the history's, shard 0's
	})
}

// check compares shard s's count of submitted tasks with what the manager
// knows it submitted there, and recovers if Redis lost some.
func (r *recoverer) check(ctx context.Context, s *shard) {
	if r.pending.count() == 0 && !s.lossSeen.Load() {
		return
	}
	// acked is read before Redis's count: every submit that raised acked
	// had raised Redis's count first, so on a Redis that keeps its data the
	// count read next is at least acked, whatever submits run meanwhile. The
	// epoch changes only in recovery, which no check runs beside.
	acked, epoch := s.acked.Load(), *s.epoch.Load()
	var have int64
	var hasEpoch string
	ok := r.faults.keep(ctx, s, "checking for lost data", quietOutage, func() (err error) {
		var got *broker.SubmittedResult
		if got, err = s.rdb.Submitted(ctx, &broker.ManagerParams{Manager: r.mid}); err == nil {
			have, hasEpoch = got.Count, got.Epoch
		}
		return err
	})
	if !ok {
		return
	}
	// Before the first submit is acknowledged there is nothing to lose (and
	// the set may not exist yet).
	if acked > 0 && (have < acked || hasEpoch != epoch) || s.lossSeen.Load() {
		r.recover(ctx, s)
	}
}

// recover puts back what Redis lost on shard s: the constants of running
// batches, then every outstanding task its task set no longer holds, under
// its old id, so results of runs still going on count as well. It holds
// sendMu, so no submit runs meanwhile, and Redis's count it ends with is
// exact: it becomes acked. A task whose result was delivered but not yet
// read is submitted again too (it is not in the set either); its second
// result is discarded. Runs of a task from before and after the loss may
// both finish; the first result is delivered, the other discarded. On
// failure it is tried again the next Poll.
func (r *recoverer) recover(ctx context.Context, s *shard) {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	tids := r.pending.ids(func(tid string) bool { return r.router.of(tid) == s })
	// The count, the epoch and what is missing come from one script call, so
	// from one server even while a failover moves clients (see redisbroker.Missing).
	var missing []string
	var have int64
	var hasEpoch string
	if !r.faults.keep(ctx, s, "finding lost tasks", quietOutage, func() (err error) {
		var got *broker.MissingResult
		if got, err = s.rdb.Missing(ctx, &broker.MissingParams{Manager: r.mid, Tasks: tids}); err == nil {
			missing, have, hasEpoch = got.Missing, got.Count, got.Epoch
		}
		return err
	}) {
		return
	}
	acked, epoch := s.acked.Load(), *s.epoch.Load()
	if (acked == 0 || have >= acked && hasEpoch == epoch) && !s.lossSeen.Load() {
		return
	}
	if !r.faults.keep(ctx, s, "storing lost constants again", quietOutage, func() error { return r.holds.restore(ctx) }) {
		return
	}
	if !r.resubmit(ctx, s, r.byList(missing), wire.Expect{Count: have, Epoch: hasEpoch}) {
		return
	}
	r.log.Warn("Redis lost writes of this manager; outstanding tasks it no longer held were submitted again",
		"resubmitted", len(missing), "outstanding", len(tids), "count_in_redis", have, "shard", s.i)
	if s == r.router.first() {
		r.restoreStages(ctx) // the history's shard: its pipelines' stage counts went too
	}
}

// list is where a submit goes: a worker's private list, or a batch's lane
// (of one priority).
type list struct {
	wid      string
	lane     wire.Lane
	priority int
}

// byList returns the tasks still pending of missing, ready to submit
// again, one group per list; one empty group if none is.
func (r *recoverer) byList(missing []string) map[list][]wire.Task {
	out := make(map[list][]wire.Task)
	for _, tid := range missing {
		p, ok := r.pending.get(tid)
		if !ok {
			continue // its result came meanwhile
		}
		t, wid, lane, err := p.batch.resubmission(p.chunk)
		if err != nil {
			// Encoding succeeded the first time; it cannot fail now, but
			// if it does, fail the task rather than wait for it for ever.
			if len(r.pending.forget([]string{tid})) == 1 {
				p.batch.fail(p.chunk, 0, err)
			}
			continue
		}
		l := list{wid: wid, lane: lane, priority: id.Priority(tid, DefaultPriority)}
		out[l] = append(out[l], t)
	}
	if len(out) == 0 {
		out[list{}] = nil // still one call: it installs the new epoch
	}
	return out
}

// resubmit submits groups to shard s, the first expecting the task set as
// the check read it (exp) and installing a new epoch: the set's history is
// now the one the manager knows, and a set of any other (a primary about to
// be replaced, with its own history) differs from it, however its count
// compares. Each later submit checks what the one before it left. A set
// that differs makes recovery start over next Poll. It reports whether all
// went in.
func (r *recoverer) resubmit(ctx context.Context, s *shard, groups map[list][]wire.Task, exp wire.Expect) bool {
	fresh := id.New()[:16]
	exp.NewEpoch = fresh
	for l, tasks := range groups {
		var count int64
		var intact bool
		if !r.faults.keep(ctx, s, "submitting lost tasks again", quietOutage, func() (err error) {
			var got *broker.SubmitResult
			if got, err = s.rdb.Submit(ctx, &broker.SubmitParams{Manager: r.mid, Worker: l.wid, Lane: l.lane, Tasks: tasks, TTL: r.ttl, Expect: exp}); err == nil {
				count, intact = got.Count, got.Intact
			}
			return err
		}) {
			return false
		}
		if !intact {
			s.lossSeen.Store(true)
			r.log.Warn("Redis lost data again while the manager put back what it had lost; retrying")
			return false
		}
		exp = wire.Expect{Count: count, Epoch: fresh}
	}
	s.epoch.Store(&fresh)
	s.acked.Store(exp.Count)
	s.lossSeen.Store(false)
	return true
}
