package redisbroker

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/keys"
)

// PublishTypes records the structure of a handle's types under its
// signature, for workers that refuse its tasks to compare with. One pipeline.
func (r *Broker) PublishTypes(ctx context.Context, p *broker.PublishTypesParams) error {
	key := keys.Types(r.prefix, r.queue)
	err := r.asideOnce(ctx, key, "hash", func() error {
		_, err := r.c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			pipe.HSet(ctx, key, p.Sig, strings.Join(p.Types, "\n"))
			pipe.PExpire(ctx, key, 7*24*time.Hour)
			return nil
		})
		return err
	})
	return wrap("publish types", nil, "HSET or PEXPIRE", err)
}

// Types returns the structure published for sig, or nil if there is none.
func (r *Broker) Types(ctx context.Context, p *broker.TypesParams) ([]string, error) {
	var s string
	key := keys.Types(r.prefix, r.queue)
	err := r.asideOnce(ctx, key, "hash", func() (err error) {
		s, err = r.c.HGet(ctx, key, p.Sig).Result()
		return err
	})
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, wrap("types", nil, "HGET", err)
	}
	return strings.Split(s, "\n"), nil
}
