package redisbroker

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
)

// submitFunc queues n tasks of size elements each in lane number lane of
// the fixture's manager, calling fn; private to worker wid if not "".
func (f *fixture) submitFunc(t *testing.T, lane uint64, fn string, n, size int, wid string) []string {
	t.Helper()
	tasks := make([]wire.Task, n)
	ids := make([]string, n)
	for i := range tasks {
		ids[i] = id.TaskIn(f.mid, lane*1000+uint64(i), lane, size, keys.DefaultPriority, keys.DefaultPriority)
		tasks[i] = wire.Task{ID: ids[i], Payload: []byte(fmt.Sprintf("payload %d", i))}
	}
	l := wire.Lane{Name: fmt.Sprintf("%s.%d", f.mid, lane), Calls: fn + "\tsig"}
	if _, _, err := submitOf(f.r.Submit(context.Background(), &broker.SubmitParams{Manager: f.mid, Worker: wid, Lane: l, Tasks: tasks, TTL: time.Minute, Expect: wire.Expect{}})); err != nil {
		t.Fatal(err)
	}
	return ids
}

func (f *fixture) setLimit(t *testing.T, fn string, rate float64, per time.Duration, burst, conc int) {
	t.Helper()
	if _, _, err := f.r.SetLimit(context.Background(), fn, wire.NewLimitRecord(rate, per, burst, conc, "test", time.Now())); err != nil {
		t.Fatal(err)
	}
}

var servesFG = []string{"f\tsig", "g\tsig"}

func countFunc(taken []wire.Taken, lane uint64) int {
	n := 0
	for _, t := range taken {
		if id.Lane(t.ID) == fmt.Sprint(lane) {
			n++
		}
	}
	return n
}

// A rate lets a take have the burst at once, then nothing until the next
// token, which the reply says when; another function's lane is taken in
// the same take, unimpeded. (A rate of one an hour: nothing refills while
// the test runs.)
func TestLimitRateInTake(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	f.setLimit(t, "f", 1, time.Hour, 5, 0)
	f.submitFunc(t, 1, "f", 20, 1, "")
	f.submitFunc(t, 2, "g", 6, 1, "")
	taken, end, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 30, Room: 30, Lease: time.Minute, Serves: servesFG}))
	if err != nil {
		t.Fatal(err)
	}
	if got := countFunc(taken, 1); got != 5 {
		t.Errorf("took %d tasks of the limited function, want its burst, 5", got)
	}
	if got := countFunc(taken, 2); got != 6 {
		t.Errorf("took %d tasks of the other function, want all 6", got)
	}
	if !end.Drained || end.Room || end.Wait < 59*time.Minute || end.Wait > time.Hour {
		t.Errorf("take ended %+v; want drained, and a wait of about an hour for the next token", end)
	}
	taken, end, err = takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w2", Max: 30, Room: 30, Lease: time.Minute, Serves: servesFG}))
	if err != nil || len(taken) != 0 || end.Wait < 59*time.Minute {
		t.Errorf("second take: %d tasks, %+v, %v; want none, waiting an hour", len(taken), end, err)
	}
	// The refused head of the lane stays there, in order.
	if head := f.c.LIndex(ctx, keys.Lane("rm", f.queue, f.mid+".1"), 0).Val(); !strings.HasPrefix(head, f.mid+"-") || id.Lane(head) != "1" {
		t.Errorf("lane's head is %q", head)
	}
	if n := f.c.LLen(ctx, keys.Lane("rm", f.queue, f.mid+".1")).Val(); n != 15 {
		t.Errorf("lane holds %d tasks, want 15", n)
	}
	// A new limit starts from a full bucket, not the old one's debt.
	f.setLimit(t, "f", 2, time.Hour, 3, 0)
	taken, _, err = takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w2", Max: 30, Room: 30, Lease: time.Minute, Serves: servesFG}))
	if err != nil || len(taken) != 3 {
		t.Fatalf("under a new limit of burst 3: took %d (%v), want 3", len(taken), err)
	}
	// The head of the lane was held back, and its mark says for how long.
	if taken[0].HeldBack <= 0 || taken[1].HeldBack != 0 {
		t.Errorf("held back %v and %v; want the head's only", taken[0].HeldBack, taken[1].HeldBack)
	}
	// Clearing the operator's limit (no code's) lifts it.
	if l, src, err := f.r.ClearLimit(ctx, "f"); err != nil || src != "" || l.Rate != 0 {
		t.Fatalf("clear: %+v %q %v", l, src, err)
	}
	taken, _, err = takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w2", Max: 30, Room: 30, Lease: time.Minute, Serves: servesFG}))
	if err != nil || len(taken) != 12 {
		t.Fatalf("after clearing: took %d (%v), want the 12 left", len(taken), err)
	}
}

