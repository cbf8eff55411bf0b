// Package brokertest is the conformance suite of the broker contract
// (internal/broker): the rules the parts of the manager and the worker, and
// the operators' tools, rely on, run against an implementation on a real
// store (internal/broker/redisbroker on a redis-server).
package brokertest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/id"
)

// A Harness is a fresh, empty queue of one implementation, and what the
// suite needs besides the contract to set its scenes: a manager's side,
// until the contract holds it too.
type Harness interface {
	// Queue returns shard 0 of the queue.
	Queue() broker.Queue
	// Add queues one task per entry of attempts, with that many attempts
	// lost, on the public list, as a manager submits them and reaps leave
	// them; it returns their ids, in order.
	Add(t *testing.T, attempts ...int) []string
	// Cancel withdraws tasks, as their manager does.
	Cancel(t *testing.T, tids ...string)
	// Delivered returns the ids of the tasks whose results were
	// delivered, in order.
	Delivered(t *testing.T) []string
	// Serves is what a worker registers to take the tasks Add queues.
	Serves() []string
	// Manager is the manager Add submits as, Lane the lane it submits on.
	Manager() string
	Lane() wire.Lane
	// Lose loses the manager's task set, as a Redis that lost its data.
	Lose(t *testing.T)
	// Operator returns the operators' side of the same store, and Name the
	// queue's name, by which an operator names it.
	Operator() broker.Operator
	Name() string
}

// Run runs the suite, opening a fresh queue for each case.
func Run(t *testing.T, open func(t *testing.T) Harness) {
	t.Run("take", func(t *testing.T) { testTake(t, open) })
	t.Run("suspect held in the store", func(t *testing.T) { testSuspectHeld(t, open) })
	t.Run("take drops withdrawn", func(t *testing.T) { testTakeDropsWithdrawn(t, open) })
	t.Run("finish", func(t *testing.T) { testFinish(t, open) })
	t.Run("give back", func(t *testing.T) { testGiveBack(t, open) })
	t.Run("unwanted", func(t *testing.T) { testUnwanted(t, open) })
	t.Run("retire", func(t *testing.T) { testRetire(t, open) })
	t.Run("bells", func(t *testing.T) { testBells(t, open) })
	t.Run("give back rings no one", func(t *testing.T) { testGiveBackRingsNoOne(t, open) })
	t.Run("lost private", func(t *testing.T) { testLostPrivate(t, open) })
	t.Run("heartbeat", func(t *testing.T) { testHeartbeat(t, open) })
	t.Run("task set", func(t *testing.T) { testTaskSet(t, open) })
	t.Run("results", func(t *testing.T) { testResults(t, open) })
	t.Run("live workers", func(t *testing.T) { testLiveWorkers(t, open) })
	t.Run("partitions", func(t *testing.T) { testPartitions(t, open) })
	t.Run("backups", func(t *testing.T) { testBackups(t, open) })
	t.Run("shard basics", func(t *testing.T) { testShardBasics(t, open) })
	t.Run("claim", func(t *testing.T) { testClaim(t, open) })
	t.Run("durable records", func(t *testing.T) { testDurableRecords(t, open) })
	t.Run("operator: queue", func(t *testing.T) { testOperatorQueue(t, open) })
	t.Run("operator: batches", func(t *testing.T) { testOperatorBatches(t, open) })
	t.Run("operator: controls", func(t *testing.T) { testOperatorControls(t, open) })
	t.Run("operator: durable", func(t *testing.T) { testOperatorDurable(t, open) })
}

const wid = "w1"

func params(h Harness, max, holding int) *broker.TakeParams {
	return &broker.TakeParams{Worker: wid, Max: max, Room: max, Holding: holding, Lease: time.Minute, Shards: 1, Serves: h.Serves()}
}

func take(t *testing.T, h Harness, max, holding int) *broker.TakeResult {
	t.Helper()
	got, err := h.Queue().Take(context.Background(), params(h, max, holding))
	if err != nil {
		t.Fatalf("take: %v", err)
	}
	return got
}

// indexes returns the index in ids of each task taken.
func indexes(ids []string, taken []wire.Taken) []int {
	out := []int{}
	for _, tk := range taken {
		out = append(out, slices.Index(ids, tk.ID))
	}
	return out
}

