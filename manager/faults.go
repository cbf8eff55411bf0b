package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/backoff"
	"github.com/redmap/redmap/internal/rdb"
)

// faults says what a failed call to Redis means, and, for the parts that
// run in the background (collectors, keeper, reaper, recoverer), acts on
// it, so that no outstanding element waits for ever: a refusal fails every
// outstanding task at once; an outage fails a shard's once it has lasted
// RedisTimeout.
type faults struct {
	router  *router
	pending *pendingTasks
	queue   string
	timeout time.Duration // Options.RedisTimeout
	log     *slog.Logger
}

// of says what a call to shard s begun at started that failed means for a
// caller: a *redmap.CommandError if Redis refused it for good,
// ErrUnavailable if Redis could not be reached (the shard's outage clock
// starts at started), ErrRedisFull at maxmemory.
func (f *faults) of(s *shard, op string, started time.Time, err error) error {
	if f.router.sharded() {
		op += " (shard " + strconv.Itoa(s.i) + ")"
	}
	switch {
	case rdb.Refused(err):
		return err
	case rdb.OutOfMemory(err):
		return fmt.Errorf("%w: %s: %w", redmap.ErrRedisFull, op, err)
	case rdb.Transient(err):
		s.outage.down(started)
		return fmt.Errorf("%w: %s: %w", redmap.ErrUnavailable, op, err)
	}
	return fmt.Errorf("manager: %s: %w", op, err)
}

// ofQueue is of for a queue-wide call (shard 0's).
func (f *faults) ofQueue(op string, started time.Time, err error) error {
	return f.of(f.router.first(), op, started, err)
}

// handle acts on a failed call of a background part to shard s: a refusal
// fails every outstanding task with the error that names the refused
// command, since the manager can no longer guarantee their results; an
// outage fails the shard's once it has lasted RedisTimeout. A call cut
// short by the manager's Close (ctx ended) is not worth a log line above
// debug. loud says whether the part logs an outage that has not lasted
// RedisTimeout yet (the collector does; the others would repeat it).
func (f *faults) handle(ctx context.Context, s *shard, op string, started time.Time, err error, loud bool) {
	if ctx.Err() != nil {
		f.log.Debug("stopped while "+op, "err", err)
		return
	}
	err = f.of(s, op, started, err)
	var ce *redmap.CommandError
	switch {
	case errors.As(err, &ce):
		f.log.Error("Redis refused a command the manager needs; failing its outstanding tasks", "op", op, "err", err)
		f.failAll(err)
	case errors.Is(err, redmap.ErrUnavailable):
		down := s.outage.length()
		if down < f.timeout {
			level := slog.LevelDebug
			if loud {
				level = slog.LevelWarn
			}
			f.log.Log(ctx, level, "Redis unreachable; retrying", "op", op, "err", err, "for", down.Round(time.Millisecond))
			return
		}
		if n := f.failShard(s, fmt.Errorf("%w (for %v, RedisTimeout %v)", err, down.Round(time.Second), f.timeout)); n > 0 {
			f.log.Error("Redis unreachable for RedisTimeout; outstanding tasks failed", "op", op, "tasks", n, "err", err)
		}
	default:
		f.log.Warn("Redis call failed; retrying", "op", op, "err", err)
	}
}

// failShard fails every pending task of shard s with cause, and returns how
// many.
func (f *faults) failShard(s *shard, cause error) int {
	var keep func(string) bool
	if f.router.sharded() {
		keep = func(tid string) bool { return f.router.of(tid) == s }
	}
	failed := f.pending.takeAll(keep)
	for _, p := range failed {
		p.batch.fail(p.chunk, 0, cause)
	}
	return len(failed)
}

// failAll fails every pending task with cause, and returns how many.
func (f *faults) failAll(cause error) int {
	all := f.pending.takeAll(nil)
	for _, p := range all {
		p.batch.fail(p.chunk, 0, cause)
	}
	return len(all)
}

// riding runs op, a step of Submit, again with backoff while it fails with
// ErrUnavailable, until the outage has lasted RedisTimeout (by the
// manager's outage clock, or since op first failed): a Cluster failing over
// or a Redis restarting delays a Submit as it delays a running batch, and an
// outage already older than RedisTimeout fails it at once.
func (f *faults) riding(ctx context.Context, op func() error) error {
	var bo backoff.Backoff
	var first time.Time
	for {
		err := op()
		if err == nil || !errors.Is(err, redmap.ErrUnavailable) || ctx.Err() != nil {
			return err
		}
		if first.IsZero() {
			first = time.Now()
		}
		if f.router.outageLength() >= f.timeout || time.Since(first) >= f.timeout {
			return err
		}
		if !bo.Wait(ctx) {
			return err
		}
	}
}
