package manager_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// Garbage written into Redis fails only the tasks it hit, and the worker keeps
// serving.
func TestUndecodablePayload(t *testing.T) {
	b := setup(t)
	m := b.Manager(t, manager.Options{Shards: 1}) // the test writes into shard 0's keys
	ctx := testCtx(t)
	batch, err := manager.Submit(ctx, m, square, ints(10), manager.ChunkSize(1)) // no worker yet
	if err != nil {
		t.Fatal(err)
	}
	ids := harness.Queued(t, b.Client, b.Queue)
	if len(ids) != 10 {
		t.Fatalf("queued ids: %v, %v", ids, err)
	}
	// Element 3: the envelope is garbage. Element 6: a well-formed envelope
	// whose input is not MessagePack (0xc1 is never used).
	badInput, err := codec.EncodeTask(&codec.Task{Func: "square", Sig: square.Signature(), Count: 1, Input: []byte{0x91, 0xc1}})
	if err != nil {
		t.Fatal(err)
	}
	tasks := keys.Tasks("redmap", b.Queue, m.ID())
	b.Client.HSet(ctx, tasks, ids[3], "garbage")
	b.Client.HSet(ctx, tasks, ids[6], badInput)

	b.Worker(t, worker.Options{Concurrency: 2}, square)
	ys, err := batch.Wait(ctx)
	var be *redmap.BatchError
	if !errors.As(err, &be) || fmt.Sprint(be.Indexes()) != "[3 6]" {
		t.Fatalf("got %v, want elements 3 and 6 failed", err)
	}
	for _, te := range be.Failed {
		if !errors.Is(te, redmap.ErrDecode) {
			t.Errorf("element %d: got %v, want ErrDecode", te.Index, te)
		}
	}
	for i, y := range ys {
		if i != 3 && i != 6 && y != i*i {
			t.Fatalf("ys[%d] = %d, want %d", i, y, i*i)
		}
	}
	if ys, err := manager.Map(ctx, m, square, ints(3)); err != nil || ys[2] != 4 {
		t.Fatalf("the worker no longer serves: %v, %v", ys, err)
	}
}

// A garbage result pushed to a manager's result list is dropped, not returned.
func TestGarbageResultDropped(t *testing.T) {
	b := setup(t)
	m := b.Manager(t, manager.Options{})
	b.Client.RPush(context.Background(), keys.Results("redmap", b.Queue, m.ID()), "\x94\x01garbage")
	eventually(t, "garbage dropped", func() bool { return m.Stats().Dropped == 1 })
	b.Worker(t, worker.Options{}, square)
	if ys, err := manager.Map(testCtx(t), m, square, ints(3)); err != nil || ys[2] != 4 {
		t.Fatalf("after garbage: %v, %v", ys, err)
	}
}

// When Redis goes away for longer than RedisTimeout, the outstanding elements
// fail with ErrUnavailable instead of hanging, and Submit fails with an error
// that says what it was doing.
func TestRedisGoesAway(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	// No client-side retries: this test is about what redmap does once the
	// client gives up, not about go-redis's retry schedule.
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { rdb.Close() })
	m, err := manager.New(rdb, manager.Options{Queue: "gone", RedisTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx := testCtx(t)
	batch, err := manager.Submit(ctx, m, square, ints(20), manager.ChunkSize(5)) // no worker
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill(t)
	_, err = batch.Wait(ctx)
	var be *redmap.BatchError
	if !errors.As(err, &be) || len(be.Failed) != 20 || !errors.Is(err, redmap.ErrUnavailable) {
		t.Fatalf("got %v, want all 20 elements failing with ErrUnavailable", err)
	}
	if _, err := manager.Map(ctx, m, square, ints(1)); !errors.Is(err, redmap.ErrUnavailable) {
		t.Fatalf("Map with Redis down: got %v, want ErrUnavailable", err)
	} else {
		t.Logf("Map with Redis down: %v", err)
	}
}
