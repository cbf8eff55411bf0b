package redistest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// RoundTrips is a go-redis hook that counts a client's round trips to
// Redis: each command sent alone, and each pipeline; not the handshake of a
// new connection (HELLO, CLIENT SETINFO, AUTH, SELECT, READONLY), which
// go-redis sends through the same hooks and which a loaded machine, where
// more of a pool's connections are dialled, multiplies. Add it with AddHook.
type RoundTrips struct {
	n     atomic.Int64
	mu    sync.Mutex
	names map[string]int64
}

// N returns the round trips counted so far.
func (r *RoundTrips) N() int64 { return r.n.Load() }

// String lists the round trips counted so far by their first command's
// name, most first: what a failing bound prints.
func (r *RoundTrips) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	type kv struct {
		k string
		v int64
	}
	var kvs []kv
	for k, v := range r.names {
		kvs = append(kvs, kv{k, v})
	}
	sort.Slice(kvs, func(i, j int) bool { return kvs[i].v > kvs[j].v || kvs[i].v == kvs[j].v && kvs[i].k < kvs[j].k })
	var b strings.Builder
	for i, e := range kvs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", e.k, e.v)
	}
	return b.String()
}

func (r *RoundTrips) count(cmd redis.Cmder, pipeline bool) {
	r.n.Add(1)
	name := strings.ToLower(cmd.Name())
	if pipeline {
		name = "pipeline(" + name + ")"
	}
	r.mu.Lock()
	if r.names == nil {
		r.names = make(map[string]int64)
	}
	r.names[name]++
	r.mu.Unlock()
}

// DialHook leaves dialling alone.
func (r *RoundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook counts a command.
func (r *RoundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !handshake(cmd) {
			r.count(cmd, false)
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook counts a pipeline, whatever its length.
func (r *RoundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && !handshake(cmds[0]) {
			r.count(cmds[0], true)
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
