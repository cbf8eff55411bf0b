package manager

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/part"
)

// reaper looks after the workers the manager's batches need, once per
// Poll: it reaps workers whose lease expired on every shard, so their tasks
// run again (workers reap too: whoever notices first), and checks that some
// live worker serves each running batch of the public queue.
type reaper struct {
	reaperParams
	*part.Runner
}

// reaperParams is what a reaper is built from.
type reaperParams struct {
	queue           string
	noWorkerTimeout time.Duration // Options.NoWorkerTimeout
	router          *router
	batches         *registry
	faults          *faults
	log             *slog.Logger
}

func newReaper(p reaperParams, poll time.Duration) *reaper {
	r := &reaper{reaperParams: p}
	r.Runner = part.Every(poll, r.tick)
	return r
}

func (r *reaper) tick(ctx context.Context) {
	_ = eachShard(everyShard[struct{}](r.router), func(s *shard, _ struct{}) error {
		started := time.Now()
		if reaped, err := s.rdb.Reap(ctx); err != nil {
			r.faults.handle(ctx, s, "reaping dead workers", started, err, false)
		} else if reaped.Workers > 0 {
			r.log.Info("reaped dead workers", "workers", reaped.Workers, "requeued", reaped.Requeued, "lost", reaped.Lost, "shard", s.i)
		}
		return nil
	})
	r.checkServed(ctx)
}

// checkServed looks, for each running batch of the public queue, whether
// some live worker serves its function: one script call while batches run.
// A batch nobody serves is announced at once (a warning, and
// Progress.Waiting), and its waiting elements fail with ErrNoWorker once no
// one has served it for NoWorkerTimeout.
func (r *reaper) checkServed(ctx context.Context) {
	var bs []batch
	index := map[string]int{}
	var names []string
	for _, b := range r.batches.batches() {
		name, public := b.function()
		if !public {
			continue
		}
		bs = append(bs, b)
		if _, ok := index[name]; !ok {
			index[name] = len(names)
			names = append(names, name)
		}
	}
	if len(bs) == 0 {
		return
	}
	started := time.Now()
	served, err := r.router.queue().Served(ctx, names)
	if err != nil {
		r.faults.handle(ctx, r.router.first(), "checking that workers serve the batches", started, err, false)
		return
	}
	now := time.Now()
	for _, b := range bs {
		name, _ := b.function()
		why := fmt.Sprintf("no live worker of queue %q serves %q (is one running with that queue and function?)", r.queue, name)
		began, expired := b.served(served[index[name]], now, r.noWorkerTimeout, why)
		if began {
			r.log.Warn("a batch waits: "+why, "batch", b.snapshot().Func, "fails_after", r.noWorkerTimeout)
		}
		if expired {
			r.log.Error("failing a batch nobody served: "+why, "for", r.noWorkerTimeout)
			b.failWaiting(fmt.Errorf("%w: %s, for %v (manager.Options.NoWorkerTimeout)", redmap.ErrNoWorker, why, r.noWorkerTimeout))
		}
	}
}
