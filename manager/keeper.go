package manager

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/failure"
	"github.com/redmap/redmap/internal/part"
)

// keeper keeps what the manager owns in Redis alive and tells operators
// what it does, once per Poll: it renews the manager's keys on every shard
// every KeyTTL/3; renews the running batches' holds of constants, storing
// again one Redis lost (every Poll, not every KeyTTL/3: a constant lives on
// a master of its own, which may lose it while the queue's does not, and
// workers wait for it); publishes the batches' progress (redmap batches)
// and the elements ended since (the dashboard's throughput); and keeps the
// queue's list of shard names, which workers serve.
type keeper struct {
	keeperParams
	*part.Runner
	renewAt map[*shard]time.Time // owned by tick
	// publishing is held by a publish of the batches: the tick's, or a
	// durable batch's first, before its first window (feederParams.publish).
	publishing sync.Mutex
}

// unsaid tracks how many of a manager's ended elements the queue's
// throughput counters have been told of. The keeper's publish and the
// history's record each add what is not yet said, so that a batch ending
// between two publishes, or a manager closed before its next one, is
// counted whole, and once.
type unsaid struct {
	ended *atomic.Int64 // elements that ended, all batches
	mu    sync.Mutex
	said  int64
}

// take returns the ended elements not yet said, and counts them said.
func (u *unsaid) take() int64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := u.ended.Load() - u.said
	u.said += n
	return n
}

// endSaid counts n elements ended and said at once: a finish that wrote
// their batch's record counted them (see Batch.solo).
func (u *unsaid) endSaid(n int64) {
	u.mu.Lock()
	u.ended.Add(n)
	u.said += n
	u.mu.Unlock()
}

// giveBack counts n taken elements unsaid again: their write failed.
func (u *unsaid) giveBack(n int64) {
	u.mu.Lock()
	u.said -= n
	u.mu.Unlock()
}

// endedLanes holds the lanes of the manager's batches that ended since the
// keeper last forgot them (redisbroker.ForgetLanes): each batch has a lane, and its
// entry in the manager's lanes hash would otherwise live, renewed, as long
// as the manager does.
type endedLanes struct {
	mu    sync.Mutex
	lanes []string // the lanes' numbers (wire.Lane.Name after its '.')
}

// add notes the lane of a batch that ended.
func (e *endedLanes) add(lane string) {
	e.mu.Lock()
	e.lanes = append(e.lanes, lane)
	e.mu.Unlock()
}

// take returns the lanes noted, and forgets them.
func (e *endedLanes) take() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := e.lanes
	e.lanes = nil
	return out
}

// keeperParams is what a keeper is built from.
type keeperParams struct {
	mid     string
	ttl     time.Duration // Options.KeyTTL
	router  *router
	holds   *holds
	batches *registry
	pipes   *pipes  // the pipelines running, which an operator may cancel whole
	ended   *unsaid // elements ended, for the throughput counters
	lanes   *endedLanes
	// failures holds what failed on the manager's side, written every Poll
	// (and with each batch's record: history).
	failures *failure.Log
	faults   *faults
	due      time.Duration // the next publish is due within this (lostAfter)
	// claim renews a durable batch's claim (an owner's: Manager.renewClaim);
	// nil for a manager.
	claim func(ctx context.Context)
	// withdrawals are the tasks whose withdrawal failed, tried again
	// every Poll.
	withdrawals *withdrawal
	durable     string // an owner's: its batch's name, published with its progress
	// phases ends, as an operator's cancel with cause, the running batches
	// of durable pipeline name's phases, on the owners of the manager
	// this one is an owner of, and returns what they had done; an
	// owner's (durables.endPhases).
	phases func(name string, cause error) []Progress
	// renewEvery is how often the keys are renewed: ttl/3 if 0. An owner
	// renews every Poll, so that its batch lives DurableTTL past the last
	// time it was held, not up to a third of it less.
	renewEvery time.Duration
	log        *slog.Logger
}

func newKeeper(p keeperParams, poll time.Duration) *keeper {
	k := &keeper{keeperParams: p, renewAt: make(map[*shard]time.Time)}
	k.Runner = part.Every(poll, k.tick)
	return k
}

func (k *keeper) tick(ctx context.Context) {
	if k.claim != nil {
		k.claim(ctx)
	}
	k.renewKeys(ctx)
	if k.withdrawals != nil {
		k.withdrawals.retry(ctx)
	}
	k.forgetLanes(ctx)
	k.holds.renew(ctx)
	k.publishBatches(ctx)
	if k.failures != nil {
		if err := writeFailures(ctx, k.router.queue(), k.mid, k.failures); err != nil && ctx.Err() == nil {
			k.log.Warn("counting the manager's failures in the queue's failure groups failed; the next Poll tries again", "err", err)
		}
	}
	k.faults.keep(ctx, k.router.first(), "publishing the queue's shard names", quietOutage, func() error { return k.router.publish(ctx) })
}

