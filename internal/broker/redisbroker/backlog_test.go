package redisbroker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/keys"
)

// The backlog counts the elements waiting in a queue's lanes exactly, as
// tasks of different sizes are submitted, taken, given back, reaped back
// and purged, and says how long the oldest has waited, by the Redis clock.
func TestBacklogCountsElementsThroughEveryMove(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	admin := NewAdmin(f.c, "rm")
	// Tasks of 1, 2, ..., 10 elements: 55 in all.
	var tasks []wire.Task
	for i := 1; i <= 10; i++ {
		tasks = append(tasks, wire.Task{ID: id.TaskIn(f.mid, uint64(i), 1, i, keys.DefaultPriority, keys.DefaultPriority),
			Payload: []byte(fmt.Sprintf("payload %d", i))})
	}
	before, err := admin.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := submitOf(f.r.Submit(ctx, &broker.SubmitParams{Manager: f.mid, Lane: f.lane(), Tasks: tasks, TTL: time.Minute, Expect: wire.Expect{}})); err != nil {
		t.Fatal(err)
	}
	want := func(what string, tasks, elements int64) {
		t.Helper()
		b, err := admin.Backlog(ctx, &broker.QueueParams{Queue: f.queue})
		if err != nil {
			t.Fatal(err)
		}
		if b.Tasks != tasks || b.Elements != elements {
			t.Fatalf("%s: backlog %d tasks, %d elements; want %d and %d", what, b.Tasks, b.Elements, tasks, elements)
		}
		if tasks > 0 && (b.Oldest.UnixMilli() < before || b.Oldest.After(b.Now)) {
			t.Fatalf("%s: oldest submitted at %v, not between %v and the Redis clock %v", what, b.Oldest, time.UnixMilli(before), b.Now)
		}
		if tasks == 0 && !b.Oldest.IsZero() {
			t.Fatalf("%s: nothing waits, yet the oldest was submitted at %v", what, b.Oldest)
		}
	}
	want("submitted", 10, 55)
	// w1 takes the first three (1+2+3), w2 the next two (4+5).
	if got, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 3, Room: 3, Lease: time.Minute, Serves: serves})); err != nil || len(got) != 3 {
		t.Fatalf("w1 took %d tasks (%v), want 3", len(got), err)
	}
	taken, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w2", Max: 2, Room: 2, Lease: time.Minute, Serves: serves}))
	if err != nil || len(taken) != 2 {
		t.Fatalf("w2 took %d tasks (%v), want 2", len(taken), err)
	}
	want("taken", 5, 55-15)
	// w2 gives its two back; then w1's lease ends and a reap puts its three back.
	if n, err := f.r.GiveBack(ctx, &broker.GiveBackParams{Worker: "w2", Members: []string{taken[0].Member(), taken[1].Member()}}); err != nil || n != 2 {
		t.Fatalf("gave back %d (%v), want 2", n, err)
	}
	want("given back", 7, 55-6)
	if _, err := f.r.Heartbeat(ctx, &broker.HeartbeatParams{Worker: "w1", Lease: -time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if r, err := f.r.Reap(ctx); err != nil || r.Requeued != 3 {
		t.Fatalf("reaped %+v (%v), want 3 re-queued", r, err)
	}
	want("reaped", 10, 55)
	// Every task taken (the three reaped ones are suspects, each alone,
	// to a worker that holds nothing): the lane empties, and what is
	// beside it goes.
	for n, i := 0, 0; n < 10; i++ {
		got, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: fmt.Sprintf("w3-%d", i), Max: 10, Room: 10, Lease: time.Minute, Serves: serves}))
		if err != nil || len(got) == 0 || i > 10 {
			t.Fatalf("take %d took %d tasks (%v), after %d", i, len(got), err, n)
		}
		n += len(got)
	}
	want("all taken", 0, 0)
	if n := f.c.Exists(ctx, keys.LaneElements("rm", f.queue, f.lane().Name), keys.LaneTimes("rm", f.queue, f.lane().Name)).Val(); n != 0 {
		t.Fatalf("%d keys beside the empty lane remain", n)
	}
	// A new submit, then a purge.
	if _, _, err := submitOf(f.r.Submit(ctx, &broker.SubmitParams{Manager: f.mid, Lane: f.lane(), Tasks: tasks[:4], TTL: time.Minute, Expect: wire.Expect{}})); err != nil {
		t.Fatal(err)
	}
	want("submitted again", 4, 10)
	if _, _, err := purgeOf(admin.Purge(ctx, &broker.QueueParams{Queue: f.queue})); err != nil {
		t.Fatal(err)
	}
	want("purged", 0, 0)
}