// A task of more elements than the burst goes once the bucket is full, and
// empties it; tasks of several elements take as many tokens.
func TestLimitTaskLargerThanBurst(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	f.setLimit(t, "f", 1, time.Hour, 4, 0)
	f.submitFunc(t, 1, "f", 3, 3, "") // 3 elements each
	taken, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 10, Room: 10, Lease: time.Minute, Serves: serves}))
	if err != nil || len(taken) != 1 {
		t.Fatalf("took %d tasks of 3 elements with a burst of 4 (%v), want 1", len(taken), err)
	}
	f2 := &fixture{c: f.c, r: New(f.c, "rm", f.queue+"-2"), queue: f.queue + "-2", mid: id.New()}
	f2.setLimit(t, "f", 1, time.Hour, 2, 0)
	f2.submitFunc(t, 1, "f", 2, 5, "") // 5 elements each, burst 2
	taken, end, err := takeOf(f2.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 10, Room: 10, Lease: time.Minute, Serves: serves}))
	if err != nil || len(taken) != 1 || end.Wait < 4*time.Hour {
		t.Fatalf("took %d tasks of 5 elements with a burst of 2, waiting %v (%v); want 1, and ~5 h before the next", len(taken), end.Wait, err)
	}
}

// A concurrency cap: a take holds at most the cap's slots; a worker refused
// waits in the waiting set and is rung when a slot returns (a finish, a give
// back, a reap of a dead worker).
func TestLimitConcurrencySlots(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	f.setLimit(t, "f", 0, 0, 0, 2)
	f.submitFunc(t, 1, "f", 6, 1, "")
	taken, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 5, Room: 5, Lease: 200 * time.Millisecond, Serves: serves}))
	if err != nil || len(taken) != 2 {
		t.Fatalf("w1 took %d (%v), want the cap, 2", len(taken), err)
	}
	run := keys.LimitRunning("rm", f.queue, "f")
	if n := f.c.HLen(ctx, run).Val(); n != 2 {
		t.Errorf("running hash holds %d, want 2", n)
	}
	got, end, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w2", Max: 5, Room: 5, Lease: time.Minute, Serves: serves}))
	if err != nil || len(got) != 0 || !end.Drained || end.Wait != 0 {
		t.Fatalf("w2 took %d, %+v (%v); want none, drained, no timed wait", len(got), end, err)
	}
	if !f.c.SIsMember(ctx, keys.LimitWaiting("rm", f.queue, "f"), "w2").Val() {
		t.Error("w2 is not in the function's waiting set")
	}
	// w1 reports one: its slot returns, and w2's bell rings.
	if _, err := f.r.Finish(ctx, &broker.FinishParams{Worker: "w1", Done: []wire.Done{{ID: taken[0].ID, Result: []byte("r")}}}); err != nil {
		t.Fatal(err)
	}
	if n := f.c.LLen(ctx, keys.Bell("rm", f.queue, "w2")).Val(); n != 1 {
		t.Errorf("w2's bell holds %d tokens after a slot returned, want 1", n)
	}
	got, _, err = takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w2", Max: 5, Room: 5, Lease: time.Minute, Serves: serves}))
	if err != nil || len(got) != 1 {
		t.Fatalf("w2 took %d (%v) once a slot returned, want 1", len(got), err)
	}
	// w2 gives it back: the slot returns.
	if n, err := f.r.GiveBack(ctx, &broker.GiveBackParams{Worker: "w2", Members: []string{got[0].ID}}); err != nil || n != 1 {
		t.Fatalf("give back: %d, %v", n, err)
	}
	if n := f.c.HLen(ctx, run).Val(); n != 1 {
		t.Errorf("running hash holds %d after the give back, want w1's 1", n)
	}
	// w1 dies (its lease of 200 ms lapses): the reap returns its slot.
	redistest.Eventually(t, "w1 reaped once its lease lapsed (by the Redis clock)", func() bool {
		r, err := f.r.Reap(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return r.Workers == 1
	})
	if n := f.c.HLen(ctx, run).Val(); n != 0 {
		t.Errorf("running hash holds %d after w1 was reaped, want 0", n)
	}
	// w1's task went back lost once (no suspect: it goes side by side),
	// and both slots are free again: w3 takes it and the other task.
	got, _, err = takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w3", Max: 5, Room: 5, Lease: time.Minute, Serves: serves}))
	if err != nil || len(got) != 2 || got[0].Attempt != 1 {
		t.Fatalf("w3 took %v (%v), want w1's task, then the cap's other slot", got, err)
	}
	if got, _, err = takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w4", Max: 5, Room: 5, Lease: time.Minute, Serves: serves})); err != nil || len(got) != 0 {
		t.Fatalf("w4 took %d (%v), want none: the cap of 2 is held", len(got), err)
	}
}

