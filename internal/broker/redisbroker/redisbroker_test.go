package redisbroker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/failure"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

type fixture struct {
	c     *redis.Client
	r     *Broker
	queue string
	mid   string
}

func setup(t *testing.T) *fixture {
	t.Helper()
	t.Parallel()
	srv := redistest.Shared(t)
	c := srv.Client(t)
	q := redistest.Queue(t)
	return &fixture{c: c, r: New(c, "rm", q), queue: q, mid: id.New()}
}

// serves is what the tests' workers serve: the function their lane calls.
var serves = []string{"f\tsig"}

// lane is the lane of the fixture's batch.
func (f *fixture) lane() wire.Lane { return wire.Lane{Name: f.mid + ".1", Calls: "f\tsig"} }

// laneKey is the list of the fixture's batch.
func (f *fixture) laneKey() string { return keys.Lane("rm", f.queue, f.lane().Name) }

func (f *fixture) submit(t *testing.T, wid string, n int) []string {
	t.Helper()
	tasks := make([]wire.Task, n)
	ids := make([]string, n)
	for i := range tasks {
		ids[i] = id.TaskIn(f.mid, uint64(i+1), 1, 1, keys.DefaultPriority, keys.DefaultPriority)
		if wid != "" {
			ids[i] = id.Task(f.mid, uint64(i+1))
		}
		tasks[i] = wire.Task{ID: ids[i], Payload: []byte(fmt.Sprintf("payload %d", i))}
	}
	if _, _, err := submitOf(f.r.Submit(context.Background(), &broker.SubmitParams{Manager: f.mid, Worker: wid, Lane: f.lane(), Tasks: tasks, TTL: time.Minute, Expect: wire.Expect{}})); err != nil {
		t.Fatal(err)
	}
	return ids
}

// The scripts build key names from the base the same way as package keys.
func TestScriptsUseKeysLayout(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	ids := f.submit(t, "", 2)
	tasks := keys.Tasks("rm", f.queue, f.mid)
	if got := f.c.HKeys(ctx, tasks).Val(); !slices.Contains(got, ids[0]) || !slices.Contains(got, ids[1]) || !slices.Contains(got, "_") {
		t.Errorf("task set %s holds %v, want both ids and the marker", tasks, got)
	}
	if got := f.c.LRange(ctx, f.laneKey(), 0, -1).Val(); !slices.Equal(got, ids) {
		t.Errorf("public list holds %v, want %v", got, ids)
	}
	taken, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 1, Room: 1, Lease: time.Minute, Serves: serves}))
	if err != nil || len(taken) != 1 || string(taken[0].Payload) != "payload 0" {
		t.Fatalf("take: %v, %v", taken, err)
	}
	if !f.c.SIsMember(ctx, keys.Held("rm", f.queue, "w1"), ids[0]).Val() {
		t.Errorf("take did not record %s in %s", ids[0], keys.Held("rm", f.queue, "w1"))
	}
	if _, err := f.r.Finish(ctx, &broker.FinishParams{Worker: "w1", Done: []wire.Done{{ID: ids[0], Result: []byte("r0")}}}); err != nil {
		t.Fatal(err)
	}
	if got, err := f.r.ReadResults(ctx, &broker.ReadResultsParams{Manager: f.mid, Limit: 10}); err != nil || !slices.Equal(got, []string{"r0"}) {
		t.Errorf("results %q (%v), want [r0]", got, err)
	}
	if f.c.HExists(ctx, tasks, ids[0]).Val() {
		t.Error("finish left the task in the task set")
	}
	// Every key the scripts created is one package keys names.
	all := f.c.Keys(ctx, keys.Base("rm", f.queue)+"*").Val()
	named := []string{tasks, keys.Results("rm", f.queue, f.mid),
		f.laneKey(), keys.LaneElements("rm", f.queue, f.lane().Name), keys.LaneTimes("rm", f.queue, f.lane().Name), keys.Idle("rm", f.queue), keys.Held("rm", f.queue, "w1"), keys.Bell("rm", f.queue, "w1"),
		keys.Workers("rm", f.queue), keys.Ring("rm", f.queue, keys.DefaultPriority), keys.Lanes("rm", f.queue, f.mid), keys.Widest("rm", f.queue, f.mid)}
	for _, k := range all {
		if !slices.Contains(named, k) {
			t.Errorf("scripts created %s, which package keys does not name", k)
		}
	}
}

// Reading results does not consume them; the next read trims what was read,
// once, however often it is repeated.
func TestReadResultsTrimsOnce(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	ids := f.submit(t, "", 4)
	if _, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w", Max: 4, Room: 4, Lease: time.Minute, Serves: serves})); err != nil {
		t.Fatal(err)
	}
	var done []wire.Done
	for i, id := range ids {
		done = append(done, wire.Done{ID: id, Result: []byte(fmt.Sprint("r", i))})
	}
	if n, err := delivered(f.r.Finish(ctx, &broker.FinishParams{Worker: "w", Done: done})); err != nil || n != 4 {
		t.Fatalf("finish: %d, %v", n, err)
	}
	first, _ := f.r.ReadResults(ctx, &broker.ReadResultsParams{Manager: f.mid, Limit: 2})
	again, _ := f.r.ReadResults(ctx, &broker.ReadResultsParams{Manager: f.mid, Limit: 2})
	if !slices.Equal(first, []string{"r0", "r1"}) || !slices.Equal(again, first) {
		t.Fatalf("reads %q then %q, want [r0 r1] twice", first, again)
	}
	// Trimming the two read, twice over (a retried call), trims two.
	for range 2 {
		rest, _ := f.r.ReadResults(ctx, &broker.ReadResultsParams{Manager: f.mid, Handled: 2, Mark: broker.Mark(first[1]), Limit: 10})
		if !slices.Equal(rest, []string{"r2", "r3"}) {
			t.Fatalf("after trimming 2: %q, want [r2 r3]", rest)
		}
	}
}

// finishFirst has worker "w" take the first n tasks queued and finish
// them through r with results "r0", "r1", ...
func (f *fixture) finishFirst(t *testing.T, r *Broker, n int) {
	t.Helper()
	ctx := context.Background()
	taken, _, err := takeOf(r.Take(ctx, &broker.TakeParams{Worker: "w", Max: n, Room: n, Lease: time.Minute, Serves: serves}))
	if err != nil || len(taken) != n {
		t.Fatalf("take: %d, %v; want %d", len(taken), err, n)
	}
	var done []wire.Done
	for i, tk := range taken {
		done = append(done, wire.Done{ID: tk.ID, Result: []byte(fmt.Sprint("r", i))})
	}
	if got, err := delivered(r.Finish(ctx, &broker.FinishParams{Worker: "w", Done: done})); err != nil || got != n {
		t.Fatalf("finish: %d, %v", got, err)
	}
}

