package manager_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
)

// shardCounts returns, for each of n shards of b's queue, how many tasks
// manager m ever submitted there (its task set's count).
func shardCounts(t *testing.T, c redis.UniversalClient, queue, mid string, n int) []int {
	t.Helper()
	out := make([]int, n)
	for i := range out {
		v, err := c.HGet(context.Background(), keys.Tasks("redmap", keys.Shard(queue, i), mid), "_").Result()
		if err != nil {
			t.Fatalf("shard %d's task set: %v", i, err)
		}
		out[i], _ = strconv.Atoi(v)
	}
	return out
}

// A manager spreading a queue over three shards: worker processes started
// before it learn the shard count from Redis and serve every shard; each
// shard gets a third of the tasks; a public and a private batch end with
// every element exactly once.
func TestShardedQueue(t *testing.T) {
	b := setup(t)
	a := startChild(t, "worker", childEnv(b)...)
	c := startChild(t, "worker", childEnv(b)...)
	a.ID, c.ID = a.Expect(t, "worker "), c.Expect(t, "worker ")
	m := b.Manager(t, manager.Options{Shards: 3})
	harness.WaitLive(t, m, a.ID, c.ID)

	batch, err := manager.Submit(testCtx(t), m, slowSquare, ints(3000), manager.ChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}
	exactlyOnce(t, batch, sq, nil)
	got := shardCounts(t, b.Client, b.Queue, m.ID(), 3)
	for _, n := range got {
		if n != 1000 {
			t.Fatalf("tasks per shard %v, want 1000 each (task i goes to shard i mod 3)", got)
		}
	}

	// Both workers registered on every shard: each serves all three.
	for i := range 3 {
		live, err := b.Client.ZRange(context.Background(), keys.Workers("redmap", keys.Shard(b.Queue, i)), 0, -1).Result()
		if err != nil || len(live) != 2 {
			t.Fatalf("workers of shard %d: %v, %v; want both", i, live, err)
		}
	}

	// A private batch: its tasks all go to shard 0, where a worker
	// registers first (so a worker that dies is always reaped there).
	private, err := manager.Submit(testCtx(t), m, slowSquare, ints(300), manager.ChunkSize(1), manager.OnWorker(c.ID))
	if err != nil {
		t.Fatal(err)
	}
	exactlyOnce(t, private, sq, nil)
	if got := shardCounts(t, b.Client, b.Queue, m.ID(), 3); got[0] != 1300 || got[1] != 1000 || got[2] != 1000 {
		t.Fatalf("tasks per shard after the private batch %v, want [1300 1000 1000]", got)
	}
}

// A worker process SIGKILLed in the middle of a batch on three shards:
// its tasks on every shard go back when its lease expires there.
func TestShardedWorkerKilled(t *testing.T) {
	b := setup(t)
	a := startChild(t, "worker", childEnv(b)...)
	c := startChild(t, "worker", childEnv(b)...)
	a.ID, c.ID = a.Expect(t, "worker "), c.Expect(t, "worker ")
	m := b.Manager(t, manager.Options{Shards: 3})
	harness.WaitLive(t, m, a.ID, c.ID)

	batch, err := manager.Submit(testCtx(t), m, slowSquare, ints(3000), manager.ChunkSize(5))
	if err != nil {
		t.Fatal(err)
	}
	exactlyOnce(t, batch, sq, func(seen int) {
		if seen == 300 {
			a.Kill()
		}
	})
}

// Redis loses every key in the middle of a sharded batch, or restarts
// empty: the manager finds what each shard lost and submits it again, and
// puts the constant back.
func TestShardedFlushAll(t *testing.T) {
	srv := redistest.Start(t)
	b := faultBundle(t, srv, srv.Addr())
	runThroughShards(t, b, 3000, 3, func() { srv.FlushAll(t) })
}

func TestShardedRedisRestartedEmpty(t *testing.T) {
	srv := redistest.Start(t)
	b := faultBundle(t, srv, srv.Addr())
	runThroughShards(t, b, 3000, 3, func() {
		srv.Kill(t)
		srv.Restart(t)
	})
}
