// Package harness starts what redmap's tests work with, the one way every
// package's tests do it: a queue of the test's own on a Redis server the
// tests started (see redistest), in-process managers and workers that end
// with the test, and processes (workers, managers, the CLI) read line by line
// and stopped with real signals.
package harness

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// Env is one test's world: a Redis, a client of it, its URL (for
// processes), and a queue no other test uses.
type Env struct {
	Srv    *redistest.Server // the server, if the Redis is one server
	Client redis.UniversalClient
	URL    string
	Queue  string
}

// Setup marks t parallel and returns its Env on the package's shared Redis:
// one server, or the shared Cluster if the tests run on one (see
// redistest.Run).
func Setup(t testing.TB) *Env {
	t.Helper()
	if p, ok := t.(interface{ Parallel() }); ok {
		p.Parallel()
	}
	if cl := redistest.SharedCluster(); cl != nil {
		return &Env{Client: cl.Client(t), URL: cl.URL(), Queue: redistest.Queue(t)}
	}
	return On(t, redistest.Shared(t))
}

// On returns t's Env on srv (a server the test started, to break).
func On(t testing.TB, srv *redistest.Server) *Env {
	t.Helper()
	return &Env{Srv: srv, Client: srv.Client(t), URL: srv.URL(), Queue: redistest.Queue(t)}
}

// Keys returns the keys matching pattern: on a Cluster, from every master
// (a KEYS runs on one node only).
func (e *Env) Keys(t testing.TB, pattern string) []string {
	t.Helper()
	ctx := context.Background()
	cc, ok := e.Client.(*redis.ClusterClient)
	if !ok {
		ks, err := e.Client.Keys(ctx, pattern).Result()
		if err != nil {
			t.Fatal(err)
		}
		return ks
	}
	var mu sync.Mutex
	var out []string
	err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		ks, err := node.Keys(ctx, pattern).Result()
		mu.Lock()
		out = append(out, ks...)
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Manager returns a manager of the Env's queue (opts.Queue is set), closed
// when the test ends, its Close checked. Unless opts.Shards is set, it
// spreads tasks over the shards redistest.ShardsEnv asks for.
func (e *Env) Manager(t testing.TB, opts manager.Options) *manager.Manager {
	t.Helper()
	opts.Queue = e.Queue
	if opts.Shards == 0 {
		opts.Shards = redistest.Shards()
	}
	m, err := manager.New(e.Client, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("manager close: %v", err)
		}
	})
	return m
}

// Worker starts an in-process worker of the Env's queue serving hs; it is
// stopped, and Run's return checked, when the test ends.
func (e *Env) Worker(t testing.TB, opts worker.Options, hs ...redmap.AnyHandle) *worker.Worker {
	t.Helper()
	w, stop, ran := e.StartWorker(t, opts, hs...)
	t.Cleanup(func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("worker run: %v", err)
		}
	})
	return w
}

// StartWorker starts an in-process worker of the Env's queue serving hs, for
// a test that watches it stop: stop ends Run's context (it is also called
// when the test ends), and ran receives what Run returned.
func (e *Env) StartWorker(t testing.TB, opts worker.Options, hs ...redmap.AnyHandle) (w *worker.Worker, stop context.CancelFunc, ran <-chan error) {
	t.Helper()
	opts.Queue = e.Queue
	w, err := worker.New(e.Client, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(hs...); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	return w, cancel, done
}

// WaitLive waits until m sees every worker id as live.
func WaitLive(t testing.TB, m *manager.Manager, ids ...string) {
	t.Helper()
	redistest.Eventually(t, "workers live", func() bool {
		live, err := m.Workers(context.Background())
		if err != nil {
			return false
		}
		for _, id := range ids {
			if !slices.Contains(live, id) {
				return false
			}
		}
		return true
	})
}

// Queued returns the ids of the tasks queued in queue's lanes (a shard's
// name, for a shard), highest priority first, each lane in its ring's
// order: what workers may take, private lists apart.
func Queued(t testing.TB, c redis.UniversalClient, queue string) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	for _, ring := range keys.Rings("redmap", queue) {
		lanes, err := c.LRange(ctx, ring, 0, -1).Result()
		if err != nil {
			t.Fatalf("reading %s: %v", ring, err)
		}
		for _, lane := range lanes {
			got, err := c.LRange(ctx, keys.Lane("redmap", queue, lane), 0, -1).Result()
			if err != nil {
				t.Fatalf("reading lane %s: %v", lane, err)
			}
			ids = append(ids, got...)
		}
	}
	return ids
}

// Busy makes, on srv, a busy queue for each n of waiting: a queue of its
// own, named after t's with "-busyJ" (J its index in waiting), with a
// batch of fn over 0..n-1 in one task an element, waiting for a worker
// (none is started; the batch is cancelled when the test ends). It
// returns their Envs, in the order of waiting.
func Busy(t testing.TB, srv *redistest.Server, fn *redmap.Handle[int, int], waiting ...int) []*Env {
	t.Helper()
	var envs []*Env
	for j, n := range waiting {
		e := On(t, srv)
		e.Queue = fmt.Sprintf("%s-busy%d", e.Queue, j)
		m := e.Manager(t, manager.Options{NoWorkerTimeout: -1, Logger: slog.New(slog.DiscardHandler)})
		xs := make([]int, n)
		for i := range xs {
			xs[i] = i
		}
		b, err := manager.Submit(context.Background(), m, fn, xs, manager.ChunkSize(1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Cancel)
		envs = append(envs, e)
	}
	return envs
}

// IndexIdle adds n queues, idle-000 to idle-NNN (n-1), to the index of
// queues, as queues seen lately with nothing in them.
func IndexIdle(t testing.TB, c redis.UniversalClient, n int) {
	t.Helper()
	var idle []redis.Z
	for j := range n {
		idle = append(idle, redis.Z{Score: float64(time.Now().UnixMilli()), Member: fmt.Sprintf("idle-%03d", j)})
	}
	if err := c.ZAdd(context.Background(), keys.QueueIndex("redmap"), idle...).Err(); err != nil {
		t.Fatal(err)
	}
}