// A durable batch's reads move what they trim onto its kept list, once
// however often the trim is retried; Renew gives the kept list the task
// set's life and Drop deletes it. A manager's reads keep nothing.
func TestKeepingResultsKeepsWhatItTrims(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	f.mid = id.Durable("nightly")
	r := f.r.KeepingResults()
	f.submit(t, "", 4)
	f.finishFirst(t, r, 4)
	first, _ := r.ReadResults(ctx, &broker.ReadResultsParams{Manager: f.mid, Limit: 3})
	for range 2 {
		if rest, err := r.ReadResults(ctx, &broker.ReadResultsParams{Manager: f.mid, Handled: 3, Mark: broker.Mark(first[2]), Limit: 10}); err != nil || !slices.Equal(rest, []string{"r3"}) {
			t.Fatalf("after trimming 3: %q, %v; want [r3]", rest, err)
		}
	}
	kept := keys.Kept("rm", f.queue, f.mid)
	if got := f.c.LRange(ctx, kept, 0, -1).Val(); !slices.Equal(got, []string{"r0", "r1", "r2"}) {
		t.Fatalf("kept %q, want [r0 r1 r2]", got)
	}
	if err := r.Renew(ctx, &broker.RenewParams{Manager: f.mid, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if ttl := f.c.PTTL(ctx, kept).Val(); ttl < 59*time.Minute {
		t.Fatalf("kept list lives %v after Renew for an hour", ttl)
	}
	if err := r.Drop(ctx, &broker.ManagerParams{Manager: f.mid}); err != nil {
		t.Fatal(err)
	}
	if n := f.c.Exists(ctx, kept).Val(); n != 0 {
		t.Fatal("kept list outlives Drop")
	}

	// A manager's reads trim and keep nothing.
	f.mid = id.New()
	f.submit(t, "", 1)
	f.finishFirst(t, f.r, 1)
	if _, err := f.r.ReadResults(ctx, &broker.ReadResultsParams{Manager: f.mid, Handled: 1, Mark: broker.Mark("r0"), Limit: 10}); err != nil {
		t.Fatal(err)
	}
	if n := f.c.Exists(ctx, keys.Kept("rm", f.queue, f.mid), keys.Results("rm", f.queue, f.mid)).Val(); n != 0 {
		t.Fatalf("%d of a manager's result and kept lists left after its trim, want 0", n)
	}
}

// One manager at a time holds a durable batch: a second is refused and told
// who holds it, the holder renews and releases its claim, a lapsed claim
// goes to whoever asks next, and a claim that does not decode is taken
// over. Each claim taken numbers itself one more than the last.
func TestClaimDurableBatch(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	owner := id.Durable("nightly")
	a := wire.Holder{Manager: id.New(), Host: "a", PID: 1, Since: 100}
	b := wire.Holder{Manager: id.New(), Host: "b", PID: 2, Since: 200}
	fences := map[string]string{} // host -> the claim it took
	token := int64(0)
	claim := func(h wire.Holder, lease time.Duration, wantOK bool, wantHolder wire.Holder) {
		t.Helper()
		got, err := f.r.Claim(ctx, &wire.Claim{Owner: owner, Name: "nightly", Holder: h, Lease: lease, TTL: time.Hour, Fence: fences[h.Host]})
		switch {
		case err != nil || got.Held != wantOK:
			t.Fatalf("%s claims: %+v, %v; want ok %v", h.Host, got, err, wantOK)
		case !got.Held && (got.Holder.Manager != wantHolder.Manager || got.Holder.Token != token):
			t.Fatalf("%s claims: %+v; want holder %+v with token %d", h.Host, got, wantHolder, token)
		case got.Held && lease > 0 && fences[h.Host] == "":
			if token++; got.Holder.Token != token || got.Holder.Manager != h.Manager {
				t.Fatalf("%s took the claim as %+v; want token %d", h.Host, got.Holder, token)
			}
			fences[h.Host] = got.Record
		case got.Held && lease == 0:
			delete(fences, h.Host)
		}
	}
	claim(a, time.Minute, true, a)
	claim(b, time.Minute, false, a)
	claim(a, time.Minute, true, a) // renewed
	claim(b, 0, false, a)          // b cannot release a's claim
	if f.c.Get(ctx, keys.Claim("rm", f.queue, owner)).Val() != fences["a"] {
		t.Fatal("b's release released a's claim")
	}
	claim(a, 0, true, a) // released
	claim(b, 50*time.Millisecond, true, b)
	redistest.Eventually(t, "b's claim lapses", func() bool {
		return f.c.Exists(ctx, keys.Claim("rm", f.queue, owner)).Val() == 0
	})
	claim(a, time.Minute, true, a)
	f.c.Set(ctx, keys.Claim("rm", f.queue, owner), "\xff{not json", 0)
	delete(fences, "b")
	claim(b, time.Minute, true, b)
	// a's record, found gone, is taken over; another one is not.
	if got, err := f.r.Claim(ctx, &wire.Claim{Owner: owner, Holder: a, Lease: time.Minute, TTL: time.Hour, Steal: fences["a"]}); err != nil || got.Held {
		t.Fatalf("a stole with a record not b's: %+v, %v", got, err)
	}
	if got, err := f.r.Claim(ctx, &wire.Claim{Owner: owner, Holder: a, Lease: time.Minute, TTL: time.Hour, Steal: fences["b"]}); err != nil || !got.Held || got.Holder.Manager != a.Manager || got.Holder.Token != token+1 {
		t.Fatalf("a took b's record over: %+v, %v; want a's claim, token %d", got, err, token+1)
	}
	// b, renewing or releasing the claim it took, is fenced off.
	for _, lease := range []time.Duration{time.Minute, 0} {
		_, err := f.r.Claim(ctx, &wire.Claim{Owner: owner, Holder: b, Lease: lease, TTL: time.Hour, Fence: fences["b"]})
		var fe *broker.FencedError
		if !errors.As(err, &fe) || fe.Holder.Manager != a.Manager || broker.Unreachable(err) || broker.Transient(err) {
			t.Fatalf("b renews (lease %v) the claim a took over: %v; want a *broker.FencedError naming a", lease, err)
		}
	}
}

// Taking over a durable batch finds every result delivered so far in the
// kept list, in order (those read and kept, then those not yet read), the
// tasks still outstanding, and the task set's count and epoch.
func TestResumeFindsResultsAndOutstandingTasks(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	f.mid = id.Durable("nightly")
	r := f.r.KeepingResults()
	ids := f.submit(t, "", 5)
	f.finishFirst(t, r, 3)
	first, _ := r.ReadResults(ctx, &broker.ReadResultsParams{Manager: f.mid, Limit: 1})
	if _, err := r.ReadResults(ctx, &broker.ReadResultsParams{Manager: f.mid, Handled: 1, Mark: broker.Mark(first[0]), Limit: 10}); err != nil { // r0 kept; r1, r2 unread
		t.Fatal(err)
	}
	res, err := r.Resume(ctx, &broker.ResumeParams{Owner: f.mid, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	count, epoch, _ := submittedOf(r.Submitted(ctx, &broker.ManagerParams{Manager: f.mid}))
	slices.Sort(res.Outstanding)
	want := slices.Sorted(slices.Values(ids[3:]))
	if res.Count != count || res.Epoch != epoch || res.Kept != 3 || !slices.Equal(res.Outstanding, want) {
		t.Fatalf("resumed %+v; want count %d, epoch %q, 3 kept, outstanding %q", res, count, epoch, want)
	}
	if kept, err := r.Kept(ctx, &broker.KeptParams{Owner: f.mid, From: 1, N: 10}); err != nil || !slices.Equal(kept, []string{"r1", "r2"}) {
		t.Fatalf("kept from 1: %q, %v; want [r1 r2]", kept, err)
	}
	if n := f.c.LLen(ctx, keys.Results("rm", f.queue, f.mid)).Val(); n != 0 {
		t.Fatalf("%d results left unread after the resume, want 0: they are kept", n)
	}
	// A durable batch Redis knows nothing of: nothing found.
	if res, err := r.Resume(ctx, &broker.ResumeParams{Owner: id.Durable("other"), TTL: time.Hour}); err != nil || res.Count != 0 || res.Kept != 0 || len(res.Outstanding) != 0 {
		t.Fatalf("an unknown batch resumed as %+v, %v", res, err)
	}
}

func TestTakeReturnsPayloadsInOrderPrivateFirst(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	pub := f.submit(t, "", 3)
	f.mid = id.New()
	priv := f.submit(t, "w1", 2)
	taken, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 4, Room: 4, Lease: time.Minute, Serves: serves}))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tk := range taken {
		got = append(got, tk.ID)
		if tk.Attempt != 0 || len(tk.Payload) == 0 {
			t.Errorf("taken %+v", tk)
		}
	}
	if want := []string{priv[0], priv[1], pub[0], pub[1]}; !slices.Equal(got, want) {
		t.Fatalf("took %v, want %v", got, want)
	}
	// Another worker cannot see w1's private tasks, only the public one left.
	taken, _, _ = takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w2", Max: 10, Room: 10, Lease: time.Minute, Serves: serves}))
	if len(taken) != 1 || taken[0].ID != pub[2] {
		t.Fatalf("w2 took %+v, want just %s", taken, pub[2])
	}
}

// A finish takes its tasks out of the worker's held set whichever list
// they came from, in one call with both kinds or with one only: the held
// set keeps a private task as "!<id>", which the finish looks for only
// when the plain ids did not all go.
func TestFinishEmptiesHeldSet(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	held := keys.Held("rm", f.queue, "w1")
	pub := f.submit(t, "", 3)
	f.mid = id.New()
	priv := f.submit(t, "w1", 3)
	if taken, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 6, Room: 6, Lease: time.Minute, Serves: serves})); err != nil || len(taken) != 6 {
		t.Fatalf("took %d tasks (%v), want 6", len(taken), err)
	}
	for _, c := range []struct {
		name  string
		ids   []string
		after int64
	}{
		{"public only", pub[:1], 5},
		{"private only", priv[:1], 4},
		{"both, and one twice", []string{pub[1], priv[1], pub[1]}, 2},
		{"both", []string{priv[2], pub[2]}, 0},
	} {
		var done []wire.Done
		for _, tid := range c.ids {
			done = append(done, wire.Done{ID: tid, Result: []byte("r " + tid)})
		}
		if _, err := f.r.Finish(ctx, &broker.FinishParams{Worker: "w1", Done: done}); err != nil {
			t.Fatal(err)
		}
		if n := f.c.SCard(ctx, held).Val(); n != c.after {
			t.Fatalf("after finishing %s: %d held (%v), want %d", c.name, n, f.c.SMembers(ctx, held).Val(), c.after)
		}
	}
}

// The first result of a task is delivered; a second one, from a duplicate or a
// zombie, is discarded.
func TestFinishDeliversOnce(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	ids := f.submit(t, "", 1)
	if _, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 1, Room: 1, Lease: time.Minute, Serves: serves})); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{1, 0} {
		n, err := delivered(f.r.Finish(ctx, &broker.FinishParams{Worker: "w1", Done: []wire.Done{{ID: ids[0], Result: []byte(fmt.Sprint("r", i))}}}))
		if err != nil || n != want {
			t.Fatalf("finish #%d delivered %d (%v), want %d", i+1, n, err, want)
		}
	}
	if got, _ := f.r.ReadResults(ctx, &broker.ReadResultsParams{Manager: f.mid, Limit: 10}); !slices.Equal(got, []string{"r0"}) {
		t.Fatalf("results %q, want just the first", got)
	}
	if f.c.SCard(ctx, keys.Held("rm", f.queue, "w1")).Val() != 0 {
		t.Fatal("held set not emptied")
	}
}

// Take drops tasks whose manager no longer wants them, and their payloads.
func TestTakeDropsWithdrawn(t *testing.T) {
	// A take of a few tasks and of many (one pop of 40 ids, as a worker
	// with a deep prefetch makes): only the wanted are returned, and only
	// they stay held.
	for _, n := range []int{4, 40} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			f := setup(t)
			ctx := context.Background()
			ids := f.submit(t, "", n)
			if err := f.r.Cancel(ctx, &broker.CancelParams{Manager: f.mid, Tasks: ids[:n-1]}); err != nil {
				t.Fatal(err)
			}
			taken, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: n, Room: n, Lease: time.Minute, Serves: serves}))
			if err != nil || len(taken) != 1 || taken[0].ID != ids[n-1] || len(taken[0].Payload) == 0 {
				t.Fatalf("took %+v (%v), want only %s, with its payload", taken, err, ids[n-1])
			}
			if left := f.c.LLen(ctx, f.laneKey()).Val(); left != 0 {
				t.Fatalf("public list holds %d ids", left)
			}
			if held := f.c.SMembers(ctx, keys.Held("rm", f.queue, "w1")).Val(); !slices.Equal(held, []string{ids[n-1]}) {
				t.Fatalf("held %v, want only %s", held, ids[n-1])
			}
		})
	}
}

// An empty take registers the worker idle in the same step, and the next
// submit rings its bell.
func TestIdleWorkerIsRung(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	if taken, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 1, Room: 1, Lease: time.Minute, Serves: serves})); err != nil || len(taken) != 0 {
		t.Fatalf("take from empty: %v, %v", taken, err)
	}
	if !f.c.SIsMember(ctx, keys.Idle("rm", f.queue), "w1").Val() {
		t.Fatal("empty take did not register the worker idle")
	}
	rang := make(chan bool, 1)
	go func() {
		ok, _ := f.r.WaitBell(ctx, &broker.WaitBellParams{Worker: "w1", Timeout: 10 * time.Second})
		rang <- ok
	}()
	f.submit(t, "", 1)
	if !<-rang {
		t.Fatal("the bell did not ring")
	}
	if f.c.SIsMember(ctx, keys.Idle("rm", f.queue), "w1").Val() {
		t.Fatal("a rung worker is still in the idle set")
	}
	// A take stopped by its n leaves the worker busy; one that empties the
	// queue says so and registers it idle in the same step.
	f.submit(t, "", 2) // with the one the bell rang for: three queued
	taken, end, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 2, Room: 2, Lease: time.Minute, Serves: serves}))
	if err != nil || len(taken) != 2 || end.Drained || f.c.SIsMember(ctx, keys.Idle("rm", f.queue), "w1").Val() {
		t.Fatalf("take of 2 of 3: %d taken, drained %v, %v; want 2, not drained, not idle", len(taken), end.Drained, err)
	}
	taken, end, err = takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 2, Room: 2, Lease: time.Minute, Serves: serves}))
	drained := end.Drained
	if err != nil || len(taken) != 1 || !drained || !f.c.SIsMember(ctx, keys.Idle("rm", f.queue), "w1").Val() {
		t.Fatalf("take of the last one: %d taken, drained %v, %v; want 1, drained and idle", len(taken), drained, err)
	}
}

