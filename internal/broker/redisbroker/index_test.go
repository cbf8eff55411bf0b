package redisbroker

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/keys"
)

// A worker's heartbeat and a manager's publish name their queue in the
// index of queues (shard 0 only, at the first call, then at most every
// QueueIndexEvery); Queues lists what the index names within
// QueueIndexAge, and a write drops older names; ScanQueues finds what no
// writer named and indexes it.
func TestQueueIndex(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	prefix := "ix-" + f.queue // an index of the test's own
	a := NewAdmin(f.c, prefix)
	listed := func(want ...string) {
		t.Helper()
		got, err := a.Queues(ctx)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("Queues = %q, %v; want %q", got, err, want)
		}
	}
	listed()
	w := New(f.c, prefix, "q1")
	if _, err := w.Heartbeat(ctx, &broker.HeartbeatParams{Worker: "w1", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := NewShard(f.c, prefix, keys.Shard("q2", 1), 1).Heartbeat(ctx, &broker.HeartbeatParams{Worker: "w1", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	listed("q1") // a shard other than 0 names nothing

	// Named again only once QueueIndexEvery has passed: a heartbeat a
	// second costs no more than it did.
	if err := f.c.Del(ctx, keys.QueueIndex(prefix)).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Heartbeat(ctx, &broker.HeartbeatParams{Worker: "w1", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	listed()

	// A name older than QueueIndexAge is not listed, and the next write
	// drops it.
	now, err := a.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	old := float64(now - keys.QueueIndexAge.Milliseconds() - 1000)
	if err := f.c.ZAdd(ctx, keys.QueueIndex(prefix), redis.Z{Score: old, Member: "old"}).Err(); err != nil {
		t.Fatal(err)
	}
	listed()
	p := wire.BatchProgress{Func: "f", Total: 1}
	if _, err := New(f.c, prefix, "q3").PublishBatches(ctx, &broker.PublishBatchesParams{Manager: f.mid, Batches: map[string]wire.BatchProgress{"b": p}, TTL: time.Minute, Due: time.Minute}); err != nil {
		t.Fatal(err)
	}
	listed("q3")
	if err := f.c.ZScore(ctx, keys.QueueIndex(prefix), "old").Err(); err != redis.Nil {
		t.Fatalf("a name past its age is still in the index: %v", err)
	}

	// What no writer named (q1's, q2's keys: the index lost them, as an
	// earlier build never wrote it) ScanQueues finds, and indexes; a map/
	// reduce by key's partition left behind is no queue.
	if err := f.c.HSet(ctx, keys.Partition(prefix, "q1", "job", 3, 0), "0:1", "x").Err(); err != nil {
		t.Fatal(err)
	}
	got, err := a.ScanQueues(ctx)
	if err != nil || !slices.Equal(got, []string{"q1", "q2", "q3"}) {
		t.Fatalf("ScanQueues = %q, %v; want q1, q2, q3", got, err)
	}
	listed("q1", "q2", "q3")
}
