package manager_test

import (
	"context"
	"slices"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// shardNames returns the names of queue's shards, as its list in Redis has
// them, shard 0 first.
func shardNames(t *testing.T, c redis.UniversalClient, queue string) []string {
	t.Helper()
	names, err := c.LRange(context.Background(), keys.ShardNames("redmap", queue), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{queue}, names...)
}

// shardCounts returns, for each of n shards of b's queue, how many tasks
// manager m ever submitted there (its task set's count).
func shardCounts(t *testing.T, c redis.UniversalClient, queue, mid string, n int) []int {
	t.Helper()
	names := shardNames(t, c, queue)
	if len(names) != n {
		t.Fatalf("the queue has shards %v, want %d", names, n)
	}
	out := make([]int, n)
	for i := range out {
		v, err := c.HGet(context.Background(), keys.Tasks("redmap", names[i], mid), "_").Result()
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
	_, c, m := twoWorkersFor(t, b, manager.Options{Shards: 3})

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
	for i, name := range shardNames(t, b.Client, b.Queue) {
		live, err := b.Client.ZRange(context.Background(), keys.Workers("redmap", name), 0, -1).Result()
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
	a, _, m := twoWorkersFor(t, b, manager.Options{Shards: 3})

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
	redisFault(t)
	srv := redistest.Start(t)
	b := faultBundle(t, srv, srv.Addr())
	runThroughShards(t, b, 3000, 3, func() { srv.FlushAll(t) })
}

func TestShardedRedisRestartedEmpty(t *testing.T) {
	redisFault(t)
	srv := redistest.Start(t)
	b := faultBundle(t, srv, srv.Addr())
	runThroughShards(t, b, 3000, 3, func() {
		srv.Kill(t)
		srv.Restart(t)
	})
}

// On a Cluster of three masters, three shards are on three masters (each
// name's slot, by keys.Slot and by CLUSTER KEYSLOT, on its own master), and
// a second manager of the queue uses the same names.
func TestShardedOnThreeMasters(t *testing.T) {
	redistest.OwnTopology(t)
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	b := &harness.Env{Client: cl.Client(t), URL: cl.URL(), Queue: "spread"}
	b.Worker(t, worker.Options{Concurrency: 4}, slowSquare)
	m := b.Manager(t, manager.Options{Shards: 3})
	batch, err := manager.Submit(testCtx(t), m, slowSquare, ints(3000), manager.ChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}
	exactlyOnce(t, batch, sq, nil)
	if got := shardCounts(t, b.Client, b.Queue, m.ID(), 3); got[0] != 1000 || got[1] != 1000 || got[2] != 1000 {
		t.Fatalf("tasks per shard %v, want 1000 each", got)
	}
	names := shardNames(t, b.Client, b.Queue)
	masters := map[int]string{}
	for _, name := range names {
		key := keys.Tasks("redmap", name, m.ID())
		slot, err := b.Client.ClusterKeySlot(context.Background(), key).Result()
		if err != nil || int(slot) != keys.Slot(key) {
			t.Fatalf("slot of %s: CLUSTER KEYSLOT %d, %v; keys.Slot %d", key, slot, err, keys.Slot(key))
		}
		masters[cl.NodeOf(t, key).Port] = name
	}
	if len(masters) != 3 {
		t.Fatalf("shards %v are on %d masters, want 3", names, len(masters))
	}
	m2 := b.Manager(t, manager.Options{Shards: 3})
	if _, err := manager.Map(testCtx(t), m2, slowSquare, ints(30), manager.ChunkSize(1)); err != nil {
		t.Fatal(err)
	}
	if again := shardNames(t, b.Client, b.Queue); !slices.Equal(again, names) {
		t.Fatalf("the second manager's shards %v, want the first's %v", again, names)
	}
	if got := shardCounts(t, b.Client, b.Queue, m2.ID(), 3); got[0]+got[1]+got[2] != 30 {
		t.Fatalf("the second manager's tasks per shard %v, want 30 in all", got)
	}
}