// WaitTake brings the tasks whose submit rang the bell with the wake-up; a
// stop ring ends its wait and makes it, and later takes, take nothing.
func TestWaitTakeBringsTasks(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	if taken, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 1, Room: 1, Lease: time.Minute, Serves: serves})); err != nil || len(taken) != 0 {
		t.Fatalf("take from empty: %v, %v", taken, err)
	}
	type reply struct {
		taken []wire.Taken
		err   error
	}
	got := make(chan reply, 1)
	go func() {
		taken, _, err := takeOf(f.r.WaitTake(ctx, &broker.TakeParams{Worker: "w1", Max: 4, Room: 4, Lease: time.Minute, Wait: 2 * time.Second, Serves: serves}))
		got <- reply{taken, err}
	}()
	ids := f.submit(t, "", 3)
	r := <-got
	if r.err != nil || len(r.taken) != 3 || r.taken[0].ID != ids[0] {
		t.Fatalf("WaitTake after a submit: %+v, %v; want the 3 tasks %v", r.taken, r.err, ids)
	}
	if n := f.c.SCard(ctx, keys.Held("rm", f.queue, "w1")).Val(); n != 3 {
		t.Fatalf("%d tasks held, want 3", n)
	}

	if taken, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 1, Room: 1, Lease: time.Minute, Serves: serves})); err != nil || len(taken) != 0 {
		t.Fatalf("take from empty: %v, %v", taken, err)
	}
	go func() {
		taken, _, err := takeOf(f.r.WaitTake(ctx, &broker.TakeParams{Worker: "w1", Max: 4, Room: 4, Lease: time.Minute, Wait: 10 * time.Second, Serves: serves}))
		got <- reply{taken, err}
	}()
	redistest.Eventually(t, "WaitTake blocked", func() bool {
		return strings.Contains(f.c.ClientList(ctx).Val(), "cmd=blpop")
	})
	if err := f.r.RingStop(ctx, &broker.RingStopParams{Worker: "w1"}); err != nil {
		t.Fatal(err)
	}
	f.submit(t, "", 1) // a task is there, but the worker is stopping
	if r := <-got; r.err != nil || len(r.taken) != 0 {
		t.Fatalf("WaitTake ended by a stop ring: %+v, %v; want nothing taken", r.taken, r.err)
	}
	if taken, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 4, Room: 4, Lease: time.Minute, Serves: serves})); err != nil || len(taken) != 0 {
		t.Fatalf("take after a stop ring: %+v, %v; want nothing", taken, err)
	}
	if n := f.c.LLen(ctx, f.laneKey()).Val(); n != 1 {
		t.Fatalf("public list holds %d ids, want the 1 left for other workers", n)
	}
}

// ReadThenWait reads what is there, and else waits behind the read in the
// same round trip; the read trims what was handled, the wait removes nothing.
func TestReadThenWait(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	l := keys.Results("rm", f.queue, f.mid)
	f.c.RPush(ctx, l, "a", "b")
	entries, fromWait, err := readThenWaitOf(f.r.ReadThenWait(ctx, &broker.ReadResultsParams{Manager: f.mid, Limit: 10, Wait: time.Second}))
	if err != nil || fromWait || !slices.Equal(entries, []string{"a", "b"}) {
		t.Fatalf("with entries there: %v, from the wait %v, %v; want a and b from the read", entries, fromWait, err)
	}
	type reply struct {
		entries  []string
		fromWait bool
		err      error
	}
	got := make(chan reply, 1)
	go func() {
		entries, fromWait, err := readThenWaitOf(f.r.ReadThenWait(ctx, &broker.ReadResultsParams{Manager: f.mid, Handled: 2, Mark: broker.Mark("b"), Limit: 10, Wait: 5 * time.Second}))
		got <- reply{entries, fromWait, err}
	}()
	redistest.Eventually(t, "the handled entries trimmed", func() bool { return f.c.LLen(ctx, l).Val() == 0 })
	f.c.RPush(ctx, l, "c")
	r := <-got
	if r.err != nil || !r.fromWait || !slices.Equal(r.entries, []string{"c"}) {
		t.Fatalf("after the trim: %v, from the wait %v, %v; want c from the wait", r.entries, r.fromWait, r.err)
	}
	if n := f.c.LLen(ctx, l).Val(); n != 1 {
		t.Fatalf("the wait removed its entry: %d left, want 1", n)
	}
	entries, fromWait, err = readThenWaitOf(f.r.ReadThenWait(ctx, &broker.ReadResultsParams{Manager: f.mid, Handled: 1, Mark: broker.Mark("c"), Limit: 10, Wait: time.Second}))
	if err != nil || !fromWait || len(entries) != 0 || f.c.LLen(ctx, l).Val() != 0 {
		t.Fatalf("nothing more: %v, from the wait %v, %v; want nothing after the wait's timeout, c trimmed", entries, fromWait, err)
	}
}

// Scripts run by SHA and are reloaded after SCRIPT FLUSH (NOSCRIPT).
func TestScriptsSurviveScriptFlush(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	r := New(c, "rm", "flush")
	ctx := context.Background()
	mid := id.New()
	lane := wire.Lane{Name: mid + ".1", Calls: "f\tsig"}
	if _, _, err := submitOf(r.Submit(ctx, &broker.SubmitParams{Manager: mid, Lane: lane, Tasks: []wire.Task{{ID: id.TaskIn(mid, 1, 1, 1, 3, 3), Payload: []byte("p")}}, TTL: time.Minute, Expect: wire.Expect{}})); err != nil {
		t.Fatal(err)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	taken, _, err := takeOf(r.Take(ctx, &broker.TakeParams{Worker: "w", Max: 1, Room: 1, Lease: time.Minute, Serves: serves}))
	if err != nil || len(taken) != 1 {
		t.Fatalf("take after SCRIPT FLUSH: %v, %v", taken, err)
	}
	// The trim goes in a pipeline before a plain LRANGE: after a flush the
	// LRANGE saw the list untrimmed, and the read is made again.
	results := keys.Results("rm", "flush", mid)
	for _, tc := range []struct {
		name string
		read func() ([]string, error)
	}{
		{"ReadResults", func() ([]string, error) {
			return r.ReadResults(ctx, &broker.ReadResultsParams{Manager: mid, Handled: 1, Mark: broker.Mark("handled"), Limit: 10})
		}},
		{"ReadThenWait", func() ([]string, error) {
			got, _, err := readThenWaitOf(r.ReadThenWait(ctx, &broker.ReadResultsParams{Manager: mid, Handled: 1, Mark: broker.Mark("handled"), Limit: 10, Wait: time.Second}))
			return got, err
		}},
	} {
		c.Del(ctx, results)
		c.RPush(ctx, results, "handled", "next")
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if got, err := tc.read(); err != nil || !slices.Equal(got, []string{"next"}) {
			t.Fatalf("%s after SCRIPT FLUSH: %q (%v), want [next]", tc.name, got, err)
		}
	}
}

func TestLiveWorkers(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	if _, err := f.r.Heartbeat(ctx, &broker.HeartbeatParams{Worker: "alive", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	// A lease that ended in the past, by the Redis clock.
	if _, err := f.r.Heartbeat(ctx, &broker.HeartbeatParams{Worker: "dead", Lease: -time.Second}); err != nil {
		t.Fatal(err)
	}
	live, err := f.r.LiveWorkers(ctx)
	if err != nil || !slices.Equal(live, []string{"alive"}) {
		t.Fatalf("live %v (%v), want [alive]", live, err)
	}
	if _, err := f.r.Retire(ctx, &broker.RetireParams{Worker: "alive"}); err != nil {
		t.Fatal(err)
	}
	if live, _ := f.r.LiveWorkers(ctx); len(live) != 0 {
		t.Fatalf("live after retiring: %v", live)
	}
}

func TestUnreachable(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	err := c.Do(context.Background(), "NOSUCHCOMMAND").Err()
	if err == nil || broker.Unreachable(err) {
		t.Fatalf("an error reply (%v) is not unreachability", err)
	}
	// A ping that ran out of time says why through one dial: nothing to
	// say of a server that is there, the refusal of one that is not.
	if dialled, err := dialCause(context.Background(), c); !dialled || err != nil {
		t.Fatalf("dialCause of a live server: %v", err)
	}
	gone := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer gone.Close()
	if _, err := dialCause(context.Background(), gone); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("dialCause of no server: %v, want the refused dial", err)
	}
	srv.Kill(t)
	err = c.Ping(context.Background()).Err()
	if !broker.Unreachable(err) {
		t.Fatalf("a killed server (%v) is unreachable", err)
	}
}

// A task skipped unrun (an empty result) only releases the hold, even if its
// manager wants it again by now: delivering the empty result would lose it.
func TestFinishSkippedReleasesOnly(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	ids := f.submit(t, "", 1)
	if _, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 1, Room: 1, Lease: time.Minute, Serves: serves})); err != nil {
		t.Fatal(err)
	}
	n, err := delivered(f.r.Finish(ctx, &broker.FinishParams{Worker: "w1", Done: []wire.Done{{ID: ids[0]}, {ID: ids[0], Result: []byte("real")}}}))
	if err != nil || n != 1 {
		t.Fatalf("finish delivered %d (%v), want the real result only", n, err)
	}
	if got, _ := f.r.ReadResults(ctx, &broker.ReadResultsParams{Manager: f.mid, Limit: 10}); !slices.Equal(got, []string{"real"}) {
		t.Fatalf("results %q, want just the real one", got)
	}
	ids = f.submit(t, "", 1) // the same id, wanted again
	if _, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 1, Room: 1, Lease: time.Minute, Serves: serves})); err != nil {
		t.Fatal(err)
	}
	if n, err := delivered(f.r.Finish(ctx, &broker.FinishParams{Worker: "w1", Done: []wire.Done{{ID: ids[0]}}})); err != nil || n != 0 {
		t.Fatalf("a skipped task delivered %d (%v)", n, err)
	}
	if !f.c.HExists(ctx, keys.Tasks("rm", f.queue, f.mid), ids[0]).Val() {
		t.Fatal("a skipped task left its manager's task set")
	}
	if f.c.SCard(ctx, keys.Held("rm", f.queue, "w1")).Val() != 0 {
		t.Fatal("held set not emptied")
	}
}