// A slot whose holder no longer holds its task (a path that forgot to
// return it) is found and dropped once the cap is reached: the cap cannot
// leak.
func TestLimitConcurrencyHealsLeakedSlots(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	f.setLimit(t, "f", 0, 0, 0, 1)
	f.submitFunc(t, 1, "f", 2, 1, "")
	f.c.HSet(ctx, keys.LimitRunning("rm", f.queue, "f"), "ghost-1,1.1", "nobody")
	taken, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 5, Room: 5, Lease: time.Minute, Serves: serves}))
	if err != nil || len(taken) != 1 {
		t.Fatalf("took %d (%v) with a leaked slot in the way, want 1", len(taken), err)
	}
}

// Room: a worker takes no limited task it could not start now; the reply
// says so, and it is not registered idle.
func TestLimitRoom(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	f.setLimit(t, "f", 0, 0, 0, 10)
	f.submitFunc(t, 1, "f", 5, 1, "")
	taken, end, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 5, Room: 2, Lease: time.Minute, Serves: serves}))
	if err != nil || len(taken) != 2 || !end.Room || end.Drained {
		t.Fatalf("took %d, %+v (%v); want 2 (its room), and told room, not drained", len(taken), end, err)
	}
	if f.c.SIsMember(ctx, keys.Idle("rm", f.queue), "w1").Val() {
		t.Error("w1 was registered idle while tasks wait for its room")
	}
}

// A private batch of a limited function is limited too; its list waits in
// order.
func TestLimitPrivate(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	f.setLimit(t, "f", 1, time.Hour, 2, 0)
	f.submitFunc(t, 1, "f", 4, 1, "w1")
	taken, end, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 10, Room: 10, Lease: time.Minute, Serves: serves}))
	if err != nil || len(taken) != 2 || !taken[0].Private || end.Wait == 0 {
		t.Fatalf("took %d private tasks, %+v (%v); want 2, then a wait", len(taken), end, err)
	}
}

// RetryAfter: Throttle pauses a rate for d; a function without a rate is
// not paused.
func TestLimitThrottle(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	f.setLimit(t, "f", 1000, time.Second, 100, 0)
	f.submitFunc(t, 1, "f", 3, 1, "")
	if ok, err := f.r.Throttle(ctx, &broker.ThrottleParams{Func: "f", Quiet: time.Hour}); err != nil || !ok {
		t.Fatalf("throttle: %v %v", ok, err)
	}
	taken, end, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 10, Room: 10, Lease: time.Minute, Serves: serves}))
	if err != nil || len(taken) != 0 || end.Wait < 59*time.Minute {
		t.Fatalf("took %d, %+v (%v) during the pause; want none, waiting about an hour", len(taken), end, err)
	}
	if ok, err := f.r.Throttle(ctx, &broker.ThrottleParams{Func: "unlimited", Quiet: time.Hour}); err != nil || ok {
		t.Errorf("throttle of an unlimited function: %v %v; want false", ok, err)
	}
}

// The sources: the code's limit is in force until an operator sets one;
// clearing the operator's brings the code's back; a declaration that says
// the same keeps its first writer; Limits lists both with the counts.
func TestLimitSources(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	code := wire.NewLimitRecord(50, time.Second, 10, 8, "manager m1", time.Now())
	if got, err := f.r.DeclareLimit(ctx, &broker.DeclareLimitParams{Func: "geo", Record: code}); err != nil || got.From != wire.LimitFromCode || got.Limit.Rate != 50 || got.Limit.Burst != 10 || got.Limit.Concurrency != 8 {
		t.Fatalf("declare: %+v %v", got, err)
	}
	again := code
	again.By = "worker w9"
	if _, err := f.r.DeclareLimit(ctx, &broker.DeclareLimitParams{Func: "geo", Record: again}); err != nil {
		t.Fatal(err)
	}
	if l, src, err := f.r.SetLimit(ctx, "geo", wire.NewLimitRecord(5, time.Second, 1, 0, "operator", time.Now())); err != nil || src != wire.LimitFromOperator || l.Rate != 5 || l.Concurrency != 0 {
		t.Fatalf("set: %+v %q %v", l, src, err)
	}
	ls, err := f.r.Limits(ctx)
	if err != nil || len(ls) != 1 {
		t.Fatalf("limits: %+v %v", ls, err)
	}
	if g := ls[0]; g.Func != "geo" || g.Source != wire.LimitFromOperator || g.InForce.Rate != 5 || g.Code == nil || g.Code.By != "manager m1" || g.Operator == nil {
		t.Errorf("listed %+v", g)
	}
	if l, src, err := f.r.ClearLimit(ctx, "geo"); err != nil || src != wire.LimitFromCode || l.Rate != 50 {
		t.Fatalf("clear: %+v %q %v", l, src, err)
	}
}

