package manager_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// Redis-side faults: each test has a redis-server of its own (or a proxy in
// front of one) so it can kill, flush or cut it, with in-process workers.

// faultBundle is a bundle on a server of the test's own, reached through addr
// (the server, or a proxy in front of it).
func faultBundle(t *testing.T, srv *redistest.Server, addr string) *harness.Env {
	t.Helper()
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	return &harness.Env{Srv: srv, Client: c, URL: "redis://" + addr + "/0", Queue: "faults"}
}

// runThrough submits n slow squares (half of them with a constant), calls
// fault once a fifth of each batch is back, and checks that every element
// of both batches has exactly one correct result.
func runThrough(t *testing.T, b *harness.Env, n int, fault func()) {
	t.Helper()
	runThroughShards(t, b, n, 0, fault)
}

// runThroughShards is runThrough with a manager spreading its tasks over
// shards shards of the queue (0: as redistest.ShardsEnv says).
func runThroughShards(t *testing.T, b *harness.Env, n, shards int, fault func()) {
	t.Helper()
	b.Worker(t, worker.Options{Concurrency: 4, Heartbeat: 200 * time.Millisecond, Lease: time.Second}, slowSquare, lookup)
	b.Worker(t, worker.Options{Concurrency: 4, Heartbeat: 200 * time.Millisecond, Lease: time.Second}, slowSquare, lookup)
	m := b.Manager(t, manager.Options{Poll: 100 * time.Millisecond, Shards: shards})
	ctx := testCtx(t)

	tab := table(1 << 20)
	withConst, err := manager.SubmitWith(ctx, m, lookup, tab, ints(n), manager.ChunkSize(5))
	if err != nil {
		t.Fatal(err)
	}
	batch, err := manager.Submit(ctx, m, slowSquare, ints(n), manager.ChunkSize(5))
	if err != nil {
		t.Fatal(err)
	}
	faulted := false
	exactlyOnce(t, batch, sq, func(seen int) {
		if seen == n/5 {
			fault()
			faulted = true
		}
	})
	if !faulted {
		t.Fatal("the fault never happened")
	}
	ys, err := withConst.Wait(ctx)
	if err != nil {
		t.Fatalf("batch with a constant: %v", err)
	}
	for i, y := range ys {
		if y != tab[i] {
			t.Fatalf("batch with a constant: ys[%d] = %d, want %d", i, y, tab[i])
		}
	}
}

// redisFault skips t under go test -short: it breaks a Redis of its own
// (killed, flushed) under two batches of 3,000 elements, seconds of work
// and recovery that make test runs.
func redisFault(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("a Redis killed or flushed under 6,000 elements: make test runs it")
	}
}

func TestFaultRedisRestartedEmpty(t *testing.T) {
	redisFault(t)
	srv := redistest.Start(t)
	b := faultBundle(t, srv, srv.Addr())
	runThrough(t, b, 3000, func() {
		srv.Kill(t)
		srv.Restart(t)
	})
}

func TestFaultFlushAll(t *testing.T) {
	redisFault(t)
	srv := redistest.Start(t)
	b := faultBundle(t, srv, srv.Addr())
	runThrough(t, b, 3000, func() { srv.FlushAll(t) })
}

func TestFaultScriptFlush(t *testing.T) {
	redisFault(t)
	srv := redistest.Start(t)
	b := faultBundle(t, srv, srv.Addr())
	runThrough(t, b, 3000, func() {
		if err := srv.Client(t).ScriptFlush(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	})
}

// clusterBundle is a bundle on a 3-master Cluster of the test's own.
func clusterBundle(t *testing.T) (*harness.Env, *redistest.Cluster) {
	redistest.OwnTopology(t)
	t.Helper()
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	return &harness.Env{Client: cl.Client(t), URL: cl.URL(), Queue: "faults"}, cl
}

// The master holding the queue's slot restarts empty (it keeps its slots:
// its cluster config survives, its data does not).
func TestFaultClusterNodeRestartedEmpty(t *testing.T) {
	b, cl := clusterBundle(t)
	node := cl.NodeOf(t, keys.Workers("redmap", b.Queue))
	runThrough(t, b, 3000, func() {
		node.Kill(t)
		node.Restart(t)
	})
}

// Every master is flushed: the queue, the task sets and the constant go.
func TestFaultClusterFlushAll(t *testing.T) {
	b, cl := clusterBundle(t)
	runThrough(t, b, 3000, func() { cl.FlushAll(t) })
}

// The queue's slot moves to another master in the middle of a batch, one
// key per MIGRATE, while workers take and finish and the manager submits
// and collects (clients follow ASK and retry TRYAGAIN): every element exact.
func TestFaultClusterSlotMigrated(t *testing.T) {
	b, cl := clusterBundle(t)
	key := keys.Workers("redmap", b.Queue)
	to := cl.Nodes[0]
	if cl.NodeOf(t, key) == to {
		to = cl.Nodes[1]
	}
	runThrough(t, b, 3000, func() {
		// The pause between batches is the point: the slot stays half
		// moved while the batch runs.
		moved := cl.MigrateSlot(t, key, to, 1, func(int) { time.Sleep(10 * time.Millisecond) })
		refused := 0
		for _, n := range cl.Nodes {
			info := n.Client(t).Info(context.Background(), "errorstats").Val()
			for _, kind := range []string{"TRYAGAIN", "ASK"} {
				if _, rest, ok := strings.Cut(info, "errorstat_"+kind+":count="); ok {
					c, _, _ := strings.Cut(rest, "\r")
					k, _ := strconv.Atoi(c)
					refused += k
				}
			}
		}
		t.Logf("moved the queue's slot, %d keys, to %s mid-batch; %d calls redirected or refused meanwhile", moved, to.Addr(), refused)
		if refused == 0 {
			t.Error("no call met the slot half-moved: the test did not test the migration")
		}
	})
}

// A proxy between every client and Redis drops every connection, five times
// in the middle of the batch.
func TestFaultConnectionsDropped(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	b := faultBundle(t, srv, proxy.Addr())
	runThrough(t, b, 3000, func() {
		dropped := 0
		for range 5 {
			dropped += proxy.DropAll()
			time.Sleep(20 * time.Millisecond) // let clients reconnect between drops
		}
		t.Logf("dropped %d connections", dropped)
		if dropped == 0 {
			t.Error("no connection to drop")
		}
	})
}

// At maxmemory with noeviction, Submit says so and queues nothing; smaller
// batches still run.
func TestFaultRedisFull(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
	b := faultBundle(t, srv, srv.Addr())
	b.Worker(t, worker.Options{}, echo)
	m := b.Manager(t, manager.Options{})
	ctx := testCtx(t)

	big := make([]string, 200)
	for i := range big {
		big[i] = strings.Repeat("x", 64<<10) // 12.5 MiB in all
	}
	_, err := manager.Map(ctx, m, echo, big, manager.ChunkSize(1))
	if !errors.Is(err, redmap.ErrRedisFull) {
		t.Fatalf("a batch larger than maxmemory: got %v, want ErrRedisFull", err)
	}
	t.Logf("submit at maxmemory: %v", err)
	ys, err := manager.Map(ctx, m, echo, []string{"a", "b"})
	if err != nil || ys[1] != "b" {
		t.Fatalf("a small batch after: %v, %v", ys, err)
	}
}

var echo = redmap.Func("echo", func(_ context.Context, s string) (string, error) { return s, nil })