// Submit counts tasks into the task set and checks the count it expects;
// Submitted and Missing read what Redis has.
func TestSubmitCountsAndChecks(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	task := func(i int) []wire.Task {
		return []wire.Task{{ID: id.TaskIn(f.mid, uint64(i), 1, 1, 3, 3), Payload: []byte("p")}}
	}
	for i, c := range []struct {
		exp    wire.Expect
		count  int64
		intact bool
	}{
		{wire.Expect{Count: 0, Epoch: "e1", NewEpoch: ""}, 1, true},   // a new set takes the epoch
		{wire.Expect{Count: 1, Epoch: "e1", NewEpoch: ""}, 2, true},   //
		{wire.Expect{Count: 2, Epoch: "e2", NewEpoch: ""}, 3, false},  // another epoch: another history
		{wire.Expect{Count: 10, Epoch: "e1", NewEpoch: ""}, 4, false}, // fewer than expected
		{wire.Expect{Count: 4, Epoch: "e1", NewEpoch: "e3"}, 5, true}, // a recovery installs e3
		{wire.Expect{Count: 5, Epoch: "e1", NewEpoch: ""}, 6, false},  // e1 is gone
	} {
		count, intact, err := submitOf(f.r.Submit(ctx, &broker.SubmitParams{Manager: f.mid, Lane: f.lane(), Tasks: task(i + 1), TTL: time.Minute, Expect: c.exp}))
		if err != nil || count != c.count || intact != c.intact {
			t.Fatalf("submit %d expecting %+v: %d %v %v, want %d %v", i, c.exp, count, intact, err, c.count, c.intact)
		}
	}
	if n, e, err := submittedOf(f.r.Submitted(ctx, &broker.ManagerParams{Manager: f.mid})); n != 6 || e != "e3" || err != nil {
		t.Fatalf("Submitted: %d %q %v, want 6 e3", n, e, err)
	}
	if count, intact, err := submitOf(f.r.Submit(ctx, &broker.SubmitParams{Manager: f.mid, Lane: f.lane(), TTL: time.Minute, Expect: wire.Expect{Count: 6, Epoch: "e3", NewEpoch: "e4"}})); count != 6 || !intact || err != nil {
		t.Fatalf("a submit of no tasks: %d %v %v, want it to check and install e4", count, intact, err)
	}
	tid := func(i uint64) string { return id.TaskIn(f.mid, i, 1, 1, 3, 3) }
	f.c.HDel(ctx, keys.Tasks("rm", f.queue, f.mid), tid(2))
	missing, count, epoch, err := missingOf(f.r.Missing(ctx, &broker.MissingParams{Manager: f.mid, Tasks: []string{tid(1), tid(2), tid(9)}}))
	if err != nil || count != 6 || epoch != "e4" || !slices.Equal(missing, []string{tid(2), tid(9)}) {
		t.Fatalf("Missing: %v %d %q %v, want 2 ids, the count 6 and e4", missing, count, epoch, err)
	}
	f.c.Del(ctx, keys.Tasks("rm", f.queue, f.mid))
	if n, e, err := submittedOf(f.r.Submitted(ctx, &broker.ManagerParams{Manager: f.mid})); n != 0 || e != "" || err != nil {
		t.Fatalf("Submitted of a lost set: %d %q %v, want 0", n, e, err)
	}
}

// A refusal names its command: from the reply, or for a script, from the
// script's line; transient replies are not refusals.
func TestRefusalNamesCommand(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	if err := f.c.Do(ctx, "ACL", "SETUSER", "notime-"+f.queue, "on", ">pw", "~*", "+@all", "-time", "-blmove").Err(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: redistest.Shared(t).Addr(), Username: "notime-" + f.queue, Password: "pw"})
	defer c.Close()
	r := New(c, "rm", f.queue)
	_, err := r.Reap(ctx)
	var ce *failure.CommandError
	if !errors.As(err, &ce) || !errors.Is(err, failure.ErrPermission) || ce.Command != "TIME (in reap.lua)" {
		t.Fatalf("reap without TIME: %v (%+v)", err, ce)
	}
	_, err = r.WaitResults(ctx, &broker.WaitResultsParams{Manager: "m", Timeout: time.Second})
	if !errors.As(err, &ce) || ce.Command != "BLMOVE" {
		t.Fatalf("wait without BLMOVE: %v", err)
	}
	if broker.Transient(err) || broker.Unreachable(err) {
		t.Fatalf("a refusal (%v) taken for an outage: callers would retry it", err)
	}
	err = r.Probe(ctx)
	if !errors.As(err, &ce) || ce.Command != "TIME, BLMOVE" || !errors.Is(err, failure.ErrPermission) {
		t.Fatalf("probe: %v, want TIME and BLMOVE named", err)
	}
	if err := f.r.Probe(ctx); err != nil {
		t.Fatalf("probe as the default user: %v", err)
	}
	f.c.Set(ctx, keys.Held("rm", f.queue, "w"), "not a set", 0)
	_, err = f.r.Held(ctx, &broker.HeldParams{Worker: "w"})
	if !errors.As(err, &ce) || !errors.Is(err, failure.ErrRefused) || ce.Command != "SMEMBERS" {
		t.Fatalf("WRONGTYPE: %v", err)
	}
	for _, reply := range []replyError{"LOADING Redis is loading", "READONLY You can't write against a read only replica.", "MASTERDOWN Link with MASTER is down"} {
		if err := reply; !broker.Transient(err) || broker.Refused(wrap("x", nil, "X", err)) {
			t.Errorf("%q: want transient, not a refusal", reply)
		}
	}
}

// The probe tries every command the scripts run.
func TestProbeCoversScripts(t *testing.T) {
	// Also the calls through the prelude's guards, which run the command
	// they are given.
	call := regexp.MustCompile(`(?:redis\.call|redis\.pcall|guarded|unless_foreign)\('([A-Z]+)'`)
	files, _ := filepath.Glob("*.lua")
	for _, f := range files {
		src, _ := os.ReadFile(f)
		for _, m := range call.FindAllStringSubmatch(string(src), -1) {
			if !strings.Contains(source("probe.lua"), "try('"+m[1]+"'") {
				t.Errorf("%s runs %s, which probe.lua does not try", f, m[1])
			}
		}
	}
}

// What the prelude defines is not written again in a script: the Redis
// clock, the manager of a task id, ringing a bell, the bell's lifetime.
func TestScriptsUsePrelude(t *testing.T) {
	again := map[string]*regexp.Regexp{
		"now()":        regexp.MustCompile(`redis\.call\('TIME'\)`),
		"manager()":    regexp.MustCompile(`string\.match\(tid`),
		"ring()":       regexp.MustCompile(`':bell', '1'`),
		"BELL_TTL":     regexp.MustCompile(`60000`),
		"CHUNK":        regexp.MustCompile(`\b(499|500|999)\b`),
		"lost_entry()": regexp.MustCompile(`'(lost|purged) '`),
	}
	files, _ := filepath.Glob("*.lua")
	if len(files) < 15 {
		t.Fatalf("found %d scripts", len(files))
	}
	for _, f := range files {
		if f == "prelude.lua" || f == "probe.lua" {
			continue
		}
		src, _ := os.ReadFile(f)
		for name, re := range again {
			if re.Match(src) {
				t.Errorf("%s writes out what the prelude's %s does", f, name)
			}
		}
	}
	if !strings.HasPrefix(takeScript.lines[0], "-- prelude.lua") {
		t.Errorf("take.lua is loaded without the prelude: it starts %q", takeScript.lines[0])
	}
}

// replyError is an error reply as go-redis returns one.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// A worker Redis lost from its workers set (a FLUSHALL since its heartbeat)
// is registered again by its next take, so that if it dies holding what it
// took, the reap finds it.
func TestTakeRegistersLostWorker(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	f.submit(t, "", 2)
	workers := keys.Workers("rm", f.queue)
	if _, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 1, Room: 1, Lease: 50 * time.Millisecond, Serves: serves})); err != nil {
		t.Fatal(err)
	}
	if f.c.ZScore(ctx, workers, "w1").Err() != nil {
		t.Fatal("a take left its worker out of the workers set")
	}
	redistest.Eventually(t, "the lease lapses and the reap requeues", func() bool {
		r, err := f.r.Reap(ctx)
		return err == nil && r.Requeued == 1
	})
}

// The trim recognises the handled entry by all of it: an entry that only
// starts the same (a re-run of the same task and attempt, after Redis lost
// data) is not taken for it.
func TestReadResultsTrimsOnlyTheSameEntry(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	prefix := strings.Repeat("t", 100)
	results := keys.Results("rm", f.queue, f.mid)
	f.c.RPush(ctx, results, prefix+"-new run", "next")
	got, err := f.r.ReadResults(ctx, &broker.ReadResultsParams{Manager: f.mid, Handled: 1, Mark: broker.Mark(prefix + "-handled run"), Limit: 10})
	if err != nil || !slices.Equal(got, []string{prefix + "-new run", "next"}) {
		t.Fatalf("read %q (%v): an entry that only starts like the handled one was trimmed", got, err)
	}
	got, _ = f.r.ReadResults(ctx, &broker.ReadResultsParams{Manager: f.mid, Handled: 1, Mark: broker.Mark(prefix + "-new run"), Limit: 10})
	if !slices.Equal(got, []string{"next"}) {
		t.Fatalf("read %q, want the handled entry trimmed", got)
	}

	// Entries over 1 KiB are marked by their length and ends, the same in Go
	// and in the script: a re-run that differs at either end is kept, the
	// handled entry trimmed.
	body := strings.Repeat("v", 5000)
	handled, rerunHead, rerunTail := "task-1 attempt 1 took 1234ns"+body, "task-1 attempt 1 took 1235ns"+body, "task-1 attempt 1 took 1234ns"+body[1:]+"w"
	f.c.Del(ctx, results)
	f.c.RPush(ctx, results, rerunHead, rerunTail, handled, "after")
	for _, other := range []string{rerunHead, rerunTail} {
		got, _ = f.r.ReadResults(ctx, &broker.ReadResultsParams{Manager: f.mid, Handled: 1, Mark: broker.Mark(handled), Limit: 10})
		if len(got) == 0 || got[0] != other {
			t.Fatalf("a long re-run that differs from the handled entry at one end was trimmed")
		}
		f.c.LPop(ctx, results)
	}
	got, _ = f.r.ReadResults(ctx, &broker.ReadResultsParams{Manager: f.mid, Handled: 1, Mark: broker.Mark(handled), Limit: 10})
	if !slices.Equal(got, []string{"after"}) {
		t.Fatalf("read %d entries, want the long handled entry trimmed and %q left", len(got), "after")
	}
}

