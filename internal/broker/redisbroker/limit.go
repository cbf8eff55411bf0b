package redisbroker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/keys"
)

// DeclareLimit records rec as the limit declared with function fn's
// handle, unless the code's record says as much already, and returns the
// limit in force afterwards ("" if none) and its source. The queue must
// be shard 0 (limits live there). One script call.
func (r *Broker) DeclareLimit(ctx context.Context, p *broker.DeclareLimitParams) (*broker.LimitResult, error) {
	lim, from, err := r.limit(ctx, wire.LimitFromCode, p.Func, &p.Record)
	if err != nil {
		return nil, err
	}
	return &broker.LimitResult{Limit: lim, From: from}, nil
}

// SetLimit records rec as an operator's limit of function fn, which wins
// over the code's; see DeclareLimit.
func (r *Broker) SetLimit(ctx context.Context, fn string, rec wire.LimitRecord) (wire.Limit, string, error) {
	return r.limit(ctx, wire.LimitFromOperator, fn, &rec)
}

// ClearLimit drops the operator's limit of function fn: the code's, if
// any, is in force again; see DeclareLimit.
func (r *Broker) ClearLimit(ctx context.Context, fn string) (wire.Limit, string, error) {
	return r.limit(ctx, "clear", fn, nil)
}

// ReadLimit returns the limit of function fn in force and its source,
// without writing.
func (r *Broker) ReadLimit(ctx context.Context, p *broker.ReadLimitParams) (*broker.LimitResult, error) {
	lim, from, err := r.limit(ctx, "read", p.Func, nil)
	if err != nil {
		return nil, err
	}
	return &broker.LimitResult{Limit: lim, From: from}, nil
}

func (r *Broker) limit(ctx context.Context, kind, fn string, rec *wire.LimitRecord) (wire.Limit, string, error) {
	args := []any{kind, fn, "", ""}
	if rec != nil {
		b, err := json.Marshal(rec)
		if err != nil {
			return wire.Limit{}, "", fmt.Errorf("limit of %q: %v", fn, err)
		}
		args[2], args[3] = b, rec.Limit
	}
	v, err := limitScript.run(ctx, r.c, []string{keys.Limits(r.prefix, r.queue), keys.LimitState(r.prefix, r.queue)}, args...).StringSlice()
	if err != nil {
		return wire.Limit{}, "", wrap("limit", limitScript, "", err)
	}
	if len(v) != 2 {
		return wire.Limit{}, "", fmt.Errorf("limit: script returned %d values, not 2", len(v))
	}
	if v[0] == "" {
		return wire.Limit{}, "", nil
	}
	l, err := wire.ParseLimit(v[0])
	return l, v[1], err
}

// Limits returns the queue's limits, one per function that has a record,
// sorted by function. Two round trips: the limits and their state, then
// one pipeline of the running counts.
func (r *Broker) Limits(ctx context.Context) ([]wire.FuncLimit, error) {
	var all, state *redis.MapStringStringCmd
	_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		all = p.HGetAll(ctx, keys.Limits(r.prefix, r.queue))
		state = p.HGetAll(ctx, keys.LimitState(r.prefix, r.queue))
		return nil
	})
	if err != nil {
		return nil, wrap("limits", nil, "HGETALL", err)
	}
	out := decodeLimits(all.Val(), state.Val())
	cmds := make([]*redis.IntCmd, len(out))
	_, err = r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, f := range out {
			cmds[i] = p.HLen(ctx, keys.LimitRunning(r.prefix, r.queue, f.Func))
		}
		return nil
	})
	if err != nil && len(out) > 0 {
		return nil, wrap("limits", nil, "HLEN", err)
	}
	for i := range out {
		out[i].Running = cmds[i].Val()
	}
	if len(out) == 0 {
		return out, nil
	}
	waiting, err := r.waitingByFunc(ctx)
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Waiting = waiting[out[i].Func]
	}
	return out, nil
}

