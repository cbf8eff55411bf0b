package redisbroker

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/keys"
)

// A durable batch's owner whose claim another manager took over writes
// nothing more of the batch: its submit, trim, renew, drop, history record,
// collector's wake and claim are refused with a *FencedError naming the new holder, and
// leave Redis as they found it, before and after the new holder ended the
// batch; the new holder's writes go through.
func TestFencedOwnerWritesNothing(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	f.mid = id.Durable("fenced")
	take := func(host, steal string) (*Broker, wire.Claimed) {
		t.Helper()
		r, got := claimAs(t, f, "fenced", host, steal)
		if _, err := r.Resume(ctx, &broker.ResumeParams{Owner: f.mid, TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
		return r, got
	}
	tasks := func(from, n int) []wire.Task {
		ts := make([]wire.Task, n)
		for i := range ts {
			ts[i] = wire.Task{ID: id.TaskIn(f.mid, uint64(from+i), 1, 1, keys.DefaultPriority, keys.DefaultPriority), Payload: []byte(fmt.Sprint("payload ", from+i))}
		}
		return ts
	}
	ra, a := take("a", "")
	if _, _, err := submitOf(ra.Submit(ctx, &broker.SubmitParams{Manager: f.mid, Lane: f.lane(), Tasks: tasks(1, 5), TTL: time.Hour, Expect: wire.Expect{}})); err != nil {
		t.Fatal(err)
	}
	sumsKey := keys.Sums("rm", f.queue, f.mid)
	if err := ra.AddSums(ctx, &broker.AddSumsParams{Owner: f.mid, Sums: map[string]string{"t1": "s1"}, TTL: time.Hour}); err != nil || f.c.HGet(ctx, sumsKey, "t1").Val() != "s1" {
		t.Fatalf("a records a sum: %v", err)
	}
	f.finishFirst(t, ra, 3)
	first, err := ra.ReadResults(ctx, &broker.ReadResultsParams{Manager: f.mid, Limit: 10})
	if err != nil || len(first) != 3 {
		t.Fatalf("a reads %q, %v", first, err)
	}
	rb, b := take("b", a.Record) // as if a's process were gone

	taskSet, kept, results := keys.Tasks("rm", f.queue, f.mid), keys.Kept("rm", f.queue, f.mid), keys.Results("rm", f.queue, f.mid)
	four := tasks(4, 1)[0].ID // outstanding: its payload is b's now
	state := func() string {
		return fmt.Sprint(f.c.HGet(ctx, taskSet, four).Val(), f.c.HLen(ctx, taskSet).Val(), f.c.LLen(ctx, f.laneKey()).Val(), f.c.LLen(ctx, kept).Val(), f.c.LLen(ctx, results).Val(),
			f.c.PTTL(ctx, taskSet).Val() > 30*time.Minute, f.c.HLen(ctx, keys.History("rm", f.queue)).Val(),
			f.c.SMembers(ctx, keys.Cancels("rm", f.queue, f.mid)).Val(), f.c.HGetAll(ctx, keys.Batches("rm", f.queue, f.mid)).Val(),
			f.c.HGetAll(ctx, sumsKey).Val())
	}
	fenced := func(what string, err error) {
		t.Helper()
		var fe *broker.FencedError
		if !errors.As(err, &fe) || fe.Holder.Manager != b.Holder.Manager || fe.Holder.Token != a.Holder.Token+1 {
			t.Fatalf("a's %s after b took the batch over: %v; want a *broker.FencedError naming b, token %d", what, err, a.Holder.Token+1)
		}
	}
	rec := wire.BatchRecord{ID: f.mid + ":1", Manager: f.mid, Func: "f", Total: 5, Done: 5, Outcome: "done"}
	aWrites := func() {
		t.Helper()
		before := state()
		stale := tasks(4, 3) // 4 and 5 outstanding, 6 new
		for i := range stale {
			stale[i].Payload = []byte("stale")
		}
		_, _, err := submitOf(ra.Submit(ctx, &broker.SubmitParams{Manager: f.mid, Lane: f.lane(), Tasks: stale, TTL: time.Minute, Expect: wire.Expect{}}))
		fenced("submit", err)
		_, err = ra.ReadResults(ctx, &broker.ReadResultsParams{Manager: f.mid, Handled: 3, Mark: broker.Mark(first[2]), Limit: 10})
		fenced("trim", err)
		fenced("renew", ra.Renew(ctx, &broker.RenewParams{Manager: f.mid, TTL: time.Minute}))
		fenced("drop", ra.Drop(ctx, &broker.ManagerParams{Manager: f.mid}))
		fenced("history record", ra.RecordBatches(ctx, &broker.RecordBatchesParams{Manager: f.mid, Records: []wire.BatchRecord{rec}, Limit: 10, Age: time.Hour}))
		_, err = ra.PublishBatches(ctx, &broker.PublishBatchesParams{Manager: f.mid, Batches: map[string]wire.BatchProgress{rec.ID: {Func: "f", Total: 5}}, TTL: time.Minute, Due: time.Minute})
		fenced("publish", err)
		fenced("sums", ra.AddSums(ctx, &broker.AddSumsParams{Owner: f.mid, Sums: map[string]string{"t9": "s9"}, TTL: time.Hour}))
		fenced("cancel", ra.Cancel(ctx, &broker.CancelParams{Manager: f.mid, Tasks: []string{four}}))
		fenced("wake", ra.WakeCollector(ctx, &broker.ManagerParams{Manager: f.mid}))
		_, err = ra.Claim(ctx, &wire.Claim{Owner: f.mid, Name: "fenced", Holder: a.Holder, Lease: time.Minute, TTL: time.Hour, Fence: a.Record})
		fenced("claim", err)
		if after := state(); after != before {
			t.Fatalf("a's refused writes changed the batch: %s, was %s", after, before)
		}
	}
	f.c.SAdd(ctx, keys.Cancels("rm", f.queue, f.mid), rec.ID) // an operator's, for b
	aWrites()

	// b ends the batch: its record stays, its keys go, the fence stays.
	rec.Started = 42
	if err := rb.RecordBatches(ctx, &broker.RecordBatchesParams{Manager: f.mid, Records: []wire.BatchRecord{rec}, Limit: 10, Age: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := rb.Drop(ctx, &broker.ManagerParams{Manager: f.mid}); err != nil {
		t.Fatal(err)
	}
	if n := f.c.Exists(ctx, taskSet, kept).Val(); n != 0 {
		t.Fatalf("b's drop left %d of the batch's keys", n)
	}
	aWrites()
	got, err := wire.DecodeRecord(f.c.HGet(ctx, keys.History("rm", f.queue), rec.ID).Val())
	if err != nil || got.Started != 42 {
		t.Fatalf("the history record: %+v, %v; want b's", got, err)
	}
	if f.c.Get(ctx, keys.Fence("rm", f.queue, f.mid)).Val() != b.Record {
		t.Fatal("the fence is not b's claim after b ended the batch")
	}
}

// A fence Redis rolled back to an older claim (a failover that dropped the
// primary's last writes: the new holder's takeover among them) refuses
// nothing of the newer claim's holder: its first write sets the fence back
// to its claim, its TTL kept, and the older claim's holder, if it is still
// running, is the one refused from then on.
func TestRolledBackFenceIsSetBack(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	f.mid = id.Durable("rolled")
	ra, a := claimAs(t, f, "rolled", "a", "")
	rb, b := claimAs(t, f, "rolled", "b", a.Record)
	if b.Holder.Token != a.Holder.Token+1 {
		t.Fatalf("b's token %d after a's %d", b.Holder.Token, a.Holder.Token)
	}
	key := keys.Fence("rm", f.queue, f.mid)
	if err := f.c.Set(ctx, key, a.Record, redis.KeepTTL).Err(); err != nil { // the rollback
		t.Fatal(err)
	}
	ttl := f.c.PTTL(ctx, key).Val()
	task := wire.Task{ID: id.TaskIn(f.mid, 1, 1, 1, keys.DefaultPriority, keys.DefaultPriority), Payload: []byte("p")}
	if _, _, err := submitOf(rb.Submit(ctx, &broker.SubmitParams{Manager: f.mid, Lane: f.lane(), Tasks: []wire.Task{task}, TTL: time.Hour, Expect: wire.Expect{}})); err != nil {
		t.Fatalf("b's submit past a's older fence: %v; want it taken", err)
	}
	if v := f.c.Get(ctx, key).Val(); v != b.Record {
		t.Fatalf("the fence after b's submit: %q; want b's claim %q", v, b.Record)
	}
	if after := f.c.PTTL(ctx, key).Val(); after <= 0 || after > ttl {
		t.Fatalf("the fence's TTL after b set it back: %v, was %v", after, ttl)
	}
	task.Payload = []byte("stale")
	_, _, err := submitOf(ra.Submit(ctx, &broker.SubmitParams{Manager: f.mid, Lane: f.lane(), Tasks: []wire.Task{task}, TTL: time.Hour, Expect: wire.Expect{}}))
	var fe *broker.FencedError
	if !errors.As(err, &fe) || fe.Holder.Manager != b.Holder.Manager {
		t.Fatalf("a's submit once b set the fence back: %v; want a *broker.FencedError naming b", err)
	}
	if v := f.c.HGet(ctx, keys.Tasks("rm", f.queue, f.mid), task.ID).Val(); v != "p" {
		t.Fatalf("the task set holds %q of b's task after a's refused submit", v)
	}
	// Each write does the same: b's renewal of its claim, past a fence
	// rolled back again.
	f.c.Set(ctx, key, a.Record, redis.KeepTTL)
	again, err := rb.Claim(ctx, &wire.Claim{Owner: f.mid, Name: "rolled", Holder: b.Holder, Lease: time.Minute, TTL: time.Hour, Fence: b.Record})
	if err != nil || !again.Held {
		t.Fatalf("b's renewal past a's older fence: %+v, %v", again, err)
	}
	_, err = ra.Claim(ctx, &wire.Claim{Owner: f.mid, Name: "rolled", Holder: a.Holder, Lease: time.Minute, TTL: time.Hour, Fence: a.Record})
	if !errors.As(err, &fe) || fe.Holder.Manager != b.Holder.Manager {
		t.Fatalf("a's renewal once b renewed: %v; want a *broker.FencedError naming b", err)
	}
}

// claimAs has a manager on host claim f.mid's durable batch name, taking
// over the holder's record steal if not "", and returns the broker that
// writes with its claim as the fence, and the claim.
func claimAs(t *testing.T, f *fixture, name, host, steal string) (*Broker, wire.Claimed) {
	t.Helper()
	h := wire.Holder{Manager: id.New(), Host: host, PID: 1, Since: 100}
	got, err := f.r.Claim(context.Background(), &wire.Claim{Owner: f.mid, Name: name, Holder: h, Lease: time.Minute, TTL: time.Hour, Steal: steal})
	if err != nil || !got.Held {
		t.Fatalf("%s claims: %+v, %v", host, got, err)
	}
	fence := broker.NewFence(f.mid)
	fence.Set(got.Record)
	return f.r.KeepingResults().Fenced(fence), *got
}

// A fence holding foreign data (a string that is no claim's record, or
// another type) fences nothing: it is set aside, and the holder's writes
// and its renewal go on, which sets the fence again.
func TestForeignFenceIsSetAside(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	f.mid = id.Durable("spoiled")
	h := wire.Holder{Manager: id.New(), Host: "a", PID: 1, Since: 100}
	got, err := f.r.Claim(ctx, &wire.Claim{Owner: f.mid, Name: "spoiled", Holder: h, Lease: time.Minute, TTL: time.Hour})
	if err != nil || !got.Held {
		t.Fatalf("claim: %+v, %v", got, err)
	}
	fence := broker.NewFence(f.mid)
	fence.Set(got.Record)
	r := f.r.KeepingResults().Fenced(fence)
	key := keys.Fence("rm", f.queue, f.mid)
	for _, spoil := range []func() error{
		func() error { return f.c.Set(ctx, key, "foreign", 0).Err() },
		func() error { f.c.Del(ctx, key); return f.c.RPush(ctx, key, "foreign").Err() },
	} {
		if err := spoil(); err != nil {
			t.Fatal(err)
		}
		if _, _, err := submitOf(r.Submit(ctx, &broker.SubmitParams{Manager: f.mid, Lane: f.lane(), Tasks: []wire.Task{{ID: id.TaskIn(f.mid, 1, 1, 1, keys.DefaultPriority, keys.DefaultPriority), Payload: []byte("p")}}, TTL: time.Hour, Expect: wire.Expect{}})); err != nil {
			t.Fatalf("a submit past a foreign fence: %v; want it taken", err)
		}
		if _, err := r.PublishBatches(ctx, &broker.PublishBatchesParams{Manager: f.mid, Batches: map[string]wire.BatchProgress{f.mid + ":1": {Func: "f", Total: 1}}, TTL: time.Minute, Due: time.Minute}); err != nil {
			t.Fatalf("a publish past a foreign fence: %v; want it taken", err)
		}
		again, err := r.Claim(ctx, &wire.Claim{Owner: f.mid, Name: "spoiled", Holder: h, Lease: time.Minute, TTL: time.Hour, Fence: got.Record})
		if err != nil || !again.Held {
			t.Fatalf("the holder's renewal past a foreign fence: %+v, %v", again, err)
		}
		if v, err := f.c.Get(ctx, key).Result(); err != nil || v != got.Record {
			t.Fatalf("the fence after the renewal: %q, %v; want the holder's claim again", v, err)
		}
	}
}

// A durable batch's owner's wake (as it stops) ends its collector's wait
// with a wake entry and leaves its result list's TTL as it was: the list
// may hold results for the batch's next holder. An owner that holds no
// claim yet pushes nothing.
func TestOwnerWakeKeepsResultsTTL(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	f.mid = id.Durable("woken")
	fence := broker.NewFence(f.mid)
	r := f.r.KeepingResults().Fenced(fence)
	results := keys.Results("rm", f.queue, f.mid)
	if err := r.WakeCollector(ctx, &broker.ManagerParams{Manager: f.mid}); err != nil || f.c.Exists(ctx, results).Val() != 0 {
		t.Fatalf("an owner with no claim wakes: %v, %d results", err, f.c.LLen(ctx, results).Val())
	}
	h := wire.Holder{Manager: id.New(), Host: "a", PID: 1, Since: 100}
	got, err := f.r.Claim(ctx, &wire.Claim{Owner: f.mid, Name: "woken", Holder: h, Lease: time.Minute, TTL: time.Hour})
	if err != nil || !got.Held {
		t.Fatalf("claim: %+v, %v", got, err)
	}
	fence.Set(got.Record)
	if _, err := r.Resume(ctx, &broker.ResumeParams{Owner: f.mid, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	task := wire.Task{ID: id.TaskIn(f.mid, 1, 1, 1, keys.DefaultPriority, keys.DefaultPriority), Payload: []byte("payload")}
	if _, _, err := submitOf(r.Submit(ctx, &broker.SubmitParams{Manager: f.mid, Lane: f.lane(), Tasks: []wire.Task{task}, TTL: time.Hour, Expect: wire.Expect{}})); err != nil {
		t.Fatal(err)
	}
	f.finishFirst(t, r, 1)
	if err := r.WakeCollector(ctx, &broker.ManagerParams{Manager: f.mid}); err != nil {
		t.Fatal(err)
	}
	es := f.c.LRange(ctx, results, 0, -1).Val()
	if len(es) != 2 {
		t.Fatalf("the result list after the wake: %d entries, want the result and the wake", len(es))
	}
	if e, _ := wire.DecodeEntry(es[1], 1<<20); e.Kind != wire.EntryWake {
		t.Fatalf("the wake pushed %+v", e)
	}
	if ttl := f.c.PTTL(ctx, results).Val(); ttl < 30*time.Minute {
		t.Fatalf("the wake left the result list %v to live, want its hour", ttl)
	}
}