// Workers learn the queue's shard count from shard 0: with each heartbeat,
// and from a take as soon as it is above what the worker knows (the take
// says it once); a take of another shard never says it. Managers name
// shards first come, first served, per index.
func TestShardCountLearned(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	if beat, err := f.r.Heartbeat(ctx, &broker.HeartbeatParams{Worker: "w1", Lease: time.Minute}); err != nil || beat.Shards != 1 {
		t.Fatalf("heartbeat before any manager published: %+v, %v; want 1 shard", beat, err)
	}
	q := f.queue
	if got, err := f.r.AdoptShards(ctx, &broker.ShardsParams{Names: []string{q + "#1.7", q + "#2"}}); err != nil || !slices.Equal(got, []string{q + "#1.7", q + "#2"}) {
		t.Fatalf("first manager's names: %v, %v", got, err)
	}
	// A later manager of more shards takes the names there are, and adds
	// its own beyond them; one of fewer takes the first.
	if got, err := f.r.AdoptShards(ctx, &broker.ShardsParams{Names: []string{q + "#1", q + "#2.3", q + "#3"}}); err != nil || !slices.Equal(got, []string{q + "#1.7", q + "#2", q + "#3"}) {
		t.Fatalf("second manager's names: %v, %v", got, err)
	}
	if got, err := f.r.AdoptShards(ctx, &broker.ShardsParams{Names: []string{q + "#1"}}); err != nil || !slices.Equal(got, []string{q + "#1.7"}) {
		t.Fatalf("third manager's names: %v, %v", got, err)
	}
	// After a loss, a manager puts its names back; present ones stay once.
	f.c.Del(ctx, keys.ShardNames("rm", q))
	if got, err := f.r.AddShards(ctx, &broker.ShardsParams{Names: []string{q + "#1.7", q + "#2"}}); err != nil || len(got) != 2 {
		t.Fatalf("names put back: %v, %v", got, err)
	}
	if got, err := f.r.AddShards(ctx, &broker.ShardsParams{Names: []string{q + "#1.7", q + "#2", q + "#3"}}); err != nil || !slices.Equal(got, []string{q + "#1.7", q + "#2", q + "#3"}) {
		t.Fatalf("names added: %v, %v", got, err)
	}
	if beat, err := f.r.Heartbeat(ctx, &broker.HeartbeatParams{Worker: "w1", Lease: time.Minute}); err != nil || beat.Shards != 4 {
		t.Fatalf("heartbeat: %+v, %v; want 4 shards", beat, err)
	}
	ids := f.submit(t, "", 2)
	taken, end, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 1, Room: 1, Lease: time.Minute, Shards: 1, Serves: serves}))
	if err != nil || len(taken) != 1 || taken[0].ID != ids[0] || end.Shards != 4 {
		t.Fatalf("take knowing 1 shard: %v, %v, %+v; want the first task and 4 shards said", taken, err, end)
	}
	if taken, end, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 1, Room: 1, Lease: time.Minute, Shards: 4, Serves: serves})); err != nil || len(taken) != 1 || end.Shards != 0 {
		t.Fatalf("take knowing 4 shards: %v, %v, %+v; want the next task and the count unsaid", taken, err, end)
	}
	other := NewShard(f.c, "rm", q+"#2", 2)
	if _, end, err := takeOf(other.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 1, Room: 1, Lease: time.Minute, Shards: 1, Serves: serves})); err != nil || end.Shards != 0 || other.Shard() != 2 {
		t.Fatalf("take of shard 2: %v, %+v; want the count unsaid", err, end)
	}
	if n, err := f.c.Exists(ctx, keys.Workers("rm", q+"#2")).Result(); err != nil || n != 1 {
		t.Fatalf("shard 2's keys are not under %q#2: %v, %v", q, n, err)
	}
}

// A task lost once is no suspect (issue 59: the tasks of a worker that died
// holding several ran one at a time, each holding a whole worker): a
// worker that holds tasks takes it, with the tasks after it, in one take.
// Lost twice, it is one.
func TestLostOnceNotSuspect(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	ids := f.submit(t, "", 4)
	f.c.HSet(ctx, keys.Attempts("rm", f.queue, f.mid), ids[0], 1, ids[2], wire.SuspectAfter)
	taken, end, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 4, Room: 4, Lease: time.Minute, Holding: 3, Serves: serves}))
	if err != nil || len(taken) != 2 || taken[0].ID != ids[0] || taken[0].Attempt != 1 || taken[0].Suspect() || taken[1].ID != ids[1] || !end.Suspect {
		t.Fatalf("a take while holding tasks: %v, %+v, %v; want %s (lost once) and %s, and told the suspect %s waits", taken, end, err, ids[0], ids[1], ids[2])
	}
}

// A suspect (a task lost wire.SuspectAfter times) goes only to a worker that holds nothing:
// one holding a task, in Redis's held set or by its own count on other
// shards, is told a suspect waits and takes nothing at or after it; once it
// has reported what it held, it gets the suspect, alone.
func TestSuspectOnlyToEmptyWorker(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	ids := f.submit(t, "", 3)
	taken, end, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 1, Room: 1, Lease: time.Minute, Serves: serves}))
	if err != nil || len(taken) != 1 || taken[0].ID != ids[0] || end.Suspect {
		t.Fatalf("first take: %v, %+v, %v", taken, end, err)
	}
	// ids[1] is now a suspect.
	f.c.HSet(ctx, keys.Attempts("rm", f.queue, f.mid), ids[1], wire.SuspectAfter)
	taken, end, err = takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 4, Room: 4, Lease: time.Minute, Holding: 1, Serves: serves}))
	if err != nil || len(taken) != 0 || !end.Suspect || end.Drained {
		t.Fatalf("a take while holding a task: %v, %+v, %v; want nothing, and told a suspect waits", taken, end, err)
	}
	// Held nothing here, but a task on another shard: still not.
	taken, end, err = takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w2", Max: 4, Room: 4, Lease: time.Minute, Holding: 1, Serves: serves}))
	if err != nil || len(taken) != 0 || !end.Suspect {
		t.Fatalf("a take while holding a task elsewhere: %v, %+v, %v; want nothing, and told a suspect waits", taken, end, err)
	}
	if got := f.c.LRange(ctx, f.laneKey(), 0, -1).Val(); !slices.Equal(got, ids[1:]) {
		t.Fatalf("the public list holds %v, want %v in order", got, ids[1:])
	}
	if _, err := f.r.Finish(ctx, &broker.FinishParams{Worker: "w1", Done: []wire.Done{{ID: ids[0], Result: []byte("r")}}}); err != nil {
		t.Fatal(err)
	}
	taken, end, err = takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 4, Room: 4, Lease: time.Minute, Serves: serves}))
	if err != nil || len(taken) != 1 || taken[0].ID != ids[1] || !taken[0].Suspect() || end.Suspect || end.Drained {
		t.Fatalf("a take holding nothing: %v, %+v, %v; want the suspect alone", taken, end, err)
	}
	taken, end, err = takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w2", Max: 4, Room: 4, Lease: time.Minute, Serves: serves}))
	if err != nil || len(taken) != 1 || taken[0].ID != ids[2] || !end.Drained {
		t.Fatalf("the other worker's take: %v, %+v, %v; want the last task", taken, end, err)
	}
}

// A worker that holds nothing gets a suspect at the head of a lane before
// the tasks of the lanes ahead of it in the ring (issue 36: a take that went
// round in the ring's order took from those first and was refused the
// suspect, and each refusal left the suspect's lane at the back of the ring,
// so under a steady load no worker ever reached it holding nothing: 32
// suspects waited a minute in make chaos-cluster).
func TestSuspectNotStarvedBehindOtherLanes(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	other := f.submitLane(t, 1, keys.DefaultPriority, 50, "f\tsig")
	lost := f.submitLane(t, 2, keys.DefaultPriority, 3, "f\tsig")
	f.c.HSet(ctx, keys.Attempts("rm", f.queue, f.mid), lost[0], wire.SuspectAfter)
	// A busy worker goes round: it takes from the first lane and is told
	// a suspect waits; the suspect's lane ends at the back of the ring.
	taken, end, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 4, Room: 4, Lease: time.Minute, Holding: 1, Serves: serves}))
	if err != nil || len(taken) == 0 || taken[0].ID != other[0] || !end.Suspect {
		t.Fatalf("a busy worker's take: %v, %+v, %v; want the other lane's tasks and a suspect waiting", taken, end, err)
	}
	for range 3 {
		taken, end, err = takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w2", Max: 4, Room: 4, Lease: time.Minute, Serves: serves}))
		if err != nil || len(taken) != 1 || taken[0].ID != lost[0] || !taken[0].Suspect() || end.Suspect {
			t.Fatalf("an empty worker's take: %v, %+v, %v; want the suspect %s alone", taken, end, err, lost[0])
		}
		if _, err := f.r.Finish(ctx, &broker.FinishParams{Worker: "w2", Done: []wire.Done{{ID: lost[0], Result: []byte("r")}}}); err != nil {
			t.Fatal(err)
		}
		// The next one lost too: it comes first again.
		lost = lost[1:]
		if len(lost) == 0 {
			break
		}
		f.c.HSet(ctx, keys.Attempts("rm", f.queue, f.mid), lost[0], wire.SuspectAfter)
	}
	// With no suspect left, an empty worker takes in the ring's turns.
	taken, _, err = takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w2", Max: 2, Room: 2, Lease: time.Minute, Serves: serves}))
	if err != nil || len(taken) != 2 {
		t.Fatalf("an empty worker's take with no suspect: %v, %v; want 2 tasks", taken, err)
	}
}

// submitLane submits n tasks of lane number l (of priority p) calling calls.
func (f *fixture) submitLane(t *testing.T, l uint64, p, n int, calls string) []string {
	t.Helper()
	lane := wire.Lane{Name: f.mid + "." + strconv.FormatUint(l, 36), Calls: calls}
	tasks := make([]wire.Task, n)
	ids := make([]string, n)
	for i := range tasks {
		ids[i] = id.TaskIn(f.mid, l*1000+uint64(i), l, 1, p, keys.DefaultPriority)
		tasks[i] = wire.Task{ID: ids[i], Payload: []byte("p")}
	}
	if _, _, err := submitOf(f.r.Submit(context.Background(), &broker.SubmitParams{Manager: f.mid, Lane: lane, Tasks: tasks, TTL: time.Minute, Expect: wire.Expect{}})); err != nil {
		t.Fatal(err)
	}
	return ids
}

