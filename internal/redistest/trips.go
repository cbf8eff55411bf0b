package redistest

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// RoundTrips is a go-redis hook that counts a client's round trips to
// Redis: each command sent alone, and each pipeline; not the handshake of a
// new connection (HELLO, CLIENT SETINFO, AUTH, SELECT, READONLY), which
// go-redis sends through the same hooks and which a loaded machine, where
// more of a pool's connections are dialled, multiplies. Add it with AddHook.
type RoundTrips struct{ n atomic.Int64 }

// N returns the round trips counted so far.
func (r *RoundTrips) N() int64 { return r.n.Load() }

// DialHook leaves dialling alone.
func (r *RoundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook counts a command.
func (r *RoundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !handshake(cmd) {
			r.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook counts a pipeline, whatever its length.
func (r *RoundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 0 || !handshake(cmds[0]) {
			r.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// handshake reports whether cmd is one go-redis sends as it dials a
// connection.
func handshake(cmd redis.Cmder) bool {
	switch strings.ToLower(cmd.Name()) {
	case "hello", "client", "auth", "select", "readonly":
		return true
	}
	return false
}