// testTake: a take takes up to Max, in order; a suspect (lost
// wire.SuspectAfter times) comes alone, only to a worker holding nothing by
// its own count; a take stops at one it may not take; a take that leaves
// the lists empty, having taken fewer than Max, and not for a suspect, is
// drained.
func testTake(t *testing.T, open func(t *testing.T) Harness) {
	type step struct {
		max, holding int
		want         []int // indexes of the queued tasks the take returns, in order
		suspect      bool  // TakeEnd.Suspect
		drained      bool  // TakeEnd.Drained
	}
	cases := []struct {
		name     string
		attempts []int
		takes    []step
	}{
		{"up to max, then drained", []int{0, 0, 0}, []step{
			{max: 2, want: []int{0, 1}},
			{max: 2, want: []int{2}, drained: true},
		}},
		{"a take of all, to max, is not drained", []int{0, 0}, []step{
			{max: 2, want: []int{0, 1}},
			{max: 2, want: []int{}, drained: true},
		}},
		{"a suspect waits for a worker holding nothing", []int{wire.SuspectAfter}, []step{
			{max: 4, holding: 1, want: []int{}, suspect: true},
			{max: 4, want: []int{0}},
		}},
		{"a suspect comes alone", []int{wire.SuspectAfter, 0}, []step{
			{max: 4, want: []int{0}},
		}},
		{"a take stops at a suspect", []int{0, wire.SuspectAfter, 0}, []step{
			{max: 4, want: []int{0}, suspect: true},
		}},
		{"a task lost once is no suspect", []int{1, 0}, []step{
			{max: 4, want: []int{0, 1}, drained: true},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := open(t)
			ids := h.Add(t, c.attempts...)
			for i, s := range c.takes {
				got := take(t, h, s.max, s.holding)
				if idx := indexes(ids, got.Taken); !slices.Equal(idx, s.want) || got.End.Suspect != s.suspect || got.End.Drained != s.drained {
					t.Errorf("take %d (max %d, holding %d): tasks %v, suspect %v, drained %v; want %v, %v, %v",
						i, s.max, s.holding, idx, got.End.Suspect, got.End.Drained, s.want, s.suspect, s.drained)
				}
				for _, tk := range got.Taken {
					if a := c.attempts[slices.Index(ids, tk.ID)]; tk.Attempt != a || len(tk.Payload) == 0 {
						t.Errorf("take %d: task %s with attempt %d and %d bytes; want attempt %d, its payload", i, tk.ID, tk.Attempt, len(tk.Payload), a)
					}
				}
			}
		})
	}
}

// testSuspectHeld: a suspect goes only to a worker whose held set is empty
// in the store, whatever it says it holds: a take whose reply was lost
// holds tasks the worker does not know of.
func testSuspectHeld(t *testing.T, open func(t *testing.T) Harness) {
	h := open(t)
	ids := h.Add(t, 0, wire.SuspectAfter)
	if got := take(t, h, 1, 0); !slices.Equal(indexes(ids, got.Taken), []int{0}) {
		t.Fatalf("first take: %v, want [0]", indexes(ids, got.Taken))
	}
	if got := take(t, h, 4, 0); len(got.Taken) != 0 || !got.End.Suspect {
		t.Errorf("a take by a worker the store says holds a task: %v, suspect %v; want none, suspect", indexes(ids, got.Taken), got.End.Suspect)
	}
}

// testTakeDropsWithdrawn: a take skips tasks their manager withdrew.
func testTakeDropsWithdrawn(t *testing.T, open func(t *testing.T) Harness) {
	h := open(t)
	ids := h.Add(t, 0, 0, 0)
	h.Cancel(t, ids[1])
	if got := take(t, h, 4, 0); !slices.Equal(indexes(ids, got.Taken), []int{0, 2}) || !got.End.Drained {
		t.Errorf("take: %v, drained %v; want [0 2], drained", indexes(ids, got.Taken), got.End.Drained)
	}
}

