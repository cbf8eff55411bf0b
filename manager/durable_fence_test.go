package manager_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/inspect"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// A durable batch's owner whose link to Redis stalls for longer than its
// claim's lease loses the batch to another manager, which finishes it
// while the first one cannot reach Redis. When the link comes back, the
// first owner knows it lost the batch: its call ends with a
// *redmap.HeldError naming the other holder (or with the finished
// outputs), no element runs again, and the history keeps the finisher's
// record. Unchallenged, the owner takes its claim again and finishes the
// batch exact, no element having run twice.
func TestDurableOwnerCutOffPastItsLease(t *testing.T) {
	for _, c := range []struct {
		name     string
		shards   int
		takeOver bool
	}{{"taken over", 1, true}, {"taken over, 2 shards", 2, true}, {"unchallenged", 1, false}} {
		t.Run(c.name, func(t *testing.T) { cutOffPastLease(t, c.shards, c.takeOver) })
	}
}

func cutOffPastLease(t *testing.T, shards int, takeOver bool) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	b := harness.On(t, srv)
	b.Worker(t, worker.Options{Concurrency: 4}, durableSquare)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Owner A reaches Redis through the proxy; it rides out an outage of
	// minutes, so that only losing its claim can end its call.
	ca := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { ca.Close() })
	a, err := manager.New(ca, manager.Options{Queue: b.Queue, Poll: 100 * time.Millisecond, RedisTimeout: 5 * time.Minute, Shards: shards})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	const name = "fenced"
	xs := span(3000)
	batch, err := manager.Submit(ctx, a, durableSquare, xs, manager.Durable(name), manager.ChunkSize(10))
	if err != nil {
		t.Fatal(err)
	}
	read := 0
	for range batch.Results() {
		if read++; read == 300 {
			break
		}
	}
	proxy.Hold()
	claim := keys.Claim("redmap", b.Queue, id.Durable(name))
	eventuallyWithin(t, 2*time.Minute, "owner A's claim lapsed", func() bool {
		return b.Client.Exists(context.Background(), claim).Val() == 0
	})
	in, err := inspect.New(b.Client, "")
	if err != nil {
		t.Fatal(err)
	}
	if !takeOver {
		proxy.Release()
		ys, err := batch.Wait(ctx)
		if err != nil {
			t.Fatalf("owner A, unchallenged, ended with %v", err)
		}
		checkSquaresOf(t, xs, ys)
		if more, never := durableRuns.again(xs); more != 0 || never != 0 {
			t.Fatalf("%d elements ran more than once, %d never; want 0 and 0", more, never)
		}
		if h := ownerHistory(t, in, b.Queue, name); len(h) != 1 || h[0].Outcome != "done" || h[0].Done != len(xs) {
			t.Fatalf("the batch's history: %+v; want A's record, done", h)
		}
		return
	}

	// Manager B takes the batch over and finishes it.
	mb := b.Manager(t, manager.Options{Poll: 100 * time.Millisecond, Shards: shards})
	ys, err := manager.Map(ctx, mb, durableSquare, xs, manager.Durable(name), manager.ChunkSize(10))
	if err != nil {
		t.Fatal(err)
	}
	checkSquaresOf(t, xs, ys)
	finished := ownerHistory(t, in, b.Queue, name)
	if len(finished) != 1 || finished[0].Outcome != "done" {
		t.Fatalf("after B finished the batch, its history: %+v; want one record, done", finished)
	}
	if more, never := durableRuns.again(xs); more != 0 || never != 0 {
		t.Fatalf("after B finished: %d elements ran more than once, %d never; want 0 and 0", more, never)
	}

	// A's link comes back.
	proxy.Release()
	got, err := batch.Wait(ctx)
	var held *redmap.HeldError
	switch {
	case err == nil:
		checkSquaresOf(t, xs, got)
		t.Logf("owner A returned the finished outputs")
	case errors.As(err, &held):
		if held.Manager != mb.ID() || held.Name != name {
			t.Fatalf("owner A's HeldError %v names manager %s; want B, %s", err, held.Manager, mb.ID())
		}
		t.Logf("owner A: %v", err)
	default:
		t.Fatalf("owner A's call ended with %v; want a *redmap.HeldError naming B, or the outputs", err)
	}
	if more, _ := durableRuns.again(xs); more != 0 {
		t.Errorf("%d elements ran again after owner A's link came back; want 0", more)
	}
	if h := ownerHistory(t, in, b.Queue, name); len(h) != 1 || !sameRecord(h[0], finished[0]) {
		t.Errorf("the batch's history after owner A ended: %+v; want B's record alone, %+v", h, finished[0])
	}
	// The ids a later call gets are still fenced as before: A's end
	// released nothing of B's, and the name is free.
	ys, err = manager.Map(ctx, mb, durableSquare, xs[:10], manager.Durable(name))
	if err != nil {
		t.Fatalf("a new call of the name after both ended: %v", err)
	}
	checkSquaresOf(t, xs[:10], ys)
}

// ownerHistory returns every record of durable batch name in queue's
// history.
func ownerHistory(t *testing.T, in *inspect.Inspector, queue, name string) []inspect.Batch {
	t.Helper()
	bs, _, err := in.History(context.Background(), queue, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []inspect.Batch
	for _, b := range bs {
		if b.Manager == id.Durable(name) {
			out = append(out, b)
		}
	}
	return out
}

// sameRecord reports whether two history records are the same batch's,
// written by the same call.
func sameRecord(x, y inspect.Batch) bool {
	return x.ID == y.ID && x.Outcome == y.Outcome && x.Total == y.Total && x.Done == y.Done &&
		x.Failed == y.Failed && x.Started.Equal(y.Started) && x.Ended.Equal(y.Ended)
}
