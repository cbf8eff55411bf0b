package manager

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/engine"
	"github.com/redmap/redmap/internal/part"
)

// reaper looks after the workers the manager's batches need, once per
// Poll: it reaps workers whose lease expired on every shard, so their tasks
// run again (workers reap too: whoever notices first), and checks that some
// live worker serves each running batch of the public queue.
type reaper struct {
	reaperParams
	*part.Runner
	paused bool // the queue was paused at the last check (the Runner's goroutine's)
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
		var reaped *wire.Reaped
		if r.faults.keep(ctx, s, "reaping dead workers", quietOutage, func() (err error) {
			reaped, err = s.rdb.Reap(ctx)
			return err
		}) && *reaped != (wire.Reaped{}) { // tasks given back, or workers reaped (see redisbroker.Broker.Reap)
			r.log.Warn("reaped dead workers: their tasks were queued again", "workers", reaped.Workers, "requeued", reaped.Requeued, "lost", reaped.Lost, "shard", s.i)
		}
		return nil
	})
	r.checkServed(ctx)
}

// checkServed looks, for each running batch of the public queue, whether
// some live worker registered what it calls with the same signatures: one
// script call while batches run. A batch no live worker can run is
// announced at once (a warning, and Progress.Waiting), and its waiting
// elements fail once that has lasted NoWorkerTimeout: with ErrNoWorker, and
// ErrUnknownFunc if live workers lack the function, or ErrTypeMismatch
// (naming the field that differs) if they registered it with other types.
func (r *reaper) checkServed(ctx context.Context) {
	var bs []batch
	index := map[string]int{}
	var calls []string
	for _, b := range r.batches.batches() {
		if _, public := b.function(); !public {
			continue
		}
		bs = append(bs, b)
		if _, ok := index[b.calls()]; !ok {
			index[b.calls()] = len(calls)
			calls = append(calls, b.calls())
		}
	}
	if len(bs) == 0 {
		return
	}
	var served []wire.Serving
	if !r.faults.keep(ctx, r.router.first(), "checking that workers serve the batches", quietOutage, func() (err error) {
		served, err = r.router.queue().Served(ctx, &broker.ServedParams{Calls: calls})
		return err
	}) {
		return
	}
	switch paused := len(served) > 0 && served[0].Paused; {
	case paused && !r.paused:
		since := "a time its mark does not say"
		if s := served[0].PausedSince; s > 0 {
			since = time.UnixMilli(s).UTC().Format(time.RFC3339)
		}
		r.log.Warn("the queue is paused by an operator (redmap pause): its batches wait, their tasks queued, until redmap resume", "since", since)
		r.paused = true
	case !paused && r.paused:
		r.log.Info("the queue was resumed: its workers take its tasks again")
		r.paused = false
	}
	now := time.Now()
	for _, b := range bs {
		sv := served[index[b.calls()]]
		why, kind := r.why(ctx, b, sv)
		began, expired := b.served(sv.Code == wire.ServedBy, now, r.noWorkerTimeout, why)
		if began {
			r.log.Warn("a batch waits: "+why, "func", b.Progress().Func, "fails_after", r.noWorkerTimeout)
		}
		if expired {
			r.log.Error("failing a batch no live worker can run: "+why, "for", r.noWorkerTimeout)
			cause := fmt.Errorf("%w: %s, for %v (manager.Options.NoWorkerTimeout)", redmap.ErrNoWorker, why, r.noWorkerTimeout)
			switch {
			case kind != nil:
				cause = fmt.Errorf("%w: %w: %s, for %v (manager.Options.NoWorkerTimeout)", redmap.ErrNoWorker, kind, why, r.noWorkerTimeout)
			case r.faults.fullSince(b.Progress().Started):
				// Redis refused the manager's writes for want of memory
				// while the batch ran: its workers' reports were refused
				// too, so they left, or look dead, for want of memory,
				// not of workers.
				cause = fmt.Errorf("%w: %w: %s, for %v, while Redis refused writes for want of memory (maxmemory): its workers could not report", redmap.ErrRedisFull, redmap.ErrNoWorker, why, r.noWorkerTimeout)
			}
			b.failWaiting(cause)
		}
	}
}

// why says why no live worker can run batch b, by sv, and with which
// error besides ErrNoWorker its elements fail (nil for none).
func (r *reaper) why(ctx context.Context, b batch, sv wire.Serving) (string, error) {
	name, _ := b.function()
	switch sv.Code {
	case wire.ServedBy:
		return "", nil
	case wire.Unregistered:
		return fmt.Sprintf("no live worker of queue %q registered %q: register it in a worker (w.Register; README \"In code\")", r.queue, sv.Name), redmap.ErrUnknownFunc
	case wire.OtherSignature:
		why := fmt.Sprintf("the live workers of queue %q registered %q with other types (%s)", r.queue, sv.Name, sv.Signature)
		theirs, err := r.router.queue().Types(ctx, &broker.TypesParams{Sig: sv.Signature})
		if d := engine.Difference(b.typesOf(sv.Name), theirs, "the manager", "the worker"); err == nil && len(theirs) > 0 && d != "" {
			why += ": " + d
		}
		return why + " (a rolling deploy? its tasks wait for a worker of this build)", redmap.ErrTypeMismatch
	}
	return fmt.Sprintf("no live worker of queue %q serves %q: start one with that queue and function (worker.New, Register, Run, or worker.Main; README \"In code\")", r.queue, name), nil
}