func result(t *testing.T, tid string) []byte {
	t.Helper()
	b, err := codec.EncodeResult(&codec.Result{Task: tid})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func held(t *testing.T, h Harness) []string {
	t.Helper()
	ms, err := h.Queue().Held(context.Background(), &broker.HeldParams{Worker: wid})
	if err != nil {
		t.Fatalf("held: %v", err)
	}
	slices.Sort(ms)
	return ms
}

// testFinish: a result is delivered only while its task is in its
// manager's task set, and delivering removes it: the first result wins,
// a second is discarded, a withdrawn task's too, and an empty one (a task
// skipped unrun) only releases it. Every task reported leaves the held
// set.
func testFinish(t *testing.T, open func(t *testing.T) Harness) {
	h := open(t)
	ctx := context.Background()
	ids := h.Add(t, 0, 0, 0)
	got := take(t, h, 3, 0)
	if len(got.Taken) != 3 {
		t.Fatalf("took %d tasks, want 3", len(got.Taken))
	}
	if ms := held(t, h); !slices.Equal(ms, slices.Sorted(slices.Values(ids))) {
		t.Fatalf("held %v after the take, want %v", ms, ids)
	}
	h.Cancel(t, ids[1])
	done := []wire.Done{{ID: ids[0], Result: result(t, ids[0])}, {ID: ids[1], Result: result(t, ids[1])}, {ID: ids[2]}}
	fin, err := h.Queue().Finish(ctx, &broker.FinishParams{Worker: wid, Done: done})
	if err != nil || fin.Sent != 3 || fin.Delivered != 1 {
		t.Fatalf("finish: %+v, %v; want 3 sent, 1 delivered", fin, err)
	}
	again, err := h.Queue().Finish(ctx, &broker.FinishParams{Worker: wid, Done: done[:1]})
	if err != nil || again.Sent != 1 || again.Delivered != 0 {
		t.Fatalf("finishing again: %+v, %v; want 1 sent, none delivered", again, err)
	}
	if d := h.Delivered(t); !slices.Equal(d, ids[:1]) {
		t.Errorf("delivered %v, want [%s]", d, ids[0])
	}
	if ms := held(t, h); len(ms) != 0 {
		t.Errorf("held %v after the finish, want none", ms)
	}
	// The empty result released its task unrun: still wanted, it is not
	// delivered, and no take finds it (it waits for a reap or a recovery).
	if got := take(t, h, 3, 0); len(got.Taken) != 0 {
		t.Errorf("a take after the finish: %v, want none", indexes(ids, got.Taken))
	}
}

// testBackups: a backup of a held task is queued only while a worker is
// idle, with the worker that holds the original; no take gives it to that
// worker, another's does, marked, before the public list; the first result
// wins. A task lost before, or no longer wanted, is never copied.
func testBackups(t *testing.T, open func(t *testing.T) Harness) {
	h := open(t)
	ids := h.Add(t, 0, 0, 1, 0)
	if got := take(t, h, 3, 0); len(got.Taken) != 3 {
		t.Fatalf("took %d tasks, want 3", len(got.Taken))
	}
	other := &broker.TakeParams{Worker: "w2", Max: 1, Room: 1, Lease: time.Minute, Shards: 1, Serves: h.Serves()}
	backupWaitsForIdle(t, h, ids, other)
	h.Cancel(t, ids[1])
	got := backup(t, h, ids[0], ids[1], ids[2])
	if got[0].State != broker.BackupQueued || got[0].Holder != wid || got[1].State != broker.BackupGone || got[2].State != broker.BackupLost {
		t.Fatalf("backups %+v: want the first queued (held by %s), the withdrawn one gone, the one lost before lost", got, wid)
	}
	if got := take(t, h, 3, 3); len(got.Taken) != 0 {
		t.Fatalf("the holder's take: %v, want none of its own task's copy", indexes(ids, got.Taken))
	}
	other.Max, other.Room = 2, 2
	copied, err := h.Queue().Take(context.Background(), other)
	if err != nil || len(copied.Taken) != 1 || copied.Taken[0].ID != ids[0] || !copied.Taken[0].Backup || copied.Taken[0].Attempt != 0 {
		t.Fatalf("w2's take after the backup: %+v, %v; want the copy of the first task, marked", copied, err)
	}
	if n := finishAs(t, h, "w2", ids[0]); n != 1 {
		t.Fatalf("the copy's finish delivered %d, want 1", n)
	}
	if n := finishAs(t, h, wid, ids[0]); n != 0 {
		t.Fatalf("the original's finish after the copy's delivered %d, want it discarded", n)
	}
	if d := h.Delivered(t); !slices.Equal(d, ids[:1]) {
		t.Errorf("delivered %v, want [%s] once", d, ids[0])
	}
}

// backupWaitsForIdle: while nobody is idle (the worker holds three of
// tasks ids and one waits), a backup is refused as busy; worker other then
// takes the last task and, taking again, is idle.
func backupWaitsForIdle(t *testing.T, h Harness, ids []string, other *broker.TakeParams) {
	t.Helper()
	if got := backup(t, h, ids[0]); got[0].State != broker.BackupBusy {
		t.Fatalf("a backup with no worker idle: %+v, want busy", got[0])
	}
	ctx := context.Background()
	if got, err := h.Queue().Take(ctx, other); err != nil || len(got.Taken) != 1 || got.Taken[0].ID != ids[3] {
		t.Fatalf("w2's first take: %+v, %v; want the last task", got, err)
	}
	if got, err := h.Queue().Take(ctx, other); err != nil || len(got.Taken) != 0 || !got.End.Drained {
		t.Fatalf("w2's second take: %+v, %v; want none, drained (idle)", got, err)
	}
}

// backup asks for backups of tasks tids, one state each.
func backup(t *testing.T, h Harness, tids ...string) []broker.Backup {
	t.Helper()
	got, err := h.Queue().Backup(context.Background(), &broker.BackupParams{Manager: h.Manager(), Tasks: tids})
	if err != nil || len(got) != len(tids) {
		t.Fatalf("backup: %+v, %v", got, err)
	}
	return got
}

// finishAs finishes task tid as worker w, and returns how many results
// were delivered.
func finishAs(t *testing.T, h Harness, w, tid string) int {
	t.Helper()
	fin, err := h.Queue().Finish(context.Background(), &broker.FinishParams{Worker: w, Done: []wire.Done{{ID: tid, Result: result(t, tid)}}})
	if err != nil {
		t.Fatalf("finish of %s by %s: %v", tid, w, err)
	}
	return fin.Delivered
}

// testGiveBack: given back, a held task still wanted goes to the front of
// its list, an attempt counted if it ran; one withdrawn is released, not
// counted.
func testGiveBack(t *testing.T, open func(t *testing.T) Harness) {
	h := open(t)
	ctx := context.Background()
	ids := h.Add(t, 0, 0, 0, 0)
	got := take(t, h, 3, 0)
	if len(got.Taken) != 3 {
		t.Fatalf("took %d tasks, want 3", len(got.Taken))
	}
	h.Cancel(t, ids[2])
	n, err := h.Queue().GiveBack(ctx, &broker.GiveBackParams{Worker: wid, Members: []string{got.Taken[0].Member(), got.Taken[2].Member()}})
	if err != nil || n != 1 {
		t.Fatalf("give back unrun: %d, %v; want 1", n, err)
	}
	n, err = h.Queue().GiveBack(ctx, &broker.GiveBackParams{Worker: wid, Members: []string{got.Taken[1].Member()}, Ran: true})
	if err != nil || n != 1 {
		t.Fatalf("give back run: %d, %v; want 1", n, err)
	}
	if ms := held(t, h); len(ms) != 0 {
		t.Errorf("held %v after giving all back, want none", ms)
	}
	again := take(t, h, 4, 0)
	if idx := indexes(ids, again.Taken); !slices.Equal(slices.Sorted(slices.Values(idx)), []int{0, 1, 3}) {
		t.Fatalf("take after the give-backs: %v, want 0, 1 and 3", idx)
	}
	for _, tk := range again.Taken {
		if want := map[string]int{ids[1]: 1}[tk.ID]; tk.Attempt != want {
			t.Errorf("task %s came back with attempt %d, want %d", tk.ID, tk.Attempt, want)
		}
	}
	if idx := indexes(ids, again.Taken); idx[2] != 3 {
		t.Errorf("take after the give-backs: %v; the given back come first", idx)
	}
}

// testUnwanted: Unwanted names the tasks withdrawn, and, as outrun, those
// whose backup task's result came first; a copied task withdrawn is not
// outrun.
func testUnwanted(t *testing.T, open func(t *testing.T) Harness) {
	h := open(t)
	ctx := context.Background()
	ids := h.Add(t, 0, 0, 0, 0)
	take(t, h, 4, 0)
	h.Cancel(t, ids[0])
	u, err := h.Queue().Unwanted(ctx, &broker.UnwantedParams{Worker: wid, Tasks: ids})
	if err != nil || !slices.Equal(u.Tasks, ids[:1]) || len(u.Outrun) != 0 {
		t.Fatalf("unwanted: %+v, %v; want [%s], none outrun", u, err, ids[0])
	}

	// w2, idle, gets copies of ids[1] and ids[2]; ids[2] is withdrawn, and
	// ids[1]'s copy delivers its result.
	other := &broker.TakeParams{Worker: "w2", Max: 2, Room: 2, Lease: time.Minute, Shards: 1, Serves: h.Serves()}
	if got, err := h.Queue().Take(ctx, other); err != nil || len(got.Taken) != 0 || !got.End.Drained {
		t.Fatalf("w2's take: %+v, %v; want none, drained (idle)", got, err)
	}
	got, err := h.Queue().Backup(ctx, &broker.BackupParams{Manager: h.Manager(), Tasks: ids[1:3]})
	if err != nil || len(got) != 2 || got[0].State != broker.BackupQueued || got[1].State != broker.BackupQueued {
		t.Fatalf("backup: %+v, %v; want both queued", got, err)
	}
	h.Cancel(t, ids[2])
	if copied, err := h.Queue().Take(ctx, other); err != nil || len(copied.Taken) != 1 || copied.Taken[0].ID != ids[1] {
		t.Fatalf("w2's take of the copies: %+v, %v; want ids[1]'s", copied, err)
	}
	if fin, err := h.Queue().Finish(ctx, &broker.FinishParams{Worker: "w2", Done: []wire.Done{{ID: ids[1], Result: result(t, ids[1])}}}); err != nil || fin.Delivered != 1 {
		t.Fatalf("the copy's finish: %+v, %v; want it delivered", fin, err)
	}
	u, err = h.Queue().Unwanted(ctx, &broker.UnwantedParams{Worker: wid, Tasks: ids})
	if err != nil || !slices.Equal(u.Tasks, ids[:3]) || !slices.Equal(u.Outrun, ids[1:2]) {
		t.Errorf("unwanted: %+v, %v; want %v, %s outrun", u, err, ids[:3], ids[1])
	}
}

// testRetire: a worker that retires gives its public tasks back, each with
// an attempt counted, as a reap of a dead worker does.
func testRetire(t *testing.T, open func(t *testing.T) Harness) {
	h := open(t)
	ctx := context.Background()
	ids := h.Add(t, 0, 0)
	if _, err := h.Queue().Heartbeat(ctx, &broker.HeartbeatParams{Worker: wid, Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	take(t, h, 2, 0)
	reaped, err := h.Queue().Retire(ctx, &broker.RetireParams{Worker: wid})
	if err != nil || reaped.Workers != 1 || reaped.Requeued != 2 || reaped.Lost != 0 {
		t.Fatalf("retire: %+v, %v; want 1 worker, 2 tasks requeued", reaped, err)
	}
	got, err := h.Queue().Take(ctx, &broker.TakeParams{Worker: "w2", Max: 2, Room: 2, Lease: time.Minute, Shards: 1, Serves: h.Serves()})
	if err != nil || len(got.Taken) != 2 {
		t.Fatalf("another worker's take: %v, %v; want both tasks", got, err)
	}
	for _, tk := range got.Taken {
		if tk.Attempt != 1 || !slices.Contains(ids, tk.ID) {
			t.Errorf("task %s came back with attempt %d, want 1", tk.ID, tk.Attempt)
		}
	}
}

// testBells: a worker whose take drained waits for its bell, which a
// submit rings; a stopping worker's ring ends the wait, and its next take
// takes nothing.
func testBells(t *testing.T, open func(t *testing.T) Harness) {
	h := open(t)
	ctx := context.Background()
	if got := take(t, h, 1, 0); !got.End.Drained {
		t.Fatalf("a take of an empty queue is not drained")
	}
	rang, err := h.Queue().WaitBell(ctx, &broker.WaitBellParams{Worker: wid, Timeout: 50 * time.Millisecond})
	if err != nil || rang {
		t.Fatalf("wait on an empty queue: %v, %v; want no ring", rang, err)
	}
	waited := make(chan bool, 1)
	go func() {
		r, _ := h.Queue().WaitBell(ctx, &broker.WaitBellParams{Worker: wid, Timeout: time.Minute})
		waited <- r
	}()
	h.Add(t, 0)
	if !<-waited {
		t.Errorf("a submit did not ring the idle worker's bell")
	}
	if err := h.Queue().RingStop(ctx, &broker.RingStopParams{Worker: wid}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if got := take(t, h, 1, 0); len(got.Taken) != 0 {
			t.Errorf("take %d of a stopping worker took %d tasks, want none", i, len(got.Taken))
		}
	}
}

// testGiveBackRingsNoOne: a give-back puts tasks back without ringing a
// bell: a worker idle on an empty queue waits on, and takes them at its
// next take.
func testGiveBackRingsNoOne(t *testing.T, open func(t *testing.T) Harness) {
	h := open(t)
	ctx := context.Background()
	ids := h.Add(t, 0)
	got := take(t, h, 1, 0)
	if len(got.Taken) != 1 {
		t.Fatalf("took %d tasks, want 1", len(got.Taken))
	}
	if again := take(t, h, 1, 0); !again.End.Drained {
		t.Fatal("a take of an empty queue is not drained")
	}
	if n, err := h.Queue().GiveBack(ctx, &broker.GiveBackParams{Worker: wid, Members: []string{got.Taken[0].Member()}}); err != nil || n != 1 {
		t.Fatalf("give back: %d, %v", n, err)
	}
	if rang, err := h.Queue().WaitBell(ctx, &broker.WaitBellParams{Worker: wid, Timeout: 50 * time.Millisecond}); err != nil || rang {
		t.Errorf("wait after a give-back: rang %v, %v; want no ring", rang, err)
	}
	if again := take(t, h, 1, 0); !slices.Equal(indexes(ids, again.Taken), []int{0}) {
		t.Errorf("take after the give-back: %v, want the task", indexes(ids, again.Taken))
	}
}

// testLostPrivate: a private task of a worker that retired (or died) is
// lost, not run elsewhere: its manager gets a lost entry naming the worker
// in place of a result.
func testLostPrivate(t *testing.T, open func(t *testing.T) Harness) {
	h := open(t)
	ctx := context.Background()
	q, mid := h.Queue(), h.Manager()
	if _, err := q.Heartbeat(ctx, &broker.HeartbeatParams{Worker: wid, Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	tid := id.TaskIn(mid, 500, 1, 1, 3, 3)
	if _, err := q.Submit(ctx, &broker.SubmitParams{Manager: mid, Worker: wid, Lane: h.Lane(), TTL: time.Minute,
		Tasks: []wire.Task{{ID: tid, Payload: []byte("payload")}}, Expect: wire.Expect{Epoch: "e1"}}); err != nil {
		t.Fatal(err)
	}
	if got := take(t, h, 1, 0); len(got.Taken) != 1 || !got.Taken[0].Private {
		t.Fatalf("take of the private task: %+v", got.Taken)
	}
	reaped, err := q.Retire(ctx, &broker.RetireParams{Worker: wid})
	if err != nil || reaped.Lost != 1 || reaped.Requeued != 0 {
		t.Fatalf("retire: %+v, %v; want the private task lost", reaped, err)
	}
	entries, err := q.ReadResults(ctx, &broker.ReadResultsParams{Manager: mid, Limit: 10})
	if err != nil || len(entries) != 1 {
		t.Fatalf("result list: %q, %v; want one entry", entries, err)
	}
	if e, err := wire.DecodeEntry(entries[0], 1<<20); err != nil || e.Kind != wire.EntryLost || e.Task != tid || e.Worker != wid {
		t.Errorf("entry %q: %+v, %v; want the task lost with %s", entries[0], e, err, wid)
	}
}

// testHeartbeat: a heartbeat says the queue's shard count.
func testHeartbeat(t *testing.T, open func(t *testing.T) Harness) {
	h := open(t)
	beat, err := h.Queue().Heartbeat(context.Background(), &broker.HeartbeatParams{Worker: wid, Lease: time.Minute, Info: &wire.WorkerInfo{Host: "here"}})
	if err != nil || beat.Shards != 1 || beat.Drain {
		t.Errorf("heartbeat: %+v, %v; want 1 shard, no drain", beat, err)
	}
}

// testTaskSet: a submit counts its tasks and says whether the set was
// intact (the count it expected, its epoch); a cancel withdraws; Missing
// names what is gone, with the count and epoch; a set the store lost is
// not intact, and a recovery's submit installs a new epoch.
func testTaskSet(t *testing.T, open func(t *testing.T) Harness) {
	h := open(t)
	ctx := context.Background()
	q, mid := h.Queue(), h.Manager()
	var seq uint64 = 1000
	tasks := func(n int) ([]wire.Task, []string) {
		var ts []wire.Task
		var ids []string
		for range n {
			seq++
			tid := id.TaskIn(mid, seq, 1, 1, 3, 3)
			ts = append(ts, wire.Task{ID: tid, Payload: []byte("payload")})
			ids = append(ids, tid)
		}
		return ts, ids
	}
	submit := func(step string, ts []wire.Task, exp wire.Expect, wantCount int64, wantIntact bool) {
		t.Helper()
		got, err := q.Submit(ctx, &broker.SubmitParams{Manager: mid, Lane: h.Lane(), Tasks: ts, TTL: time.Minute, Expect: exp})
		if err != nil || got.Count != wantCount || got.Intact != wantIntact {
			t.Fatalf("%s: %+v, %v; want count %d, intact %v", step, got, err, wantCount, wantIntact)
		}
	}
	state := func(step string, wantCount int64, wantEpoch string) {
		t.Helper()
		got, err := q.Submitted(ctx, &broker.ManagerParams{Manager: mid})
		if err != nil || got.Count != wantCount || got.Epoch != wantEpoch {
			t.Fatalf("%s: Submitted %+v, %v; want %d %q", step, got, err, wantCount, wantEpoch)
		}
	}
	first, ids := tasks(3)
	submit("first submit", first, wire.Expect{Epoch: "e1"}, 3, true)
	state("after the first", 3, "e1")
	more, moreIDs := tasks(2)
	ids = append(ids, moreIDs...)
	submit("second submit", more, wire.Expect{Count: 3, Epoch: "e1"}, 5, true)
	if err := q.Cancel(ctx, &broker.CancelParams{Manager: mid, Tasks: ids[1:2]}); err != nil {
		t.Fatal(err)
	}
	missing, err := q.Missing(ctx, &broker.MissingParams{Manager: mid, Tasks: ids})
	if err != nil || !slices.Equal(missing.Missing, ids[1:2]) || missing.Count != 5 || missing.Epoch != "e1" {
		t.Fatalf("Missing after a cancel: %+v, %v; want [%s] 5 \"e1\"", missing, err, ids[1])
	}
	h.Lose(t)
	again, _ := tasks(1)
	submit("submit after the store lost the set", again, wire.Expect{Count: 5, Epoch: "e1"}, 1, false)
	recovered, _ := tasks(1)
	submit("a recovery's submit", recovered, wire.Expect{Count: 1, Epoch: "e1", NewEpoch: "e2"}, 2, true)
	state("after the recovery", 2, "e2")
	submit("a submit under the old epoch", again, wire.Expect{Count: 2, Epoch: "e1"}, 3, false)
}

// testResults: a delivered result waits on its manager's result list:
// WaitResults returns the first without taking it; a read trims the
// entries the last read handled, if the last of them is the one marked,
// and reads on; ReadThenWait, finding none, waits (and says so) for the
// next.
func testResults(t *testing.T, open func(t *testing.T) Harness) {
	h := open(t)
	ctx := context.Background()
	q, mid := h.Queue(), h.Manager()
	ids := h.Add(t, 0, 0, 0)
	take(t, h, 3, 0)
	finish := func(tids ...string) {
		t.Helper()
		var done []wire.Done
		for _, tid := range tids {
			done = append(done, wire.Done{ID: tid, Result: result(t, tid)})
		}
		if fin, err := q.Finish(ctx, &broker.FinishParams{Worker: wid, Done: done}); err != nil || fin.Delivered != len(tids) {
			t.Fatalf("finish: %+v, %v", fin, err)
		}
	}
	finish(ids[0], ids[1])
	first, err := q.WaitResults(ctx, &broker.WaitResultsParams{Manager: mid, Timeout: time.Second})
	if err != nil || first != string(result(t, ids[0])) {
		t.Fatalf("WaitResults: %q, %v; want the first result", first, err)
	}
	read, err := q.ReadResults(ctx, &broker.ReadResultsParams{Manager: mid, Limit: 10})
	if err != nil || len(read) != 2 || read[0] != first {
		t.Fatalf("read: %d entries, %v; want both results, the first first", len(read), err)
	}
	rest, err := q.ReadResults(ctx, &broker.ReadResultsParams{Manager: mid, Handled: 1, Mark: broker.Mark(read[0]), Limit: 10})
	if err != nil || len(rest) != 1 || rest[0] != read[1] {
		t.Fatalf("read after one handled: %d entries, %v; want the second result", len(rest), err)
	}
	stale, err := q.ReadResults(ctx, &broker.ReadResultsParams{Manager: mid, Handled: 1, Mark: broker.Mark("no such entry"), Limit: 10})
	if err != nil || len(stale) != 1 {
		t.Fatalf("read with a mark of another entry: %d entries, %v; want nothing trimmed", len(stale), err)
	}
	none, err := q.ReadThenWait(ctx, &broker.ReadResultsParams{Manager: mid, Handled: 1, Mark: broker.Mark(read[1]), Limit: 10, Wait: 50 * time.Millisecond})
	if err != nil || len(none.Entries) != 0 || !none.FromWait {
		t.Fatalf("ReadThenWait once all was handled: %+v, %v; want nothing, from the wait", none, err)
	}
	waited := make(chan *broker.ReadThenWaitResult, 1)
	go func() {
		got, _ := q.ReadThenWait(ctx, &broker.ReadResultsParams{Manager: mid, Limit: 10, Wait: time.Minute})
		waited <- got
	}()
	finish(ids[2]) // before the wait or during it: either way the read or the wait brings it
	if got := <-waited; got == nil || len(got.Entries) != 1 || got.Entries[0] != string(result(t, ids[2])) {
		t.Errorf("ReadThenWait: %+v; want the third result", got)
	}
}

// testLiveWorkers: a worker is live while its lease holds; retired, it is
// not.
func testLiveWorkers(t *testing.T, open func(t *testing.T) Harness) {
	h := open(t)
	ctx := context.Background()
	q := h.Queue()
	if _, err := q.Heartbeat(ctx, &broker.HeartbeatParams{Worker: wid, Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if ws, err := q.LiveWorkers(ctx); err != nil || !slices.Equal(ws, []string{wid}) {
		t.Fatalf("live: %v, %v; want [%s]", ws, err, wid)
	}
	if _, err := q.Retire(ctx, &broker.RetireParams{Worker: wid}); err != nil {
		t.Fatal(err)
	}
	if ws, err := q.LiveWorkers(ctx); err != nil || len(ws) != 0 {
		t.Errorf("live after the retire: %v, %v; want none", ws, err)
	}
}

// testPartitions: a map task's partials are stored under its range, a run
// again replacing them; a reduce reads those of the fields asked for (nil
// for one not stored), and its output replaces them; the output is read a
// page at a time, a page past its end missing; dropped, a partition is
// gone.
func testPartitions(t *testing.T, open func(t *testing.T) Harness) {
	h := open(t)
	ctx := context.Background()
	q := h.Queue()
	sh := &wire.Shuffle{Job: h.Manager() + "-job", Parts: 2, Phase: wire.PhaseMap, TTL: time.Minute.Milliseconds()}
	store := func(field string, partials ...string) {
		t.Helper()
		var bs [][]byte
		for _, p := range partials {
			bs = append(bs, []byte(p))
		}
		if err := q.StorePartials(ctx, &broker.StorePartialsParams{Shuffle: sh, Field: field, Partials: bs}); err != nil {
			t.Fatal(err)
		}
	}
	store("0-2", "a0", "a1")
	store("2-4", "b0", "stale")
	store("2-4", "b0", "b1") // the same task run again
	if got := partials(t, q, sh, 1, "0-2", "4-6", "2-4"); !slices.Equal(got, []string{"a1", none, "b1"}) {
		t.Fatalf("partials of partition 1: %q; want a1, none, b1", got)
	}
	if err := q.StoreOutput(ctx, &broker.StoreOutputParams{Shuffle: sh, Part: 1, Pages: [][]byte{[]byte("p0"), []byte("p1")}}); err != nil {
		t.Fatal(err)
	}
	if got := partials(t, q, sh, 1, "0-2"); !slices.Equal(got, []string{none}) {
		t.Errorf("partials once the output is stored: %q; want none", got)
	}
	for i, want := range []string{"p0", "p1"} {
		if b, err := q.OutputPage(ctx, &broker.OutputPageParams{Shuffle: sh, Part: 1, Page: i}); err != nil || string(b) != want {
			t.Errorf("page %d: %q, %v; want %q", i, b, err, want)
		}
	}
	if _, err := q.OutputPage(ctx, &broker.OutputPageParams{Shuffle: sh, Part: 1, Page: 2}); !errors.Is(err, broker.ErrPageMissing) {
		t.Errorf("page 2 of 2: %v, want ErrPageMissing", err)
	}
	if err := q.RenewPartitions(ctx, &broker.PartitionsParams{Shuffle: sh, Parts: []int{0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := q.RecordShuffle(ctx, &broker.RecordShuffleParams{Shuffle: sh}); err != nil {
		t.Fatal(err)
	}
	if err := q.DropPartitions(ctx, &broker.PartitionsParams{Shuffle: sh, Parts: []int{0, 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.OutputPage(ctx, &broker.OutputPageParams{Shuffle: sh, Part: 1, Page: 0}); !errors.Is(err, broker.ErrPageMissing) {
		t.Errorf("a page once dropped: %v, want ErrPageMissing", err)
	}
	if got := partials(t, q, sh, 0, "0-2"); !slices.Equal(got, []string{none}) {
		t.Errorf("partials once dropped: %q; want none", got)
	}
}

// none is what partials reads of a partial not stored.
const none = "(none)"

// partials reads the partials of partition part stored under fields,
// one a field: none for a field with none.
func partials(t *testing.T, q broker.Queue, sh *wire.Shuffle, part int, fields ...string) []string {
	t.Helper()
	got, err := q.Partials(context.Background(), &broker.PartialsParams{Shuffle: sh, Part: part, Fields: fields})
	if err != nil || len(got) != len(fields) {
		t.Fatalf("partials of partition %d, fields %q: %q, %v", part, fields, got, err)
	}
	out := make([]string, len(got))
	for i, p := range got {
		out[i] = none
		if p != nil {
			out[i] = string(p)
		}
	}
	return out
}
