package redisbroker

import (
	"context"
	"testing"
	"time"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/keys"
)

// audit runs an audit of the fixture's outstanding tasks tids, all of its
// public lane.
func (f *fixture) audit(t *testing.T, tids []string) wire.Audited {
	t.Helper()
	got, err := f.r.Audit(context.Background(), &broker.AuditParams{Manager: f.mid, Groups: []wire.Placed{{Lane: f.lane(), Tasks: tids}}, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return *got
}

// The manager lists a batch's tasks as outstanding before its submit: an
// audit between the two finds them nowhere, and must neither heal the lane
// (write its entry, warn of lost keys) nor queue anything. Once submitted,
// the audit finds all in place.
func TestAuditBeforeTheSubmit(t *testing.T) {
	f := setup(t)
	tids := []string{id.TaskIn(f.mid, 1, 1, 1, keys.DefaultPriority, keys.DefaultPriority), id.TaskIn(f.mid, 2, 1, 1, keys.DefaultPriority, keys.DefaultPriority)}
	if got := f.audit(t, tids); got.Requeued != 0 || got.Healed != 0 || got.Lost != 0 || len(got.Absent) != 2 {
		t.Fatalf("audit before the submit: %+v, want both absent and nothing healed", got)
	}
	if n := f.c.Exists(context.Background(), keys.Lanes("rm", f.queue, f.mid)).Val(); n != 0 {
		t.Fatalf("the audit wrote the lanes hash of a batch not yet submitted")
	}
}

// An audit queues again what a lost lane or held set took along, puts a
// lane back in its lost ring and its lost entry back in the manager's
// lanes hash, and names tasks answered; one of a healthy queue does
// nothing.
func TestAuditQueuesAgainWhatLostKeysTook(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	tids := f.submit(t, "", 10)
	taken, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 4, Room: 4, Lease: time.Minute, Serves: serves}))
	if err != nil || len(taken) != 4 {
		t.Fatalf("take: %d, %v", len(taken), err)
	}
	if got := f.audit(t, tids); got.Requeued != 0 || got.Healed != 0 || len(got.Absent) != 0 {
		t.Fatalf("a healthy queue: %+v, want nothing done", got)
	}

	// The held set lost: its 4 tasks go back; the lane is lost next: its 6.
	f.c.Del(ctx, keys.Held("rm", f.queue, "w1"))
	if got := f.audit(t, tids); got.Requeued != 4 {
		t.Fatalf("held set lost: %+v, want 4 queued again", got)
	}
	f.c.Del(ctx, f.laneKey())
	if got := f.audit(t, tids); got.Requeued != 10 {
		t.Fatalf("lane lost: %+v, want 10 queued again", got)
	}
	if n := f.c.LLen(ctx, f.laneKey()).Val(); n != 10 {
		t.Fatalf("the lane has %d tasks, want 10", n)
	}

	// The ring and the lanes hash lost: both rebuilt, and a take finds all.
	f.c.Del(ctx, keys.Ring("rm", f.queue, keys.DefaultPriority), keys.Lanes("rm", f.queue, f.mid))
	if got := f.audit(t, tids); got.Requeued != 0 || got.Healed != 2 {
		t.Fatalf("ring and lanes lost: %+v, want 2 healed", got)
	}
	taken, _, err = takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w2", Max: 20, Room: 20, Lease: time.Minute, Serves: serves}))
	if err != nil || len(taken) != 10 {
		t.Fatalf("take after the audit: %d, %v; want 10", len(taken), err)
	}

	// Answered (gone from the task set): named absent, not queued.
	f.c.HDel(ctx, keys.Tasks("rm", f.queue, f.mid), tids[0])
	f.c.Del(ctx, keys.Held("rm", f.queue, "w2"))
	if got := f.audit(t, tids); got.Requeued != 9 || len(got.Absent) != 1 || got.Absent[0] != tids[0] {
		t.Fatalf("one answered: %+v, want 9 queued again and %s absent", got, tids[0])
	}
}

// Foreign data in a lane, its elements counter, the ring or the idle set
// stops no take: the key is set aside, and what it held comes back with an
// audit.
func TestTakeSetsAsideForeignData(t *testing.T) {
	for name, key := range map[string]func(f *fixture) string{
		"elements": func(f *fixture) string { return f.laneKey() + ":e" },
		"ring":     func(f *fixture) string { return keys.Ring("rm", f.queue, keys.DefaultPriority) },
		"idle":     func(f *fixture) string { return keys.Idle("rm", f.queue) },
		"lane":     func(f *fixture) string { return f.laneKey() },
	} {
		t.Run(name, func(t *testing.T) { takeWithForeign(t, key) })
	}
}

// takeWithForeign writes foreign data over key(f) of a fixture with 10
// tasks queued, then takes and audits, writes it again, submits one more,
// audits and takes again: all 11 are taken, none stopped by the data.
func takeWithForeign(t *testing.T, key func(f *fixture) string) {
	f := setup(t)
	ctx := context.Background()
	tids := f.submit(t, "", 10)
	k := key(f)
	f.c.Set(ctx, k, "foreign", 0)
	if _, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 2, Room: 2, Lease: time.Minute, Serves: serves})); err != nil {
		t.Fatalf("take with foreign data in %s: %v", k, err)
	}
	f.audit(t, tids)
	// Again under a submit of one more task.
	f.c.Set(ctx, k, "foreign", 0)
	more := id.TaskIn(f.mid, 100, 1, 1, keys.DefaultPriority, keys.DefaultPriority)
	if _, _, err := submitOf(f.r.Submit(ctx, &broker.SubmitParams{Manager: f.mid, Lane: f.lane(), Tasks: []wire.Task{{ID: more, Payload: []byte("p")}}, TTL: time.Minute, Expect: wire.Expect{}})); err != nil {
		t.Fatalf("submit with foreign data in %s: %v", k, err)
	}
	f.audit(t, append(tids, more))
	taken, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w2", Max: 20, Room: 20, Lease: time.Minute, Serves: serves}))
	if err != nil {
		t.Fatalf("take after: %v", err)
	}
	held := len(f.c.SMembers(ctx, keys.Held("rm", f.queue, "w1")).Val())
	if held+len(taken) != 11 {
		t.Fatalf("foreign data in %s: %d held and %d taken after, want 11 in all", k, held, len(taken))
	}
}
