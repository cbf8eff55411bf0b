package redisbroker

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/broker"
)

// A Cluster client of go-redis reloads its map of slots to masters on a
// MOVED, ASK or READONLY reply, and otherwise only every
// ClusterStateReloadInterval (60 s by default): after a master dies and its
// replica is promoted, it keeps dialling the dead master for up to a minute
// (go-redis issue #3979). followFailovers adds a hook to a Cluster client
// that asks for a reload whenever a command, a pipeline or a blocking read
// meets a node it cannot reach or a Cluster between two states, so the
// next try (redmap retries every transient error) goes to the new master.
// Reloads are go-redis's lazy ones: asynchronous, and coalesced (one at a
// time, then at most one more after a 200 ms pause), so a storm of errors
// costs a few CLUSTER SLOTS, not one each.
//
// The first errors come before the promotion, while every node still names
// the dead master, and a slot the program then leaves alone for a while (a
// constant's, held every Poll) would keep the stale map until a command to
// it fails again. So after such an error the hook goes on reloading every
// followEvery, on the program's next command, until followFor has passed
// without one: about 30 CLUSTER SLOTS per failover, none while the Cluster
// is well, and no goroutine of the hook's own.
const (
	followEvery = time.Second
	followFor   = 30 * time.Second
)

// followed holds the Cluster clients already given the hook: a program may
// make many managers, workers and stores on one client. Its keys are weak,
// and a client's entry is deleted once the client is collected: a program
// that makes a client per job does not grow it for ever.
var followed sync.Map // weak.Pointer[redis.ClusterClient] → struct{}

// followFailovers adds the reload hook to c if it is a Cluster client
// without one; other clients are left as they are (Sentinel's failover
// client follows the sentinels' announcements itself).
func followFailovers(c redis.UniversalClient) {
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		return
	}
	key := weak.Make(cc)
	if _, had := followed.LoadOrStore(key, struct{}{}); had {
		return
	}
	runtime.AddCleanup(cc, func(key weak.Pointer[redis.ClusterClient]) { followed.Delete(key) }, key)
	cc.AddHook(&reloadHook{c: cc})
}

type reloadHook struct {
	c     *redis.ClusterClient
	until atomic.Int64 // Unix ns: reload every followEvery until then
	last  atomic.Int64 // Unix ns of the last reload asked for
}

// stale reloads the map now, and has follow reload it every followEvery
// until followFor after the last call.
func (h *reloadHook) stale(ctx context.Context) {
	now := time.Now()
	h.until.Store(now.Add(followFor).UnixNano())
	h.last.Store(now.UnixNano())
	h.c.ReloadState(ctx)
}

// follow reloads the map if a stale one was met within followFor and the
// last reload is followEvery old. It runs on the program's own commands
// (a manager's or a worker's run every Poll or Heartbeat at most), so the
// hook has no goroutine of its own to outlive the client; one atomic load
// a command while the Cluster is well.
func (h *reloadHook) follow(ctx context.Context) {
	now := time.Now().UnixNano()
	if now > h.until.Load() {
		return
	}
	last := h.last.Load()
	if now-last < int64(followEvery) || !h.last.CompareAndSwap(last, now) {
		return
	}
	h.c.ReloadState(ctx)
}

// DialHook leaves dialling as it is.
func (h *reloadHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook asks for a reload after a command that met a stale map.
func (h *reloadHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if staleMap(err) {
			h.stale(ctx)
		} else {
			h.follow(ctx)
		}
		return err
	}
}

// ProcessPipelineHook asks for a reload after a pipeline any of whose
// commands met a stale map.
func (h *reloadHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		stale := staleMap(err)
		for _, cmd := range cmds {
			stale = stale || staleMap(cmd.Err())
		}
		if stale {
			h.stale(ctx)
		} else {
			h.follow(ctx)
		}
		return err
	}
}

// mapReplies are the replies of a Cluster node that say the client's map
// may be out of date: the cluster is down (a master failed and its replica
// is not yet promoted), a master is down, a blocked read was ended because
// the node changed role (UNBLOCKED), a node is no longer a master
// (READONLY; go-redis reloads on it too), a slot is half moved (TRYAGAIN).
var mapReplies = []string{"CLUSTERDOWN", "MASTERDOWN", "UNBLOCKED", "READONLY", "TRYAGAIN"}

// staleMap reports whether err may mean that the client's map of slots to
// masters is out of date: a node it could not reach or whose connection
// broke, or one of mapReplies.
func staleMap(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) || errors.Is(err, redis.ErrClosed) {
		return false
	}
	return broker.Unreachable(err) || broker.ReplyIn(err, mapReplies)
}
