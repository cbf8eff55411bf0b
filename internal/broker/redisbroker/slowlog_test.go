package redisbroker

import (
	"context"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
)

// busyThreshold is how long Redis lets a script run before it answers every
// other client "BUSY Redis is busy running a script" (busy-reply-threshold,
// 5 s by default). A script call that came near it has blocked every client
// of the server meanwhile.
const busyThreshold = 5 * time.Second

// slowerThan is the threshold of SLOWLOG in the test: Redis logs there
// the commands a script runs as well as the script's call, so a threshold
// of 0 logs hundreds of thousands of them; the calls that matter take
// longer than this.
const slowerThan = time.Millisecond

// scriptCalls is what Redis says of the script calls of one step: how many
// EVALSHA and EVAL calls there were (INFO commandstats), and the longest
// call of each script that took more than slowerThan (SLOWLOG).
type scriptCalls struct {
	evalsha, eval int64
	hrandfield    int64 // not in a script: a cancel's withdrawal
	longest       map[string]time.Duration
}

// slowlogServer starts a server of the test's own (a shared one would log
// the other tests' commands too), with every script loaded, so that every
// call is an EVALSHA that SLOWLOG names by its SHA-1. reset starts a step;
// read says what its script calls were.
func slowlogServer(t *testing.T) (c *redis.Client, reset func(), read func() scriptCalls) {
	t.Helper()
	srv := redistest.Start(t, "--slowlog-max-len", "100000")
	c = srv.Client(t)
	ctx := context.Background()
	for _, s := range loaded {
		if err := s.Load(ctx, c).Err(); err != nil {
			t.Fatal(err)
		}
	}
	reset = func() {
		t.Helper()
		if err := c.ConfigSet(ctx, "slowlog-log-slower-than", strconv.Itoa(int(slowerThan/time.Microsecond))).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.SlowLogReset(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	read = func() scriptCalls {
		t.Helper()
		stats, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		out := scriptCalls{evalsha: calls(stats, "evalsha"), eval: calls(stats, "eval"), hrandfield: calls(stats, "hrandfield"), longest: map[string]time.Duration{}}
		logs, err := c.SlowLogGet(ctx, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		names := ScriptNames()
		for _, l := range logs {
			if len(l.Args) >= 2 && strings.EqualFold(l.Args[0], "EVALSHA") {
				name := names[strings.ToLower(l.Args[1])]
				out.longest[name] = max(out.longest[name], l.Duration)
			}
		}
		return out
	}
	return c, reset, read
}

// calls returns the calls of command cmd that INFO commandstats reports.
func calls(stats, cmd string) int64 {
	m := regexp.MustCompile(`(?m)^cmdstat_` + cmd + `:calls=(\d+)`).FindStringSubmatch(stats)
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// checkCalls fails t if the step's script calls were fewer than least (its
// work, at most ScriptBudget units a call, needs that many), if one was
// sent whole (EVAL), or if a call of script name took as long as the busy
// threshold; it logs the longest.
func checkCalls(t *testing.T, got scriptCalls, name string, least int64) {
	t.Helper()
	t.Logf("%s: %d script calls; the longest %s call %v (0: none took %v)", name, got.evalsha, name, got.longest[name], slowerThan)
	if got.eval > 0 {
		t.Errorf("%d EVAL calls: the scripts were loaded", got.eval)
	}
	if got.longest[name] >= busyThreshold {
		t.Errorf("a call of %s took %v: every client of Redis waited (BUSY past %v)", name, got.longest[name], busyThreshold)
	}
	if got.evalsha < least {
		t.Errorf("%s: %d script calls, want at least %d (at most %d units of work each)", name, got.evalsha, least, broker.ScriptBudget)
	}
}

// No script call holds Redis for long at the largest sizes the tests reach:
// 100,000 running batches published and recorded lost, a history of 1,000
// and more trimmed, a purge of 100,000 queued tasks, a durable batch of
// 100,000 tasks cancelled. Each is done in slices of at most ScriptBudget
// units of work (SLOWLOG counts the calls; each slice's own count is
// checked against the bound), and each call is well inside Redis's busy
// threshold. The durations are logged, not asserted below that threshold:
// on a loaded machine they say how busy it is more than what the scripts
// do.
func TestScriptsStayShort(t *testing.T) {
	c, reset, read := slowlogServer(t)
	ctx := context.Background()
	const many = 100_000
	q := redistest.Queue(t)
	r, a, mid := New(c, "rm", q), NewAdmin(c, "rm"), id.New()

	// 100,000 running batches, published, then recorded lost.
	batches := make(map[string]wire.BatchProgress, many)
	for i := range many {
		batches["b"+strconv.Itoa(i)] = wire.BatchProgress{Func: "f", Total: 1}
	}
	reset()
	if _, err := r.PublishBatches(ctx, &broker.PublishBatchesParams{Manager: mid, Batches: batches, TTL: time.Minute, Due: -time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if n, err := c.HLen(ctx, keys.Batches("rm", q, mid)).Result(); err != nil || n != many {
		t.Fatalf("%d batches published (%v), want %d", n, err, many)
	}
	checkCalls(t, read(), "publish.lua", many/broker.ScriptBudget)
	reset()
	if n, err := a.LoseManagers(ctx, &broker.QueueParams{Queue: q}); err != nil || n != many {
		t.Fatalf("LoseManagers: %d, %v; want %d batches recorded", n, err, many)
	}
	checkCalls(t, read(), "lost.lua", many/broker.ScriptBudget)
	// The history is back within its bounds once they are all recorded.
	if n, err := c.ZCard(ctx, keys.HistoryIndex("rm", q)).Result(); err != nil || n > keys.DefaultHistory+keys.DefaultHistory/100 {
		t.Errorf("history holds %d batches (%v), want at most %d", n, err, keys.DefaultHistory+keys.DefaultHistory/100)
	}

	// A history of 1,000 batches, then as many again in one record: trimmed.
	recs := make([]wire.BatchRecord, 2*keys.DefaultHistory)
	for i := range recs {
		recs[i] = wire.BatchRecord{ID: "r" + strconv.Itoa(i), Manager: mid, Func: "f", Total: 1, Done: 1,
			Outcome: wire.OutcomeDone, Started: 1, Ended: 2}
	}
	reset()
	if err := r.RecordBatches(ctx, &broker.RecordBatchesParams{Manager: mid, Records: recs[:keys.DefaultHistory], Limit: keys.DefaultHistory, Age: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := r.RecordBatches(ctx, &broker.RecordBatchesParams{Manager: mid, Records: recs[keys.DefaultHistory:], Limit: keys.DefaultHistory, Age: time.Hour}); err != nil {
		t.Fatal(err)
	}
	checkCalls(t, read(), "record.lua", 2*keys.DefaultHistory/broker.ScriptBudget)
	if n, err := c.ZCard(ctx, keys.HistoryIndex("rm", q)).Result(); err != nil || n > keys.DefaultHistory+keys.DefaultHistory/100 {
		t.Errorf("history holds %d batches (%v), want at most %d", n, err, keys.DefaultHistory+keys.DefaultHistory/100)
	}

	// 100,000 queued tasks, purged.
	r2, mid2 := New(c, "rm", q), id.New()
	submitMany(t, r2, mid2, many)
	reset()
	purged, dropped, err := purgeOf(a.Purge(ctx, &broker.QueueParams{Queue: q}))
	if err != nil || purged != many || dropped != many {
		t.Fatalf("Purge: %d purged, %d dropped, %v; want %d", purged, dropped, err, many)
	}
	checkCalls(t, read(), "purge.lua", many/broker.ScriptBudget)
	if n, err := c.LLen(ctx, keys.Results("rm", q, mid2)).Result(); err != nil || n != many {
		t.Fatalf("%d purged entries for the manager (%v), want %d", n, err, many)
	}

	// A durable batch of 100,000 outstanding tasks, cancelled.
	owner := id.Durable("big")
	submitMany(t, r2, owner, many)
	reset()
	if s, err := a.CancelOwner(ctx, &broker.CancelOwnerParams{Queue: q, Owner: owner, Reason: "too big"}); err != nil || s != "cancelled" {
		t.Fatalf("CancelOwner: %q, %v", s, err)
	}
	got := read()
	checkCalls(t, got, "cancel.lua", 1)
	if got.hrandfield < many/broker.ScriptBudget {
		t.Errorf("the cancel withdrew %d tasks in %d slices, want at most %d a slice", many, got.hrandfield, broker.ScriptBudget)
	}
	if n, err := c.HLen(ctx, keys.Tasks("rm", q, owner)).Result(); err != nil || n != 2 {
		t.Fatalf("the cancelled batch's task set holds %d fields (%v), want its count and epoch only", n, err)
	}
}

// A dead worker with 100,000 tasks in its private list and more held is
// reaped in one Reap, a slice of at most ScriptBudget task ids a call: every
// private task is reported lost to its manager once, every public one it
// held is back at the front of its lane with its attempt counted, and the
// worker is gone. Before, one call read the whole list (LRANGE 0 -1).
func TestReapStaysShort(t *testing.T) {
	c, reset, read := slowlogServer(t)
	ctx := context.Background()
	const many, public, heldPrivate = 100_000, 1200, 300
	q := redistest.Queue(t)
	f := &fixture{c: c, r: New(c, "rm", q), queue: q, mid: id.New()}
	const wid = "w"
	if _, err := f.r.Heartbeat(ctx, &broker.HeartbeatParams{Worker: wid, Lease: time.Minute, Info: &wire.WorkerInfo{State: "running"}}); err != nil {
		t.Fatal(err)
	}
	held := keys.Held("rm", q, wid)
	take := func(n int64) {
		t.Helper()
		for c.SCard(ctx, held).Val() < n {
			if _, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: wid, Max: 100, Room: 100, Lease: time.Minute, Serves: serves})); err != nil {
				t.Fatal(err)
			}
		}
	}
	lanes := f.submit(t, "", public)
	take(public)
	// The private tasks, numbered after the public ones.
	tasks := make([]wire.Task, many)
	for i := range tasks {
		tasks[i] = wire.Task{ID: id.Task(f.mid, uint64(public+i+1)), Payload: []byte("p")}
	}
	if _, _, err := submitOf(f.r.Submit(ctx, &broker.SubmitParams{Manager: f.mid, Worker: wid, Lane: f.lane(), Tasks: tasks, TTL: time.Hour, Expect: wire.Expect{}})); err != nil {
		t.Fatal(err)
	}
	take(public + heldPrivate)
	if n := c.LLen(ctx, keys.Private("rm", q, wid)).Val(); n != many-heldPrivate {
		t.Fatalf("the private list holds %d tasks, want %d", n, many-heldPrivate)
	}
	if _, err := f.r.Heartbeat(ctx, &broker.HeartbeatParams{Worker: wid, Lease: -time.Millisecond}); err != nil { // its lease lapses
		t.Fatal(err)
	}

	// One call handles ScriptBudget of the tasks the worker holds, and
	// says that more are left.
	one, more, err := f.r.reapSlice(ctx)
	if err != nil || !more || one.Workers != 0 || one.Requeued+one.Lost != broker.ScriptBudget {
		t.Fatalf("one reap.lua call: %+v, more %v, %v; want %d tasks handled, no worker reaped, more", one, more, err, broker.ScriptBudget)
	}
	reset()
	got, err := f.r.Reap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got.Requeued += one.Requeued
	got.Lost += one.Lost
	if *got != (wire.Reaped{Workers: 1, Requeued: public, Lost: many}) {
		t.Fatalf("Reap: %+v, %v; want 1 worker, %d requeued, %d lost", got, err, public, many)
	}
	checkCalls(t, read(), "reap.lua", (many+public)/broker.ScriptBudget-1)

	entries, err := c.LRange(ctx, keys.Results("rm", q, f.mid), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	seen := make(map[string]int, many)
	for _, e := range entries {
		seen[e]++
	}
	for _, task := range tasks {
		if n := seen[wire.EncodeEntry(wire.Entry{Kind: wire.EntryLost, Task: task.ID, Worker: wid})]; n != 1 {
			t.Fatalf("task %s has %d lost entries, want 1", task.ID, n)
		}
	}
	if len(entries) != many {
		t.Fatalf("%d entries in the result list, want %d", len(entries), many)
	}
	if n := c.LLen(ctx, f.laneKey()).Val(); n != public {
		t.Errorf("the lane holds %d tasks, want the %d requeued", n, public)
	}
	for _, tid := range lanes {
		if a := c.HGet(ctx, keys.Attempts("rm", q, f.mid), tid).Val(); a != "1" {
			t.Fatalf("task %s has attempt count %q, want 1", tid, a)
		}
	}
	if n := c.Exists(ctx, held, keys.Private("rm", q, wid)).Val(); n != 0 {
		t.Errorf("%d of the worker's held set and private list are left", n)
	}
	if err := c.ZScore(ctx, keys.Workers("rm", q), wid).Err(); err != redis.Nil {
		t.Errorf("the worker is still in the workers set (%v)", err)
	}
	if s := c.HGet(ctx, keys.WorkerInfo("rm", q, wid), "state").Val(); s != "dead" {
		t.Errorf("the worker's state is %q, want dead", s)
	}
}

// submitMany submits n tasks of manager mid, in one lane.
func submitMany(t *testing.T, r *Broker, mid string, n int) {
	t.Helper()
	tasks := make([]wire.Task, n)
	for i := range tasks {
		tasks[i] = wire.Task{ID: id.TaskIn(mid, uint64(i+1), 1, 1, keys.DefaultPriority, keys.DefaultPriority), Payload: []byte("p")}
	}
	lane := wire.Lane{Name: mid + ".1", Calls: "f\tsig"}
	if _, _, err := submitOf(r.Submit(context.Background(), &broker.SubmitParams{Manager: mid, Lane: lane, Tasks: tasks, TTL: time.Hour, Expect: wire.Expect{}})); err != nil {
		t.Fatal(err)
	}
}

// A manager found lost has its tasks withdrawn in the call that finds it,
// and its batches recorded a slice a call; if it comes back between two
// slices, what it publishes and submits anew is its own: the slices left
// record only what it had published before, and leave its new lane, task
// set and batches alone.
func TestLostInSlicesSparesWhatComesBack(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	const published = 2*broker.ScriptBudget + 200
	batches := make(map[string]wire.BatchProgress, published)
	for i := range published {
		batches["old"+strconv.Itoa(i)] = wire.BatchProgress{Func: "f", Total: 1}
	}
	old := f.submit(t, "", 3)
	if _, err := f.r.PublishBatches(ctx, &broker.PublishBatchesParams{Manager: f.mid, Batches: batches, TTL: time.Minute, Due: -time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	n, more, mids, err := loseSlice(ctx, f.c, "rm", f.queue)
	if err != nil || n != broker.ScriptBudget || !more || len(mids) != 1 || mids[0] != f.mid {
		t.Fatalf("first slice: %d recorded, more %v, managers %v, %v; want %d, true, [%s]", n, more, mids, err, broker.ScriptBudget, f.mid)
	}
	if ok, err := f.c.HExists(ctx, keys.Tasks("rm", f.queue, f.mid), old[0]).Result(); err != nil || ok {
		t.Fatalf("after the first slice the lost manager's task is still wanted (%v)", err)
	}
	// It comes back: publishes its one running batch, submits a task anew
	// into a lane of the same name.
	if _, err := f.r.PublishBatches(ctx, &broker.PublishBatchesParams{Manager: f.mid, Batches: map[string]wire.BatchProgress{"new": {Func: "f", Total: 1}}, TTL: time.Minute, Due: time.Minute}); err != nil {
		t.Fatal(err)
	}
	again := f.submit(t, "", 1)
	total, err := f.r.LoseManagers(ctx)
	if err != nil || total != published-broker.ScriptBudget {
		t.Fatalf("LoseManagers after it came back: %d recorded, %v; want the %d left", total, err, published-broker.ScriptBudget)
	}
	if v, err := f.c.HGet(ctx, keys.Batches("rm", f.queue, f.mid), "new").Result(); err != nil || v == "" {
		t.Fatalf("the manager's new batch is gone: %q, %v", v, err)
	}
	if ok, err := f.c.HExists(ctx, keys.Tasks("rm", f.queue, f.mid), again[0]).Result(); err != nil || !ok {
		t.Fatalf("the manager's task submitted anew is no longer wanted (%v)", err)
	}
	if ids, err := f.c.LRange(ctx, f.laneKey(), 0, -1).Result(); err != nil || len(ids) != 1 || ids[0] != again[0] {
		t.Fatalf("its lane holds %v (%v), want only [%s]", ids, err, again[0])
	}
	if n, err := f.c.Exists(ctx, keys.LostBatches("rm", f.queue, f.mid), keys.Losing("rm", f.queue)).Result(); err != nil || n != 0 {
		t.Fatalf("%d of the keys set aside are left (%v), want none", n, err)
	}
	h, err := f.c.HGet(ctx, keys.History("rm", f.queue), "new").Result()
	if err == nil {
		t.Fatalf("the batch it runs since it came back was recorded: %s", h)
	}
}

// A purge in slices: a call stops after ScriptBudget ids or lanes, and
// leaves a lane it stopped in with its count of elements right; the calls
// after it drop the rest, lanes of one task past the budget in number and
// a worker's private list included, every manager told, nothing left
// behind.
func TestPurgeInSlices(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	const big, small, private, size = 1200, broker.ScriptBudget + 100, 700, 3
	submit := func(lane uint64, wid string, n int, first uint64) {
		t.Helper()
		tasks := make([]wire.Task, n)
		for i := range tasks {
			seq := first + uint64(i)
			tid := id.TaskIn(f.mid, seq, lane, size, keys.DefaultPriority, keys.DefaultPriority)
			if wid != "" {
				tid = id.Task(f.mid, seq)
			}
			tasks[i] = wire.Task{ID: tid, Payload: []byte("p")}
		}
		l := wire.Lane{Name: f.mid + "." + strconv.FormatUint(lane, 36), Calls: "f\tsig"}
		if _, _, err := submitOf(f.r.Submit(ctx, &broker.SubmitParams{Manager: f.mid, Worker: wid, Lane: l, Tasks: tasks, TTL: time.Minute, Expect: wire.Expect{}})); err != nil {
			t.Fatal(err)
		}
	}
	seq := uint64(1)
	submit(1, "", big, seq) // the ring's head
	seq += big
	for lane := uint64(2); lane < 2+small; lane++ {
		submit(lane, "", 1, seq)
		seq++
	}
	submit(1, "w1", private, seq)
	// Purge finds private lists through the queue's workers.
	if err := f.c.ZAdd(ctx, keys.Workers("rm", f.queue), redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: "w1"}).Err(); err != nil {
		t.Fatal(err)
	}
	bigLane := keys.Lane("rm", f.queue, f.mid+".1")

	a := NewAdmin(f.c, "rm")
	args := []any{keys.Base("rm", f.queue), 0, keys.Private("rm", f.queue, "w1")}
	one, err := purgeScript.run(ctx, f.c, []string{keys.Ring("rm", f.queue, keys.DefaultPriority)}, args...).Int64Slice()
	if err != nil || len(one) != 3 || one[1] != broker.ScriptBudget-1 || one[2] != 0 {
		t.Fatalf("one purge.lua call: %v, %v; want %d ids dropped (a lane visited, and its ids), not done", one, err, broker.ScriptBudget-1)
	}
	left := int64(big - (broker.ScriptBudget - 1))
	if n, err := f.c.LLen(ctx, bigLane).Result(); err != nil || n != left {
		t.Fatalf("the lane stopped in holds %d ids (%v), want %d", n, err, left)
	}
	if e, err := f.c.Get(ctx, keys.LaneElements("rm", f.queue, f.mid+".1")).Int64(); err != nil || e != left*size {
		t.Fatalf("the lane stopped in counts %d elements (%v), want %d", e, err, left*size)
	}
	purged, dropped, err := purgeOf(a.Purge(ctx, &broker.QueueParams{Queue: f.queue}))
	rest := big + small + private - (broker.ScriptBudget - 1)
	if err != nil || purged != rest || dropped != rest {
		t.Fatalf("Purge: %d purged, %d dropped, %v; want %d", purged, dropped, err, rest)
	}
	if n, err := f.c.LLen(ctx, keys.Results("rm", f.queue, f.mid)).Result(); err != nil || n != big+small+private {
		t.Fatalf("the manager was told of %d purged tasks (%v), want %d", n, err, big+small+private)
	}
	if n, err := f.c.HLen(ctx, keys.Tasks("rm", f.queue, f.mid)).Result(); err != nil || n > 2 {
		t.Fatalf("the task set holds %d fields after the purge (%v), want its count and epoch at most", n, err)
	}
	if n, err := f.c.Exists(ctx, keys.Ring("rm", f.queue, keys.DefaultPriority), bigLane, keys.LaneElements("rm", f.queue, f.mid+".1"),
		keys.LaneElements("rm", f.queue, f.mid+".2"), keys.Private("rm", f.queue, "w1")).Result(); err != nil || n != 0 {
		t.Fatalf("%d of the ring, lanes, counters and private list are left (%v), want none", n, err)
	}
	if b, err := a.Backlog(ctx, &broker.QueueParams{Queue: f.queue}); err != nil || b.Tasks != 0 || b.Elements != 0 {
		t.Fatalf("backlog after the purge: %+v, %v", b, err)
	}
}

// A worker's LoseManagers, called every heartbeat, records at most
// LoseSlices slices a call; the next call records what is left.
func TestLoseManagersPerCallBounded(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	const published = LoseSlices*broker.ScriptBudget + 300
	batches := make(map[string]wire.BatchProgress, published)
	for i := range published {
		batches["b"+strconv.Itoa(i)] = wire.BatchProgress{Func: "f", Total: 1}
	}
	if _, err := f.r.PublishBatches(ctx, &broker.PublishBatchesParams{Manager: f.mid, Batches: batches, TTL: time.Minute, Due: -time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if n, err := f.r.LoseManagers(ctx); err != nil || n != LoseSlices*broker.ScriptBudget {
		t.Fatalf("first LoseManagers: %d, %v; want %d", n, err, LoseSlices*broker.ScriptBudget)
	}
	if n, err := f.r.LoseManagers(ctx); err != nil || n != 300 {
		t.Fatalf("second LoseManagers: %d, %v; want the 300 left", n, err)
	}
	if n, err := f.r.LoseManagers(ctx); err != nil || n != 0 {
		t.Fatalf("third LoseManagers: %d, %v; want nothing left", n, err)
	}
}

// A publish of more batches than a call takes is put in place by its last
// call at once; that call sent again (its reply lost, the client retried)
// leaves the hash whole.
func TestPublishInSlicesRetried(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	const published = 2*broker.ScriptBudget + 10
	batches := make(map[string]wire.BatchProgress, published)
	for i := range published {
		batches["b"+strconv.Itoa(i)] = wire.BatchProgress{Func: "f", Total: 1}
	}
	if _, err := f.r.PublishBatches(ctx, &broker.PublishBatchesParams{Manager: f.mid, Batches: map[string]wire.BatchProgress{"gone": {Func: "f"}}, TTL: time.Minute, Due: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.r.PublishBatches(ctx, &broker.PublishBatchesParams{Manager: f.mid, Batches: batches, TTL: time.Minute, Due: time.Minute}); err != nil {
		t.Fatal(err)
	}
	hash := keys.Batches("rm", f.queue, f.mid)
	check := func(when string) {
		t.Helper()
		got, err := f.c.HKeys(ctx, hash).Result()
		if err != nil || len(got) != published || slices.Contains(got, "gone") {
			t.Fatalf("%s: %d batches published (%v), want the %d of the last publish only", when, len(got), err, published)
		}
		if n, err := f.c.Exists(ctx, keys.BatchesNext("rm", f.queue, f.mid)).Result(); err != nil || n != 0 {
			t.Fatalf("%s: the hash being built is left (%v)", when, err)
		}
	}
	check("published")
	ks := []string{hash, keys.Cancels("rm", f.queue, f.mid), keys.Managers("rm", f.queue),
		keys.Throughput("rm", f.queue, 0), keys.BatchesNext("rm", f.queue, f.mid)}
	if err := publishScript.run(ctx, f.c, ks, f.mid, time.Minute.Milliseconds(), time.Minute.Milliseconds(), 0, 0, "last", "",
		"b0", wire.EncodeProgress(batches["b0"])).Err(); err != nil {
		t.Fatal(err)
	}
	check("its last call sent again")
}