// decodeLimits reads the queue's limits hash, all, and their state hash
// into one limit per function that has a record, sorted by function.
func decodeLimits(all, state map[string]string) []wire.FuncLimit {
	byFunc := map[string]*wire.FuncLimit{}
	for field, v := range all {
		addLimitField(byFunc, field, v)
	}
	for field, v := range state {
		// "w\t<function>": tasks refused; "r\t<function>": when to retry.
		kind, fn, ok := strings.Cut(field, "\t")
		f := byFunc[fn]
		if !ok || f == nil {
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		switch kind {
		case "w":
			f.Refused = n
		case "r":
			f.RetryAfter = n
		}
	}
	out := make([]wire.FuncLimit, 0, len(byFunc))
	for _, f := range byFunc {
		switch {
		case f.Operator != nil:
			f.Source = wire.LimitFromOperator
		case f.Code != nil:
			f.Source = wire.LimitFromCode
		}
		out = append(out, *f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Func < out[j].Func })
	return out
}

// addLimitField adds field v of the limits hash to its function's limit in
// byFunc: the limit in force (the field is the function's name) or a
// source's record ("<source>\t<function>"); a field of another source is
// skipped.
func addLimitField(byFunc map[string]*wire.FuncLimit, field, v string) {
	src, fn, sourced := strings.Cut(field, "\t")
	if !sourced {
		fn = field
	} else if src != wire.LimitFromCode && src != wire.LimitFromOperator {
		return
	}
	f := byFunc[fn]
	if f == nil {
		f = &wire.FuncLimit{Func: fn}
		byFunc[fn] = f
	}
	if !sourced {
		l, err := wire.ParseLimit(v)
		if err != nil {
			f.Bad = err.Error()
			return
		}
		f.InForce = l
		return
	}
	rec, err := wire.DecodeLimitRecord([]byte(v))
	switch {
	case err != nil:
		f.Bad = err.Error()
	case src == wire.LimitFromCode:
		f.Code = &rec
	default:
		f.Operator = &rec
	}
}

// waitingByFunc counts the tasks queued in the public lanes by the
// function they call: the rings' lanes, then per lane what it calls and
// its length. Three round trips.
func (r *Broker) waitingByFunc(ctx context.Context) (map[string]int64, error) {
	rings := make([]*redis.StringSliceCmd, len(r.rings))
	_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, ring := range r.rings {
			rings[i] = p.LRange(ctx, ring, 0, -1)
		}
		return nil
	})
	if err != nil {
		return nil, wrap("limits", nil, "LRANGE", err)
	}
	var lanes []string
	for _, c := range rings {
		lanes = append(lanes, c.Val()...)
	}
	calls := make([]*redis.StringCmd, len(lanes))
	lens := make([]*redis.IntCmd, len(lanes))
	_, err = r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, lane := range lanes {
			mid, l, _ := strings.Cut(lane, ".")
			calls[i] = p.HGet(ctx, keys.Lanes(r.prefix, r.queue, mid), l)
			lens[i] = p.LLen(ctx, keys.Lane(r.prefix, r.queue, lane))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, wrap("limits", nil, "HGET", err)
	}
	out := map[string]int64{}
	for i := range lanes {
		fn, _, _ := strings.Cut(calls[i].Val(), "\t")
		if fn != "" {
			out[fn] += lens[i].Val()
		}
	}
	return out, nil
}

// Limits is Broker.Limits of queue p.Queue, for operators.
func (a *Admin) Limits(ctx context.Context, p *broker.QueueParams) ([]wire.FuncLimit, error) {
	if err := keys.CheckQueue(p.Queue); err != nil {
		return nil, err
	}
	return a.Queue(p.Queue).Limits(ctx)
}

// SetLimit is Broker.SetLimit of queue p.Queue, for operators.
func (a *Admin) SetLimit(ctx context.Context, p *broker.SetLimitParams) (*broker.LimitResult, error) {
	if err := keys.CheckQueue(p.Queue); err != nil {
		return nil, err
	}
	lim, from, err := a.Queue(p.Queue).SetLimit(ctx, p.Func, p.Record)
	if err != nil {
		return nil, err
	}
	return &broker.LimitResult{Limit: lim, From: from}, nil
}

// ClearLimit is Broker.ClearLimit of queue p.Queue, for operators.
func (a *Admin) ClearLimit(ctx context.Context, p *broker.ClearLimitParams) (*broker.LimitResult, error) {
	if err := keys.CheckQueue(p.Queue); err != nil {
		return nil, err
	}
	lim, from, err := a.Queue(p.Queue).ClearLimit(ctx, p.Func)
	if err != nil {
		return nil, err
	}
	return &broker.LimitResult{Limit: lim, From: from}, nil
}

// Admin is the operators' part of the broker contract on Redis.
var _ broker.Operator = (*Admin)(nil)