// The totals of ended batches count each batch once, by its last record:
// a batch recorded "manager lost" and then, its manager back, "failed",
// counts as failed, with its failed elements by kind; trimming the history
// keeps the totals.
func TestEndedTotalsCountLastRecord(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	admin := NewAdmin(f.c, "rm")
	rec := func(id, outcome string, failedBy map[string]int) wire.BatchRecord {
		return wire.BatchRecord{ID: id, Manager: f.mid, Func: "f", Total: 10, Done: 10, Outcome: outcome, FailedBy: failedBy}
	}
	for _, r := range []wire.BatchRecord{rec("b1", wire.OutcomeManagerLost, nil), rec("b2", wire.OutcomeDone, nil)} {
		if err := f.r.RecordBatches(ctx, &broker.RecordBatchesParams{Manager: f.mid, Records: []wire.BatchRecord{r}, Limit: 100, Age: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.r.RecordBatches(ctx, &broker.RecordBatchesParams{Manager: f.mid, Records: []wire.BatchRecord{rec("b1", wire.OutcomeFailed, map[string]int{"panic": 2, "lost": 1})}, Limit: 1, Age: time.Hour}); err != nil {
		t.Fatal(err)
	}
	outcomes, kinds, err := endedOf(admin.Ended(ctx, &broker.QueueParams{Queue: f.queue}))
	if err != nil {
		t.Fatal(err)
	}
	if outcomes[wire.OutcomeManagerLost] != 0 || outcomes[wire.OutcomeFailed] != 1 || outcomes[wire.OutcomeDone] != 1 ||
		kinds["panic"] != 2 || kinds["lost"] != 1 {
		t.Fatalf("totals %v, kinds %v; want 1 failed (2 panic, 1 lost), 1 done", outcomes, kinds)
	}
}

// A submit to an empty lane counts only its own tasks, whatever was left
// beside the lane (a count and submit times that outlived it); a submit to a
// lane that has tasks adds to its count. The lane's first push says it was
// empty, also when the ids take more than one push.
func TestSubmitResetsWhatIsBesideAnEmptyLane(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	admin := NewAdmin(f.c, "rm")
	name := f.lane().Name
	elements, times := keys.LaneElements("rm", f.queue, name), keys.LaneTimes("rm", f.queue, name)
	// Left beside the empty lane: 99 elements, submitted long ago.
	f.c.Set(ctx, elements, 99, time.Minute)
	f.c.ZAdd(ctx, times, redis.Z{Score: 0, Member: "0:1000"})
	task := func(seq uint64, n int) wire.Task {
		return wire.Task{ID: id.TaskIn(f.mid, seq, 1, n, keys.DefaultPriority, keys.DefaultPriority), Payload: []byte("p")}
	}
	want := func(what string, tasks, els int64) {
		t.Helper()
		b, err := admin.Backlog(ctx, &broker.QueueParams{Queue: f.queue})
		if err != nil {
			t.Fatal(err)
		}
		if b.Tasks != tasks || b.Elements != els {
			t.Fatalf("%s: backlog %d tasks, %d elements; want %d and %d", what, b.Tasks, b.Elements, tasks, els)
		}
		if b.Oldest.UnixMilli() <= 1000 {
			t.Fatalf("%s: oldest submitted at %v: the stale submit time counted", what, b.Oldest)
		}
	}
	submit := func(ts []wire.Task) {
		t.Helper()
		if _, _, err := submitOf(f.r.Submit(ctx, &broker.SubmitParams{Manager: f.mid, Lane: f.lane(), Tasks: ts, TTL: time.Minute, Expect: wire.Expect{}})); err != nil {
			t.Fatal(err)
		}
	}
	submit([]wire.Task{task(1, 2), task(2, 3)})
	want("first submit", 2, 5)
	submit([]wire.Task{task(3, 4)})
	want("added to", 3, 9)
	// Emptied by takes, left with stale keys again, then refilled by a
	// submit of more ids than one push carries (CHUNK is 500).
	for i := 0; ; i++ {
		got, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: fmt.Sprintf("w%d", i), Max: 10, Room: 10, Lease: time.Minute, Serves: serves}))
		if err != nil || i > 3 {
			t.Fatalf("take %d: %v", i, err)
		}
		if len(got) == 0 {
			break
		}
	}
	f.c.Set(ctx, elements, 99, time.Minute)
	f.c.ZAdd(ctx, times, redis.Z{Score: 0, Member: "0:1000"})
	var many []wire.Task
	for i := range 700 {
		many = append(many, task(uint64(10+i), 1))
	}
	submit(many)
	want("refilled", 700, 700)
}