// A take shares itself between the lanes of a priority: each gives at most
// its share of the take, a small batch beside a large one is taken at once,
// and the large one's tasks fill the rest.
func TestTakeSharesLanes(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	big := f.submitLane(t, 1, keys.DefaultPriority, 100, "f\tsig")
	small := f.submitLane(t, 2, keys.DefaultPriority, 3, "f\tsig")
	taken, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 8, Room: 8, Lease: time.Minute, Serves: serves}))
	if err != nil || len(taken) != 8 {
		t.Fatalf("Take: %d tasks, %v; want 8", len(taken), err)
	}
	var fromBig, fromSmall int
	for _, tk := range taken {
		switch {
		case slices.Contains(big, tk.ID):
			fromBig++
		case slices.Contains(small, tk.ID):
			fromSmall++
		}
	}
	if fromSmall != 3 || fromBig != 5 {
		t.Fatalf("took %d of the big batch and %d of the small one; want 5 and all 3", fromBig, fromSmall)
	}
	// The small lane, now empty, leaves the ring at the next take.
	if _, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 2, Room: 2, Lease: time.Minute, Serves: serves})); err != nil {
		t.Fatal(err)
	}
	if got := f.c.LRange(ctx, keys.Ring("rm", f.queue, keys.DefaultPriority), 0, -1).Val(); !slices.Equal(got, []string{f.mid + ".1"}) {
		t.Fatalf("ring %q, want the big lane alone", got)
	}
	// A higher priority still goes first, whatever the lanes below.
	high := f.submitLane(t, 3, keys.MaxPriority, 2, "f\tsig")
	taken, _, err = takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w2", Max: 2, Room: 2, Lease: time.Minute, Serves: serves}))
	if err != nil || len(taken) != 2 || taken[0].ID != high[0] || taken[1].ID != high[1] {
		t.Fatalf("Take: %+v, %v; want the two tasks of priority %d", taken, err, keys.MaxPriority)
	}
}

// A worker takes only tasks whose function it registered with the same
// signature: it passes the others, leaves them queued, and goes idle; a
// worker that serves them takes them.
func TestTakePassesLanesItCannotRun(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	other := f.submitLane(t, 1, keys.DefaultPriority, 2, "f\tsig-v2")
	reduce := f.submitLane(t, 2, keys.DefaultPriority, 1, wire.Calls("f", "sig", "sum", "rsig"))
	taken, end, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 4, Room: 4, Lease: time.Minute, Serves: serves}))
	if err != nil || len(taken) != 0 || !end.Drained {
		t.Fatalf("Take by a worker of another signature: %v, %+v, %v; want nothing, and the worker idle", taken, end, err)
	}
	if n, _ := f.r.Depth(ctx); n != 3 {
		t.Fatalf("depth %d after the take, want the 3 tasks still queued", n)
	}
	taken, _, err = takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w2", Max: 4, Room: 4, Lease: time.Minute, Serves: []string{"f\tsig-v2"}}))
	if err != nil || len(taken) != 2 || taken[0].ID != other[0] {
		t.Fatalf("Take by a worker of the signature: %+v, %v; want the 2 tasks", taken, err)
	}
	taken, _, err = takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w3", Max: 4, Room: 4, Lease: time.Minute, Serves: []string{"f\tsig", "sum\trsig"}}))
	if err != nil || len(taken) != 1 || taken[0].ID != reduce[0] {
		t.Fatalf("Take by a worker of the function and the reducer: %+v, %v; want the MapReduce task", taken, err)
	}
}

// ScriptNames names every script of the package (the prelude is part of each),
// each by its SHA-1, with no list of them kept by hand.
func TestScriptNamesEveryScript(t *testing.T) {
	files, _ := filepath.Glob("*.lua")
	names := ScriptNames()
	if len(names) != len(files)-1 {
		t.Fatalf("ScriptNames has %d scripts; the package has %d besides the prelude", len(names), len(files)-1)
	}
	for sha, name := range names {
		if want := loadedHash(t, name); sha != want {
			t.Errorf("%s named by %s, want %s", name, sha, want)
		}
	}
}

// loadedHash returns the SHA-1 of script name as it is loaded: what it
// uses of the prelude, then the script.
func loadedHash(t *testing.T, name string) string {
	t.Helper()
	return redis.NewScript(preludeFor(source(name)) + source(name)).Hash()
}

// A script carries the prelude's definitions it names, and those they
// name, in the prelude's order; not those only its comments name.
func TestPreludeForTakesWhatAScriptNames(t *testing.T) {
	header, defs := splitPrelude(`-- the header

-- A value.
local LIMIT = 5
-- double is used by quadruple.
local function double(x)
  return 2 * x
end
local function quadruple(x)
  return double(double(x)) + LIMIT
end
-- unused names double in its comment only
local function unused()
  return 0
end
`)
	if header != "-- the header\n\n" || len(defs) != 4 {
		t.Fatalf("header %q, %d definitions", header, len(defs))
	}
	saved, savedHeader := preludeDefs, preludeHeader
	preludeDefs, preludeHeader = defs, header
	defer func() { preludeDefs, preludeHeader = saved, savedHeader }()
	got := preludeFor("return quadruple(1) -- not unused()")
	for _, want := range []string{"local LIMIT = 5", "local function double", "local function quadruple", "-- the header"} {
		if !strings.Contains(got, want) {
			t.Errorf("prelude for a script of quadruple lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "unused") || strings.Index(got, "double(x)") > strings.Index(got, "quadruple(x)") {
		t.Errorf("prelude for a script of quadruple:\n%s", got)
	}
	if got := preludeFor("return 1"); got != header {
		t.Errorf("prelude for a script that names nothing: %q", got)
	}
}

// Payloads over Inline go in with a plain HSET in the submit's MULTI and
// out with a plain HMGET after the take, never through Lua: each arrives
// whole, beside inline ones, in order; a SCRIPT FLUSH before a submit
// loses nothing; a task cancelled between the take and the HMGET is
// released unrun, not returned.
func TestLargePayloadsBesideScripts(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	sizes := []int{10, broker.Inline, broker.Inline + 1, 1 << 20, 3}
	tasks := make([]wire.Task, len(sizes))
	for i, n := range sizes {
		p := make([]byte, n)
		for j := range p {
			p[j] = byte('a' + (i+j)%26)
		}
		tasks[i] = wire.Task{ID: id.TaskIn(f.mid, uint64(i+1), 1, 1, keys.DefaultPriority, keys.DefaultPriority), Payload: p}
	}
	if err := f.c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	count, intact, err := submitOf(f.r.Submit(ctx, &broker.SubmitParams{Manager: f.mid, Lane: f.lane(), Tasks: tasks, TTL: time.Minute, Expect: wire.Expect{}}))
	if err != nil || count != int64(len(tasks)) || !intact {
		t.Fatalf("submit: count %d, intact %v, %v", count, intact, err)
	}
	if n := f.c.LLen(ctx, f.laneKey()).Val(); n != int64(len(tasks)) {
		t.Fatalf("lane holds %d ids, want %d (once each, after the retried MULTI)", n, len(tasks))
	}
	taken, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 2, Room: 2, Lease: time.Minute, Serves: serves}))
	if err != nil || len(taken) != 2 {
		t.Fatalf("take: %+v, %v", taken, err)
	}
	for i, tk := range taken {
		if tk.ID != tasks[i].ID || string(tk.Payload) != string(tasks[i].Payload) {
			t.Fatalf("took %s with %d bytes, want %s with %d", tk.ID, len(tk.Payload), tasks[i].ID, len(tasks[i].Payload))
		}
	}
	// The 1 MiB task is cancelled once the script has taken it, before its
	// payload is read.
	vals, err := takeScript.run(ctx, f.c, f.r.takeKeys("w1"), f.r.takeArgs(&broker.TakeParams{Worker: "w1", Max: 3, Room: 3, Lease: time.Minute, Shards: 1, Serves: serves})...).Slice()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.r.Cancel(ctx, &broker.CancelParams{Manager: f.mid, Tasks: []string{tasks[3].ID}}); err != nil {
		t.Fatal(err)
	}
	taken, _, err = takeOf(f.r.taken(ctx, "w1", vals))
	if err != nil || len(taken) != 2 {
		t.Fatalf("take with one cancelled: %+v, %v", taken, err)
	}
	for j, i := range []int{2, 4} {
		if taken[j].ID != tasks[i].ID || string(taken[j].Payload) != string(tasks[i].Payload) {
			t.Fatalf("took %s with %d bytes, want %s with %d", taken[j].ID, len(taken[j].Payload), tasks[i].ID, len(tasks[i].Payload))
		}
	}
	held := f.c.SMembers(ctx, keys.Held("rm", f.queue, "w1")).Val()
	if slices.Contains(held, tasks[3].ID) || len(held) != 4 {
		t.Fatalf("held %v: want the four returned, not the cancelled one", held)
	}
}

