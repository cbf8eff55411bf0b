package redisbroker

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/keys"
)

// WaitBell blocks until a submit rings worker wid's bell or timeout passes.
// It reports whether the bell rang.
func (r *Broker) WaitBell(ctx context.Context, p *broker.WaitBellParams) (bool, error) {
	bell := keys.Bell(r.prefix, r.queue, p.Worker)
	err := r.asideOnce(ctx, bell, "list", func() error { return r.c.BLPop(ctx, blocking(p.Timeout), bell).Err() })
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, wrap("wait", nil, "BLPOP", err)
	}
	return true, nil
}

// blpop queues on p a BLPOP of key for timeout. go-redis's BLPop rounds a
// timeout below a second up to one (it sends whole seconds); Redis takes a
// decimal one (6.0 and later), which a worker waiting for a limit's next
// token needs: it sends that itself. The connection's read timeout covers
// a wait below a second.
func blpop(ctx context.Context, p redis.Pipeliner, key string, timeout time.Duration) *redis.StringSliceCmd {
	if timeout >= time.Second {
		return p.BLPop(ctx, timeout, key)
	}
	cmd := redis.NewStringSliceCmd(ctx, "blpop", key, strconv.FormatFloat(timeout.Seconds(), 'f', 3, 64))
	_ = p.Process(ctx, cmd)
	return cmd
}

// blocking returns the timeout to give a blocking command: at least a second,
// since go-redis rounds shorter ones up to that anyway, logging a warning
// each time.
func blocking(timeout time.Duration) time.Duration { return max(timeout, time.Second) }

// RingStop wakes worker wid if it is blocked in WaitBell or WaitTake, as a
// worker does to itself when it stops, and leaves a "stop" token on its bell
// that makes take.lua take nothing: a WaitTake whose wait this ring ends
// takes no task for a worker that is stopping.
func (r *Broker) RingStop(ctx context.Context, p *broker.RingStopParams) error {
	return r.push(ctx, "ring", keys.Bell(r.prefix, r.queue, p.Worker), "stop", "stop")
}

// push appends vs to list key and gives the list a minute to live, so a
// wake-up nobody pops leaks nothing.
func (r *Broker) push(ctx context.Context, what, key string, vs ...any) error {
	err := r.asideOnce(ctx, key, "list", func() error {
		_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.RPush(ctx, key, vs...)
			p.PExpire(ctx, key, time.Minute)
			return nil
		})
		return err
	})
	return wrap(what, nil, "RPUSH, PEXPIRE, MULTI or EXEC", err)
}