// No byte sequence in the limits' keys makes a take fail: a limit that does
// not parse limits nothing; an arrival time that does not parse is none,
// one crafted far ahead waits a day at most.
func TestLimitCraftedRecords(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	f.submitFunc(t, 1, "f", 3, 1, "")
	lims := keys.Limits("rm", f.queue)
	for _, v := range []string{"nan nan nan nan", "inf 1000 5 0", "1 1000 x 0", "-1 -1 -1 -1", "", "1 2 3", "\xff\x00"} {
		f.c.HSet(ctx, lims, "f", v)
		taken, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 1, Room: 1, Lease: time.Minute, Serves: serves}))
		if err != nil || len(taken) != 1 {
			t.Fatalf("limit %q: took %d (%v), want 1 (no limit)", v, len(taken), err)
		}
		f.c.LPush(ctx, keys.Lane("rm", f.queue, f.mid+".1"), taken[0].ID)
		f.c.SRem(ctx, keys.Held("rm", f.queue, "w1"), taken[0].ID)
	}
	f.c.HSet(ctx, lims, "f", "1 1000 5 0")
	for _, v := range []string{"1e300", "inf", "nan", "garbage"} {
		f.c.HSet(ctx, keys.LimitState("rm", f.queue), "f", v)
		_, end, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 1, Room: 1, Lease: time.Minute, Serves: serves}))
		if err != nil || end.Wait > 25*time.Hour {
			t.Fatalf("arrival time %q: %+v, %v; want a wait of a day at most", v, end, err)
		}
	}
	if ls, err := f.r.Limits(ctx); err != nil || len(ls) != 1 {
		t.Fatalf("limits: %+v %v", ls, err)
	}
}

// A copy (a backup task) of a limited function's task is never taken: it
// would spend the limit's budget twice. A take drops it; the original,
// held, runs on. (Managers queue none for a limit declared with the
// function; this is one an operator set after the copy was queued.)
func TestLimitDropsBackups(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	ids := f.submitFunc(t, 1, "f", 1, 1, "")
	f.submitFunc(t, 2, "g", 1, 1, "")
	taken, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 2, Room: 2, Lease: time.Minute, Serves: servesFG}))
	if err != nil || len(taken) != 2 {
		t.Fatalf("w1's take: %d tasks, %v; want both", len(taken), err)
	}
	// w2 waits, idle, so that backups may be queued.
	if taken, end, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w2", Max: 2, Room: 2, Lease: time.Minute, Serves: servesFG})); err != nil || len(taken) != 0 || !end.Drained {
		t.Fatalf("w2's take: %d tasks, %+v, %v; want none, drained", len(taken), end, err)
	}
	gid := taken[1].ID
	if taken[0].ID != ids[0] {
		gid = taken[0].ID
	}
	got, err := f.r.Backup(ctx, &broker.BackupParams{Manager: f.mid, Tasks: []string{ids[0], gid}})
	if err != nil || got[0].State != broker.BackupQueued || got[1].State != broker.BackupQueued {
		t.Fatalf("backups: %+v, %v; want both queued", got, err)
	}
	if n, err := f.c.LLen(ctx, keys.Backups("rm", f.queue)).Result(); err != nil || n != 2 {
		t.Fatalf("the backups list holds %d (%v); want the 2 copies", n, err)
	}
	f.setLimit(t, "f", 0, 0, 0, 1)
	taken, _, err = takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w2", Max: 2, Room: 2, Lease: time.Minute, Serves: servesFG}))
	if err != nil || len(taken) != 1 || taken[0].ID != gid || !taken[0].Backup {
		t.Fatalf("w2's take after the limit: %+v, %v; want the copy of g's task alone", taken, err)
	}
	if n, err := f.c.Exists(ctx, keys.Backups("rm", f.queue)).Result(); err != nil || n != 0 {
		t.Fatalf("the backups list exists (%d, %v) after the take; want the limited copy dropped", n, err)
	}
}