// renewKeys renews the manager's keys on each shard whose last renewal is
// KeyTTL/3 old, at once on all of them.
func (k *keeper) renewKeys(ctx context.Context) {
	now := time.Now()
	due := make(map[*shard]struct{})
	for _, s := range k.router.list() {
		if now.After(k.renewAt[s]) {
			due[s] = struct{}{}
			k.renewAt[s] = now.Add(cmp.Or(k.renewEvery, k.ttl/3))
		}
	}
	_ = eachShard(due, func(s *shard, _ struct{}) error {
		k.faults.keep(ctx, s, "renewing keys", quietOutage, func() error { return s.rdb.Renew(ctx, &broker.RenewParams{Manager: k.mid, TTL: k.ttl}) })
		return nil
	})
}

// forgetLanes deletes, on every shard, what Redis keeps of the lanes of
// the batches that ended since the last tick; a shard that cannot be
// reached has them again at the next.
func (k *keeper) forgetLanes(ctx context.Context) {
	if k.lanes == nil {
		return
	}
	lanes := k.lanes.take()
	if len(lanes) == 0 {
		return
	}
	var mu sync.Mutex
	failed := false
	_ = eachShard(everyShard[struct{}](k.router), func(s *shard, _ struct{}) error {
		ok := k.faults.keep(ctx, s, "forgetting ended batches' lanes", quietOutage, func() error {
			return s.rdb.ForgetLanes(ctx, &broker.ForgetLanesParams{Manager: k.mid, Lanes: lanes})
		})
		if !ok {
			mu.Lock()
			failed = true
			mu.Unlock()
		}
		return nil
	})
	if failed {
		for _, l := range lanes {
			k.lanes.add(l)
		}
	}
}

// publishBatches writes the progress of the manager's running batches to
// Redis for operators, replacing what it wrote last time, and ends the
// batches an operator cancelled. A batch that ended is in the queue's
// history instead (history.go).
func (k *keeper) publishBatches(ctx context.Context) {
	k.publishing.Lock()
	defer k.publishing.Unlock()
	running := k.batches.batches()
	published := make(map[string]wire.BatchProgress, len(running))
	for id, b := range running {
		p := b.published()
		p.Durable = k.durable
		published[id] = p
	}
	// Elements ended since the last publish feed the queue's throughput
	// counters (redmap dashboard), whatever batch they were of.
	ended := k.ended.take()
	cancels, err := k.router.queue().PublishBatches(ctx, &broker.PublishBatchesParams{Manager: k.mid, Batches: published, TTL: k.ttl, Due: k.due, Ended: ended})
	if err != nil {
		k.ended.giveBack(ended)
	}
	switch {
	case err == nil:
	case ctx.Err() != nil:
		k.log.Debug("stopped while publishing batch progress", "err", err)
	case broker.Refused(err):
		k.log.Error("publishing batch progress for operators refused", "err", err)
	default:
		k.log.Warn("publishing batch progress failed", "err", err)
	}
	for _, id := range cancels {
		if name, ok := claimedPipeline(k.durable); ok && k.phases != nil {
			// An operator cancelled the durable pipeline whose claim this
			// owner holds (inspect.Cancel of its name): it is asked
			// between two phases too, when no batch of it runs.
			if k.pipes.cancel(name, "", func() []Progress {
				return k.phases(name, fmt.Errorf("%w: by an operator (redmap cancel of pipeline %q)", context.Canceled, name))
			}) {
				k.log.Warn("an operator cancelled a durable pipeline", "pipeline", name)
				continue
			}
			// No pipeline of that name runs here: a durable batch the
			// user named so, cancelled as any.
		}
		if name, ok := wire.CancelledPipeline(id); ok {
			if k.pipes.cancel(name, "", func() []Progress {
				var ps []Progress
				for bid, p := range published {
					if p.Call.Pipeline == name {
						b := running[bid]
						b.cancel(fmt.Errorf("%w: by an operator (redmap cancel of pipeline %q)", context.Canceled, name))
						ps = append(ps, b.Progress())
					}
				}
				return ps
			}) {
				k.log.Warn("an operator cancelled a pipeline", "pipeline", name)
			}
			continue
		}
		if b, ok := running[id]; ok {
			k.log.Warn("an operator cancelled a batch", "batch", id)
			cancel := func() []Progress {
				b.cancel(fmt.Errorf("%w (redmap cancel, the dashboard): %w", failure.ErrCancelled, context.Canceled))
				return []Progress{b.Progress()}
			}
			if call := published[id].Call; call.Pipeline != "" {
				// A pipeline's batch: the whole pipeline ends.
				k.pipes.cancel(call.Pipeline, fmt.Sprintf("its batch %s, of steps %s", id, call.Stage), cancel)
				continue
			}
			cancel()
		}
	}
}