// A result over Inline is staged beside the result list with a plain HSET
// in the finish's MULTI: the list refers to it, the read brings it whole,
// the trim deletes it; a duplicate's, and one no longer wanted, are
// deleted by the finish; a durable owner's trim keeps it for Kept.
func TestLargeResultsStaged(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	ids := f.submit(t, "", 3)
	if _, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 3, Room: 3, Lease: time.Minute, Serves: serves})); err != nil {
		t.Fatal(err)
	}
	big := func(c byte) []byte { return []byte(strings.Repeat(string(c), broker.Inline+1)) }
	staged := keys.Staged("rm", f.queue, f.mid)
	if err := f.c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// ids[0] twice in one call, then again in another: delivered once.
	n, err := delivered(f.r.Finish(ctx, &broker.FinishParams{Worker: "w1", Done: []wire.Done{{ID: ids[0], Result: big('a')}, {ID: ids[0], Result: big('b')}, {ID: ids[1], Result: []byte("small")}}}))
	if err != nil || n != 2 {
		t.Fatalf("finish delivered %d (%v), want 2", n, err)
	}
	if n, err := delivered(f.r.Finish(ctx, &broker.FinishParams{Worker: "w1", Done: []wire.Done{{ID: ids[0], Result: big('c')}}})); err != nil || n != 0 {
		t.Fatalf("a second finish delivered %d (%v), want 0", n, err)
	}
	if n := f.c.HLen(ctx, staged).Val(); n != 1 {
		t.Fatalf("staged results hold %d fields, want the delivered one only", n)
	}
	if ttl := f.c.PTTL(ctx, staged).Val(); ttl <= 0 {
		t.Fatalf("staged results' TTL %v, want the task set's", ttl)
	}
	entries, err := f.r.ReadResults(ctx, &broker.ReadResultsParams{Manager: f.mid, Limit: 10})
	// The small result goes first: staged ones are sent in calls of their own.
	if err != nil || len(entries) != 2 || !strings.HasPrefix(entries[1], wire.StagedPrefix+ids[0]+" w1 ") || entries[0] != "small" {
		t.Fatalf("result list %q (%v)", entries, err)
	}
	read, err := f.r.Unstaged(ctx, &broker.EntriesParams{Manager: f.mid, Entries: entries})
	if err != nil || read[1] != string(big('a')) || read[0] != "small" || !strings.HasPrefix(entries[1], wire.StagedPrefix) {
		t.Fatalf("unstaged: %d and %q bytes (%v); entries changed: %v", len(read[1]), read[0], err, entries[1][:20])
	}
	if _, err := f.r.ReadResults(ctx, &broker.ReadResultsParams{Manager: f.mid, Handled: 2, Mark: broker.Mark(entries[1]), Limit: 10}); err != nil {
		t.Fatal(err)
	}
	if n := f.c.Exists(ctx, staged).Val(); n != 0 {
		t.Fatal("the trim left the staged result")
	}
	// Gone before the read (Redis lost it): the entry stays, for the
	// manager to submit the task again.
	if n, err := delivered(f.r.Finish(ctx, &broker.FinishParams{Worker: "w1", Done: []wire.Done{{ID: ids[2], Result: big('d')}}})); err != nil || n != 1 {
		t.Fatalf("finish: %d, %v", n, err)
	}
	f.c.Del(ctx, staged)
	entries, _ = f.r.ReadResults(ctx, &broker.ReadResultsParams{Manager: f.mid, Limit: 10})
	read, err = f.r.Unstaged(ctx, &broker.EntriesParams{Manager: f.mid, Entries: entries})
	if e, derr := wire.DecodeEntry(read[0], 0); err != nil || derr != nil || e.Kind != wire.EntryStaged || e.Task != ids[2] {
		t.Fatalf("a lost staged result reads %+v (%v, %v)", e, err, derr)
	}

	// A durable owner's trim keeps the entry, and its staged result.
	k := f.r.KeepingResults()
	f.mid = id.New()
	ids = f.submit(t, "", 1)
	if _, _, err := takeOf(k.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 1, Room: 1, Lease: time.Minute, Serves: serves})); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Finish(ctx, &broker.FinishParams{Worker: "w1", Done: []wire.Done{{ID: ids[0], Result: big('e')}}}); err != nil {
		t.Fatal(err)
	}
	entries, _ = k.ReadResults(ctx, &broker.ReadResultsParams{Manager: f.mid, Limit: 10})
	if _, err := k.ReadResults(ctx, &broker.ReadResultsParams{Manager: f.mid, Handled: 1, Mark: broker.Mark(entries[0]), Limit: 10}); err != nil {
		t.Fatal(err)
	}
	kept, err := k.Kept(ctx, &broker.KeptParams{Owner: f.mid, N: 10})
	if err != nil || len(kept) != 1 || kept[0] != string(big('e')) {
		t.Fatalf("kept %d entries (%v), want the staged result read back", len(kept), err)
	}
}

// A durable owner's kept staged results are read back in calls of at most
// CallBytes, as the collector reads them: three results of 700 KiB take
// three reads, not one of 2 MiB.
func TestKeptReadInBoundedCalls(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	k := f.r.KeepingResults()
	ids := f.submit(t, "", 3)
	if _, _, err := takeOf(k.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 3, Room: 3, Lease: time.Minute, Serves: serves})); err != nil {
		t.Fatal(err)
	}
	big := func(i int) []byte { return []byte(strings.Repeat(strconv.Itoa(i), 700<<10)) }
	var done []wire.Done
	for i, tid := range ids {
		done = append(done, wire.Done{ID: tid, Result: big(i)})
	}
	if _, err := k.Finish(ctx, &broker.FinishParams{Worker: "w1", Done: done}); err != nil {
		t.Fatal(err)
	}
	entries, _ := k.ReadResults(ctx, &broker.ReadResultsParams{Manager: f.mid, Limit: 10})
	if _, err := k.ReadResults(ctx, &broker.ReadResultsParams{Manager: f.mid, Handled: len(entries), Mark: broker.Mark(entries[len(entries)-1]), Limit: 10}); err != nil {
		t.Fatal(err)
	}
	var hmgets []int // the fields of each HMGET
	f.c.AddHook(fieldsOf("hmget", &hmgets))
	kept, err := k.Kept(ctx, &broker.KeptParams{Owner: f.mid, N: 10})
	if err != nil || len(kept) != 3 {
		t.Fatalf("kept %d entries (%v), want 3", len(kept), err)
	}
	want := map[string]bool{string(big(0)): true, string(big(1)): true, string(big(2)): true}
	for i, e := range kept {
		if !want[e] {
			t.Fatalf("kept entry %d: %d bytes, not one of the results, or read twice", i, len(e))
		}
		delete(want, e)
	}
	if !slices.Equal(hmgets, []int{1, 1, 1}) {
		t.Fatalf("Kept read the staged results with HMGETs of %v fields, want one each", hmgets)
	}
}

// fieldsOf is a hook that appends to n the number of fields of each call
// of command cmd (its arguments after the key), alone or pipelined.
func fieldsOf(cmd string, n *[]int) redis.Hook { return countHook{cmd: cmd, n: n} }

type countHook struct {
	cmd string
	n   *[]int
}

func (h countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, c redis.Cmder) error {
		h.note(c)
		return next(ctx, c)
	}
}

func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cs []redis.Cmder) error {
		for _, c := range cs {
			h.note(c)
		}
		return next(ctx, cs)
	}
}

func (h countHook) note(c redis.Cmder) {
	if c.Name() == h.cmd {
		*h.n = append(*h.n, len(c.Args())-2)
	}
}

// A batch's only task may come with its batch's record: the finish writes
// it into the history (counting its elements in the throughput, and
// forgetting the batch among its manager's published ones) if and only if
// it delivers the result, and only a record of the task's own manager.
func TestFinishWritesSoloRecordWithItsResult(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	ids := f.submit(t, "", 2)
	if taken, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 2, Room: 2, Lease: time.Minute, Serves: serves})); err != nil || len(taken) != 2 {
		t.Fatalf("take: %v, %v", taken, err)
	}
	batches := keys.Batches("rm", f.queue, f.mid)
	f.c.HSet(ctx, batches, f.mid+":1", "{}", f.mid+":9", "{}")
	rec := func(id, mid string, total int) string {
		return wire.EncodeRecord(wire.BatchRecord{ID: id, Manager: mid, Func: "f", Total: total, Done: total, Outcome: "done"})
	}
	done := []wire.Done{{ID: ids[0], Result: []byte("r0"), Record: rec(f.mid+":1", f.mid, 3), Keep: 10, AgeMs: 60000},
		{ID: ids[1], Result: []byte("r1"), Record: rec(f.mid+":2", "someone-else", 4), Keep: 10, AgeMs: 60000}}
	if n, err := delivered(f.r.Finish(ctx, &broker.FinishParams{Worker: "w1", Done: done})); err != nil || n != 2 {
		t.Fatalf("finish delivered %d (%v), want 2", n, err)
	}
	hist := keys.History("rm", f.queue)
	if got := f.c.HGet(ctx, hist, f.mid+":1").Val(); got != done[0].Record {
		t.Fatalf("history holds %q for the delivered task's batch, want its record", got)
	}
	if f.c.HExists(ctx, hist, f.mid+":2").Val() {
		t.Fatal("a record naming another manager was written")
	}
	if f.c.ZScore(ctx, keys.HistoryIndex("rm", f.queue), f.mid+":1").Val() == 0 {
		t.Fatal("the record is not in the history's index")
	}
	if got := f.c.HKeys(ctx, batches).Val(); !slices.Equal(got, []string{f.mid + ":9"}) {
		t.Fatalf("the manager's published batches are %v, want the recorded one forgotten", got)
	}
	var counted int64
	for _, k := range f.c.Keys(ctx, keys.Base("rm", f.queue)+"tp:*").Val() {
		n, _ := f.c.Get(ctx, k).Int64()
		counted += n
		if f.c.PTTL(ctx, k).Val() <= 0 {
			t.Fatalf("throughput counter %s does not expire", k)
		}
	}
	if counted != 3 {
		t.Fatalf("the throughput counted %d elements, want the recorded batch's 3", counted)
	}
	// Not delivered again: its record is not written either.
	again := []wire.Done{{ID: ids[0], Result: []byte("r0 again"), Record: rec(f.mid+":7", f.mid, 1), Keep: 10, AgeMs: 60000}}
	if n, err := delivered(f.r.Finish(ctx, &broker.FinishParams{Worker: "w1", Done: again})); err != nil || n != 0 {
		t.Fatalf("a second finish delivered %d (%v), want 0", n, err)
	}
	if f.c.HExists(ctx, hist, f.mid+":7").Val() {
		t.Fatal("the record of a result not delivered was written")
	}
}

