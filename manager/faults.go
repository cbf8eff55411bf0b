package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/backoff"
	"github.com/redmap/redmap/internal/broker"
)

// faults says what a failed call to Redis means, and, for the parts that
// run in the background (collectors, keeper, reaper, recoverer), acts on
// it, so that no outstanding element waits for ever: a refusal fails every
// outstanding task at once; an outage fails a shard's once it has lasted
// RedisTimeout.
type faults struct {
	mid     string
	router  *router
	pending *pendingTasks
	queue   string
	timeout time.Duration // Options.RedisTimeout
	log     *slog.Logger
	// A durable batch's owner's: the batch's name, and what stops the
	// owner once a write of it was refused because another manager took
	// the batch over (see broker.Fence); nil for a manager.
	durable string
	lose    func(error)
	// lastFull is when Redis last refused a call of this manager for want
	// of memory (Unix ns; 0 if never): a batch whose workers fall silent
	// then is failed as ErrRedisFull too (reaper), since their reports
	// were refused as well.
	lastFull atomic.Int64
}

// fullSince reports whether Redis refused a call of the manager for want
// of memory at t or later.
func (f *faults) fullSince(t time.Time) bool {
	last := f.lastFull.Load()
	return last != 0 && !time.Unix(0, last).Before(t)
}

// call makes one call to shard s's Redis, op saying what it does for the
// errors. It is the one place the manager times and classifies a call: a
// call that fails returns what of makes of it (its start begins the shard's
// outage, if Redis could not be reached). A success does not end the
// outage: do may have had nothing to send (a publish with nothing new);
// the collector and the feeder, whose calls always reach Redis, say when a
// shard is back.
func (f *faults) call(s *shard, op string, do func() error) error {
	started := time.Now()
	if err := do(); err != nil {
		return f.of(s, op, started, err)
	}
	return nil
}

// callQueue is call for a queue-wide call (shard 0's).
func (f *faults) callQueue(op string, do func() error) error {
	return f.call(f.router.first(), op, do)
}

// outageLog says how a background part logs an outage that has not lasted
// RedisTimeout yet.
type outageLog int

const (
	quietOutage outageLog = iota // at debug: another part says it
	loudOutage                   // as a warning: the collector, which reads all the time, does
)

// keep is call for a part that runs in the background, which has no caller
// to return an error to: a failure is acted on (handle), and keep reports
// whether the call succeeded.
func (f *faults) keep(ctx context.Context, s *shard, op string, l outageLog, do func() error) bool {
	err := f.call(s, op, do)
	if err != nil {
		f.handle(ctx, s, op, err, l)
	}
	return err == nil
}

// of says what a call to shard s begun at started that failed means for a
// caller: a *redmap.CommandError if Redis refused it for good,
// ErrUnavailable if Redis could not be reached (the shard's outage clock
// starts at started), ErrRedisFull at maxmemory; for a durable batch's
// owner whose write was fenced off, the *redmap.HeldError naming the
// manager that took the batch over, and the owner stops (lose).
func (f *faults) of(s *shard, op string, started time.Time, err error) error {
	if f.router.sharded() {
		op += " (shard " + strconv.Itoa(s.i) + ")"
	}
	var fenced *broker.FencedError
	switch {
	case errors.As(err, &fenced) && f.lose != nil:
		held := fmt.Errorf("%w: it took the batch over while this manager could not reach Redis for longer than its claim's lease (%s refused)",
			heldError(f.durable, fenced.Holder), op)
		f.lose(held)
		return held
	case broker.Refused(err):
		f.taskSetForeign(s, err)
		return err
	case broker.OutOfMemory(err):
		f.lastFull.Store(time.Now().UnixNano())
		return fmt.Errorf("%w: %s: %w", redmap.ErrRedisFull, op, err)
	case broker.Slow(err) && f.answers(s, started, err):
		s.outage.slow(started)
		return fmt.Errorf("%w: %s: %w: %w", redmap.ErrUnavailable, op, errSlow, err)
	case broker.Transient(err):
		s.outage.down(started)
		return fmt.Errorf("%w: %s: %w", redmap.ErrUnavailable, op, err)
	}
	return fmt.Errorf("manager: %s: %w", op, err)
}

// taskSetForeign acts on err, a refusal from shard s: if it says the
// manager's task set there holds foreign data, the tasks it held fail with
// err (their payloads and the record of what is outstanding went with the
// write), then the set is set aside, so that the manager's next batches run:
// their submit finds no count, and the recoverer starts the set's new
// history. Without it one foreign write would refuse every later submit.
func (f *faults) taskSetForeign(s *shard, err error) {
	var ce *redmap.CommandError
	if !errors.As(err, &ce) || ce.Key == "" {
		return
	}
	n := f.failShard(s, err)
	ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	if s.rdb.SetAsideTasks(ctx, &broker.SetAsideTasksParams{Manager: f.mid, Err: err}) {
		f.log.Error("the manager's task set held foreign data: its tasks failed, and the set was deleted", "key", ce.Key, "tasks", n, "err", err)
	}
}

// errSlow marks a call that did not end in time while Redis answered: not
// an outage, but the shard's stall (outage.slow), retried until a call
// completes or it has lasted RedisTimeout.
var errSlow = errors.New("manager: Redis answers, but the call did not end in time")

// answers reports whether shard s's Redis answers although a call begun at
// started failed with err, a timeout: a pool timeout (every pooled
// connection busy with a call in flight, which will end one way or the
// other), a call of the shard that completed since, or a PING that does.
func (f *faults) answers(s *shard, started time.Time, err error) bool {
	if errors.Is(err, redis.ErrPoolTimeout) || s.outage.answeredSince(started) {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	return s.rdb.Ping(ctx) == nil
}

// pingTimeout bounds the PING that tells a slow Redis from a gone one.
const pingTimeout = 2 * time.Second

// handle acts on err, what call made of a failed call of a background
// part to shard s: a refusal fails every outstanding task with the error that
// names the refused command, since the manager can no longer guarantee
// their results; an outage fails the shard's once it has lasted
// RedisTimeout. A call cut short by the manager's Close (ctx ended) is not
// worth a log line above debug.
func (f *faults) handle(ctx context.Context, s *shard, op string, err error, l outageLog) {
	if ctx.Err() != nil {
		f.log.Debug("stopped while "+op, "err", err)
		return
	}
	var ce *redmap.CommandError
	switch {
	case errors.Is(err, redmap.ErrDurableHeld):
		f.log.Debug("stopped while "+op+": another manager took the durable batch over", "err", err)
	case errors.As(err, &ce):
		f.log.Error("Redis refused a command the manager needs; failing its outstanding tasks", "op", op, "err", err)
		f.failAll(err)
	case errors.Is(err, redmap.ErrUnavailable):
		length := s.outage.length()
		if errors.Is(err, errSlow) {
			length = s.outage.stall()
		}
		if length < f.timeout {
			level := slog.LevelDebug
			if l == loudOutage {
				level = slog.LevelWarn
			}
			msg := "Redis unreachable; retrying"
			if errors.Is(err, errSlow) {
				msg = "Redis slow; retrying"
			}
			f.log.Log(ctx, level, msg, "op", op, "err", err, "for", length.Round(time.Millisecond))
			return
		}
		if n := f.failShard(s, fmt.Errorf("%w (for %v, RedisTimeout %v)", err, length.Round(time.Second), f.timeout)); n > 0 {
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
