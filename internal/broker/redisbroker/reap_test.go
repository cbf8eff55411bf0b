package redisbroker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/keys"
)

// Reapers that reap one dead worker at once, each in slices, share its
// tasks: every private task is reported lost once, every public one it held
// requeued once, and the worker is reaped once.
func TestReapersShareADeadWorker(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	const public, private, reapers = 700, 3 * broker.ScriptBudget, 4
	const wid = "w"
	f.submit(t, "", public)
	for f.c.SCard(ctx, keys.Held("rm", f.queue, wid)).Val() < public {
		if _, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: wid, Max: 100, Room: 100, Lease: time.Minute, Serves: serves})); err != nil {
			t.Fatal(err)
		}
	}
	tasks := make([]wire.Task, private)
	for i := range tasks {
		tasks[i] = wire.Task{ID: id.Task(f.mid, uint64(public+i+1)), Payload: []byte("p")}
	}
	if _, _, err := submitOf(f.r.Submit(ctx, &broker.SubmitParams{Manager: f.mid, Worker: wid, Lane: f.lane(), Tasks: tasks, TTL: time.Minute, Expect: wire.Expect{}})); err != nil {
		t.Fatal(err)
	}
	if _, err := f.r.Heartbeat(ctx, &broker.HeartbeatParams{Worker: wid, Lease: -time.Millisecond}); err != nil {
		t.Fatal(err)
	}

	got := make([]*wire.Reaped, reapers)
	errs := make([]error, reapers)
	var wg sync.WaitGroup
	for i := range reapers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = New(f.c, "rm", f.queue).Reap(ctx)
		}()
	}
	wg.Wait()
	var all wire.Reaped
	for i := range reapers {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		all.Workers += got[i].Workers
		all.Requeued += got[i].Requeued
		all.Lost += got[i].Lost
	}
	if all != (wire.Reaped{Workers: 1, Requeued: public, Lost: private}) {
		t.Fatalf("the reapers did %+v in all, want 1 worker, %d requeued, %d lost", all, public, private)
	}
	entries := f.c.LRange(ctx, keys.Results("rm", f.queue, f.mid), 0, -1).Val()
	seen := map[string]bool{}
	for _, e := range entries {
		seen[e] = true
	}
	if len(entries) != private || len(seen) != private {
		t.Fatalf("%d result entries, %d of them different; want %d lost entries, one a task", len(entries), len(seen), private)
	}
	if n := f.c.LLen(ctx, f.laneKey()).Val(); n != public {
		t.Errorf("the lane holds %d tasks, want the %d requeued", n, public)
	}
}