// A submit keeps the length of the manager's widest payload (keys.Widest),
// which only grows; a take and a finish read and check the tasks of a
// manager of small payloads with one HMGET, and any other's one by one.
// Whichever path, a take gives exactly the wanted tasks with their payloads
// and a finish delivers exactly the wanted results, once.
func TestWidestPayloadChoosesTheCheck(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		size   int    // of each payload
		widest string // what to leave in keys.Widest before the take ("" as the submit left it, "-" none)
		want   string // keys.Widest after the submit
	}{
		{"small", 20, "", "20"},
		{"over NARROW", 2000, "", "2000"},
		{"unknown", 20, "-", "20"},
		{"not a length", 20, "x", "20"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t)
			tasks := make([]wire.Task, 6)
			ids := make([]string, len(tasks))
			for i := range tasks {
				ids[i] = id.TaskIn(f.mid, uint64(i+1), 1, 1, keys.DefaultPriority, keys.DefaultPriority)
				tasks[i] = wire.Task{ID: ids[i], Payload: []byte(fmt.Sprintf("%d%s", i, strings.Repeat("p", tc.size-1)))}
			}
			if _, _, err := submitOf(f.r.Submit(ctx, &broker.SubmitParams{Manager: f.mid, Lane: f.lane(), Tasks: tasks, TTL: time.Minute, Expect: wire.Expect{}})); err != nil {
				t.Fatal(err)
			}
			widest := keys.Widest("rm", f.queue, f.mid)
			if got := f.c.Get(ctx, widest).Val(); got != tc.want {
				t.Fatalf("widest after the submit %q, want %q", got, tc.want)
			}
			switch tc.widest {
			case "-":
				f.c.Del(ctx, widest)
			case "":
			default:
				f.c.Set(ctx, widest, tc.widest, time.Minute)
			}
			if err := f.r.Cancel(ctx, &broker.CancelParams{Manager: f.mid, Tasks: []string{ids[1], ids[4]}}); err != nil {
				t.Fatal(err)
			}
			taken, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 10, Room: 10, Lease: time.Minute, Serves: serves}))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, tk := range taken {
				got = append(got, tk.ID)
				if i := slices.Index(ids, tk.ID); i < 0 || !bytes.Equal(tk.Payload, tasks[i].Payload) {
					t.Errorf("task %s came with a payload of %d bytes, not its own", tk.ID, len(tk.Payload))
				}
			}
			if want := []string{ids[0], ids[2], ids[3], ids[5]}; !slices.Equal(got, want) {
				t.Fatalf("took %v, want %v", got, want)
			}
			// Results of every wanted task, one twice, and one of a cancelled task.
			done := []wire.Done{{ID: ids[0], Result: []byte("r0")}, {ID: ids[1], Result: []byte("r1")}, {ID: ids[2], Result: []byte("r2")},
				{ID: ids[0], Result: []byte("r0 again")}, {ID: ids[3], Result: []byte("r3")}, {ID: ids[5], Result: []byte("r5")}}
			n, err := delivered(f.r.Finish(ctx, &broker.FinishParams{Worker: "w1", Done: done}))
			if err != nil || n != 4 {
				t.Fatalf("finish delivered %d (%v), want 4", n, err)
			}
			if got, _ := f.r.ReadResults(ctx, &broker.ReadResultsParams{Manager: f.mid, Limit: 10}); !slices.Equal(got, []string{"r0", "r2", "r3", "r5"}) {
				t.Fatalf("results %q, want r0 r2 r3 r5", got)
			}
		})
	}
	// A wider submit raises it, a narrower one leaves it.
	f := setup(t)
	widest := keys.Widest("rm", f.queue, f.mid)
	for i, tc := range []struct{ size, want int }{{30, 30}, {10, 30}, {broker.Inline + 5, broker.Inline + 5}, {100, broker.Inline + 5}} {
		tid := id.TaskIn(f.mid, uint64(i+1), 1, 1, keys.DefaultPriority, keys.DefaultPriority)
		if _, _, err := submitOf(f.r.Submit(ctx, &broker.SubmitParams{Manager: f.mid, Lane: f.lane(), Tasks: []wire.Task{{ID: tid, Payload: bytes.Repeat([]byte("q"), tc.size)}}, TTL: time.Minute, Expect: wire.Expect{}})); err != nil {
			t.Fatal(err)
		}
		if got, _ := f.c.Get(ctx, widest).Int(); got != tc.want {
			t.Fatalf("after a payload of %d bytes, widest %d, want %d", tc.size, got, tc.want)
		}
	}
}

// prelude.lua's constants are Go's: INLINE is broker.Inline (a take and
// the worker, a finish and the collector agree on which payloads go beside
// the scripts), SUSPECT is wire.SuspectAfter (a worker runs alone what a
// take handed it alone), BUDGET is broker.ScriptBudget.
func TestPreludeAgrees(t *testing.T) {
	prelude := source("prelude.lua")
	for _, c := range []struct {
		lua, goName string
		goValue     int
	}{
		{"INLINE", "broker.Inline", broker.Inline},
		{"SUSPECT", "wire.SuspectAfter", wire.SuspectAfter},
		{"BUDGET", "broker.ScriptBudget", broker.ScriptBudget},
	} {
		m := regexp.MustCompile(`(?m)^local ` + c.lua + ` = (\d+)$`).FindStringSubmatch(prelude)
		if m == nil {
			t.Errorf("prelude.lua defines no %s", c.lua)
			continue
		}
		if n, _ := strconv.Atoi(m[1]); n != c.goValue {
			t.Errorf("prelude.lua's %s is %d, %s %d", c.lua, n, c.goName, c.goValue)
		}
	}
}

// delivered is what a Finish delivered, and its error.
func delivered(f *wire.Finished, err error) (int, error) {
	if f == nil {
		return 0, err
	}
	return f.Delivered, err
}

// At maxmemory, Redis refuses a finish's staged results (their HSETs) but
// not its small ones, which go in calls of their own: the small results
// are delivered, the staged one comes back in Full, with the OOM error,
// and nothing of it stays in Redis.
func TestFinishAtMaxmemory(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
	c := srv.Client(t)
	q := redistest.Queue(t)
	f := &fixture{c: c, r: New(c, "rm", q), queue: q, mid: id.New()}
	ctx := context.Background()
	ids := f.submit(t, "", 3)
	if _, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 3, Room: 3, Lease: time.Minute, Serves: serves})); err != nil {
		t.Fatal(err)
	}
	filler := strings.Repeat("x", 256<<10)
	for i := 0; ; i++ {
		err := c.Set(ctx, fmt.Sprint("filler:", i), filler, 0).Err()
		if broker.OutOfMemory(err) {
			break
		}
		if err != nil || i > 100 {
			t.Fatalf("filling Redis: %v after %d", err, i)
		}
	}
	big := []byte(strings.Repeat("b", 64<<10))
	got, err := f.r.Finish(ctx, &broker.FinishParams{Worker: "w1", Done: []wire.Done{{ID: ids[0], Result: []byte("r0")}, {ID: ids[1], Result: big}, {ID: ids[2], Result: []byte("r2")}}})
	if !broker.OutOfMemory(err) {
		t.Fatalf("finish at maxmemory: %v, want OOM", err)
	}
	if got.Sent != 2 || got.Delivered != 2 || len(got.Full) != 1 || got.Full[0].ID != ids[1] || len(got.Failed) != 0 {
		t.Fatalf("finish at maxmemory: sent %d, delivered %d, full %d, failed %d; want 2, 2, [%s], 0", got.Sent, got.Delivered, len(got.Full), len(got.Failed), ids[1])
	}
	if n := c.Exists(ctx, keys.Staged("rm", q, f.mid)).Val(); n != 0 {
		t.Fatal("a refused staged result stayed in Redis")
	}
	entries, err := f.r.ReadResults(ctx, &broker.ReadResultsParams{Manager: f.mid, Limit: 10})
	if err != nil || !slices.Equal(entries, []string{"r0", "r2"}) {
		t.Fatalf("result list %q (%v), want [r0 r2]", entries, err)
	}
	if held := c.SMembers(ctx, keys.Held("rm", q, "w1")).Val(); !slices.Equal(held, []string{ids[1]}) {
		t.Fatalf("held %v, want the refused task's alone", held)
	}
}

// A task given back after it ran (a stopping worker's grace ended) comes
// back with its attempt counted, as after a reap, so that the batch's
// budget bounds its runs; one given back unrun (an orphan of a lost reply,
// a task taken ahead) does not.
func TestGiveBackCountsARun(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	f.submit(t, "", 2)
	taken, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: 2, Room: 2, Lease: time.Minute, Serves: serves}))
	if err != nil || len(taken) != 2 {
		t.Fatalf("take: %d, %v", len(taken), err)
	}
	if n, err := f.r.GiveBack(ctx, &broker.GiveBackParams{Worker: "w1", Members: []string{taken[0].Member()}}); err != nil || n != 1 {
		t.Fatalf("give back unrun: %d, %v", n, err)
	}
	if n, err := f.r.GiveBack(ctx, &broker.GiveBackParams{Worker: "w1", Members: []string{taken[1].Member()}, Ran: true}); err != nil || n != 1 {
		t.Fatalf("give back run: %d, %v", n, err)
	}
	attempts := map[string]int{}
	for range 2 {
		// A suspect comes alone, to a worker that holds nothing: one a take.
		again, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w2", Max: 2, Room: 2, Lease: time.Minute, Serves: serves}))
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range again {
			attempts[tk.ID] = tk.Attempt
			if _, err := f.r.Finish(ctx, &broker.FinishParams{Worker: "w2", Done: []wire.Done{{ID: tk.ID, Result: []byte("r")}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if a, ok := attempts[taken[0].ID]; !ok || a != 0 {
		t.Errorf("the task given back unrun: attempt %d (taken %v), want 0", a, ok)
	}
	if a, ok := attempts[taken[1].ID]; !ok || a != 1 {
		t.Errorf("the task given back after it ran: attempt %d (taken %v), want 1", a, ok)
	}
}

// takeOf returns a take's tasks and end, as the tests read them.
func takeOf(res *broker.TakeResult, err error) ([]wire.Taken, wire.TakeEnd, error) {
	if res == nil {
		return nil, wire.TakeEnd{}, err
	}
	return res.Taken, res.End, err
}

// submitOf returns what a submit says, as the tests read it.
func submitOf(res *broker.SubmitResult, err error) (int64, bool, error) {
	if res == nil {
		return 0, false, err
	}
	return res.Count, res.Intact, err
}

// submittedOf returns a task set's count and epoch, as the tests read them.
func submittedOf(res *broker.SubmittedResult, err error) (int64, string, error) {
	if res == nil {
		return 0, "", err
	}
	return res.Count, res.Epoch, err
}

// missingOf returns what Missing says, as the tests read it.
func missingOf(res *broker.MissingResult, err error) ([]string, int64, string, error) {
	if res == nil {
		return nil, 0, "", err
	}
	return res.Missing, res.Count, res.Epoch, err
}

// readThenWaitOf returns what ReadThenWait brought, as the tests read it.
func readThenWaitOf(res *broker.ReadThenWaitResult, err error) ([]string, bool, error) {
	if res == nil {
		return nil, false, err
	}
	return res.Entries, res.FromWait, err
}

// purgeOf, endedOf, failedElementsOf, failuresOf and historyOf return
// what an operator's call says, as the tests read it.
func purgeOf(res *broker.PurgeResult, err error) (int, int, error) {
	if res == nil {
		return 0, 0, err
	}
	return res.Purged, res.Dropped, err
}

func endedOf(res *broker.EndedResult, err error) (map[string]int64, map[string]int64, error) {
	if res == nil {
		return nil, nil, err
	}
	return res.Outcomes, res.Kinds, err
}

func failedElementsOf(res *broker.FailedElementsResult, err error) (wire.FailedElements, int, error) {
	if res == nil {
		return wire.FailedElements{}, 0, err
	}
	return res.Elements, res.Malformed, err
}

func failuresOf(res *broker.FailuresResult, err error) ([]wire.FailureGroup, int, error) {
	if res == nil {
		return nil, 0, err
	}
	return res.Groups, res.Malformed, err
}

func historyOf(res *broker.HistoryResult, err error) ([]wire.BatchRecord, int, error) {
	if res == nil {
		return nil, 0, err
	}
	return res.Records, res.Malformed, err
}
