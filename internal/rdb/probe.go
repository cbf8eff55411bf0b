package rdb

import (
	"context"
	_ "embed"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/keys"
)

var (
	//go:embed lua/probe.lua
	probeLua    string
	probeScript = newScript("probe.lua", probeLua)
)

// Probe checks that Redis lets this connection run every command redmap
// needs, on throwaway keys in the queue's slot and in the object cache's key
// space, and returns a *redmap.CommandError naming each refused command; nil
// if all are allowed. Four round trips: EVAL and EVALSHA of probe.lua, a
// pipeline of the commands redmap sends outside scripts (RPUSH, BLPOP on a
// list that is not empty, HMGET), and an empty MULTI/EXEC. Errors that are
// not refusals (Redis unreachable) are returned as they are.
func (r *RDB) Probe(ctx context.Context) error {
	id := redmap.NewID()
	var refusedCmds, replies []string
	note := func(op, cmd string, err error) error {
		if err == nil {
			return nil
		}
		ce := refused(op, nil, cmd, err)
		if ce == nil {
			return wrap(op, nil, cmd, err)
		}
		refusedCmds = append(refusedCmds, ce.Command)
		replies = append(replies, ce.Command+": "+ce.Reply)
		return nil
	}
	for _, k := range []struct{ key, cmd string }{
		{r.base + "probe:" + id, "EVAL"},
		{keys.Object(r.prefix, "probe-"+id) + ":x", "EVALSHA"},
	} {
		var res *redis.Cmd
		if k.cmd == "EVAL" {
			res = probeScript.Eval(ctx, r.c, []string{k.key})
		} else {
			res = probeScript.EvalSha(ctx, r.c, []string{k.key})
		}
		out, err := res.StringSlice()
		if err != nil && k.cmd == "EVALSHA" && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			continue // EVAL was refused, so the script was never loaded
		}
		if err := note("probe", k.cmd, err); err != nil {
			return err
		}
		for _, o := range out {
			name, _, _ := strings.Cut(o, ": ")
			refusedCmds = append(refusedCmds, name)
			replies = append(replies, o)
		}
	}
	l := r.base + "probe:" + id + ":bl"
	cmds, _ := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.RPush(ctx, l, "1")
		p.BLPop(ctx, time.Second, l)
		p.HMGet(ctx, l+":h", "f")
		p.Del(ctx, l)
		return nil
	})
	for _, c := range cmds {
		if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
			if err := note("probe", strings.ToUpper(c.Name()), err); err != nil {
				return err
			}
		}
	}
	_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.PTTL(ctx, l)
		return nil
	})
	if err := note("probe", "MULTI or EXEC", err); err != nil {
		return err
	}
	if len(refusedCmds) == 0 {
		return nil
	}
	kind := redmap.ErrRefused
	for _, rep := range replies {
		if strings.Contains(rep, "NOPERM") || strings.Contains(rep, "can't run") || strings.Contains(rep, "can't access") || strings.Contains(rep, "no permissions") {
			kind = redmap.ErrPermission
		}
	}
	return &redmap.CommandError{Op: "checking Redis permissions", Command: strings.Join(dedupe(refusedCmds), ", "),
		Reply: strings.Join(replies, "; "), Kind: kind}
}

func dedupe(xs []string) []string {
	seen := make(map[string]bool, len(xs))
	out := xs[:0]
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// PublishError writes msg as the "error" field of worker wid's info, living
// lease, for operators, when its heartbeat fails; best effort.
func (r *RDB) PublishError(ctx context.Context, wid string, lease time.Duration, msg string) {
	key := keys.WorkerInfo(r.prefix, r.queue, wid)
	_, _ = r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, key, "error", msg)
		p.PExpire(ctx, key, lease)
		return nil
	})
}
