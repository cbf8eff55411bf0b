package redisbroker

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
)

// What a worker publishes with its heartbeat is what the admin reads back,
// field for field, and served.lua finds its functions.
func TestWorkerInfoRoundTrip(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	in := wire.WorkerInfo{Host: "h1", PID: 42, Concurrency: 8, Lease: 10 * time.Second,
		Started: time.Unix(1700000000, 0), Heartbeat: time.UnixMilli(1700000001234),
		Running: 3, Taken: 100, Delivered: 97, Failed: 2, Functions: []string{"cube", "square"},
		Serves: []string{"cube\tfunc(int) int #1", "square\tfunc(int) int #2"},
		State:  "draining", Error: "take: boom"}
	if _, err := f.r.Heartbeat(ctx, &broker.HeartbeatParams{Worker: "w1", Lease: time.Minute, Info: &in}); err != nil {
		t.Fatal(err)
	}
	ws, err := NewAdmin(f.c, "rm").Workers(ctx, &broker.QueueParams{Queue: f.queue})
	if err != nil || len(ws) != 1 {
		t.Fatalf("Workers: %v, %v", ws, err)
	}
	if ws[0].Malformed != nil || !reflect.DeepEqual(ws[0].Info, in) {
		t.Fatalf("read back %+v (%v), want %+v", ws[0].Info, ws[0].Malformed, in)
	}
	served, err := f.r.Served(ctx, &broker.ServedParams{Calls: []string{"square\tfunc(int) int #2", "other\tx", "square\tfunc(int) int #3",
		wire.Calls("square", "func(int) int #2", "cube", "func(int) int #1"), wire.Calls("square", "func(int) int #2", "sum", "s")}})
	want := []wire.Serving{{Code: wire.ServedBy}, {Code: wire.Unregistered, Name: "other"}, {Code: wire.OtherSignature, Name: "square", Signature: "func(int) int #2"},
		{Code: wire.ServedBy}, {Code: wire.Unregistered, Name: "sum"}}
	if err != nil || !reflect.DeepEqual(served, want) {
		t.Fatalf("Served: %+v, %v; want %+v", served, err, want)
	}
}

// Failure records and batch progress read back as written; what does not
// decode is counted, not dropped unsaid.
func TestFailuresAndProgressRoundTrip(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	g := wire.FailureGroup{Func: "f", Kind: "panic", Fingerprint: "boom <n>", Count: 2, First: 10, Last: 20, Sample: "boom 7", Task: "t-1", Stack: "s"}
	if n, bad, err := counted(f.r.CountFailures(ctx, &broker.CountFailuresParams{Worker: "w1", Groups: []wire.FailureGroup{g}})); err != nil || n != 2 || bad != 0 {
		t.Fatalf("CountFailures: %d, %d malformed, %v", n, bad, err)
	}
	later := g
	later.Count, later.First, later.Last, later.Sample, later.Task, later.Stack = 3, 15, 30, "boom 9", "t-2", ""
	if n, bad, err := counted(f.r.CountFailures(ctx, &broker.CountFailuresParams{Worker: "w2", Groups: []wire.FailureGroup{later}})); err != nil || n != 3 || bad != 0 {
		t.Fatalf("CountFailures: %d, %d malformed, %v", n, bad, err)
	}
	f.c.HSet(ctx, keys.FailureGroups("rm", f.queue), "x", "{not json")
	a := NewAdmin(f.c, "rm")
	gs, malformed, err := failuresOf(a.Failures(ctx, &broker.QueueParams{Queue: f.queue}))
	want := wire.FailureGroup{Func: "f", Kind: "panic", Fingerprint: "boom <n>", Count: 5, First: 10, Last: 30, Sample: "boom 9",
		Task: "t-2", Stack: "s", Workers: "w1,w2"}
	if err != nil || malformed != 1 || len(gs) != 1 || !reflect.DeepEqual(gs[0], want) {
		t.Fatalf("Failures: %+v, %d malformed, %v; want [%+v], 1", gs, malformed, err, want)
	}

	p := wire.BatchProgress{Func: "f", Total: 10, Done: 4, Failed: 1, Rate: 2.5, ETA: 3 * time.Second,
		Started: time.Unix(1700000000, 0).UTC(), Worker: "w", Waiting: "no live worker", Priority: 5}
	if _, err := f.r.PublishBatches(ctx, &broker.PublishBatchesParams{Manager: f.mid, Batches: map[string]wire.BatchProgress{"b1": p}, TTL: time.Minute, Due: time.Minute}); err != nil {
		t.Fatal(err)
	}
	bs, err := a.Batches(ctx, &broker.QueueParams{Queue: f.queue})
	wantBatches := []wire.PublishedBatch{{Queue: f.queue, Manager: f.mid, ID: "b1", Progress: p}}
	if err != nil || !reflect.DeepEqual(bs, wantBatches) {
		t.Fatalf("Batches: %+v, %v; want %+v", bs, err, wantBatches)
	}

	// An operator's cancel reaches the manager's next publish, once; the
	// elements it counts land in the throughput counter of now.
	if err := a.CancelBatch(ctx, &broker.CancelBatchParams{Queue: f.queue, Manager: f.mid, Batch: "b1"}); err != nil {
		t.Fatal(err)
	}
	// One of a manager that does not publish (gone) is refused, saying why.
	if err := a.CancelBatch(ctx, &broker.CancelBatchParams{Queue: f.queue, Manager: "0123456789abcdef", Batch: "b1"}); err == nil || !strings.Contains(err.Error(), "no longer publishes") {
		t.Fatalf("cancel of a batch of a manager that does not publish: %v; want it refused", err)
	}
	for _, want := range [][]string{{"b1"}, nil} {
		cancels, err := f.r.PublishBatches(ctx, &broker.PublishBatchesParams{Manager: f.mid, Batches: map[string]wire.BatchProgress{"b1": p}, TTL: time.Minute, Due: time.Minute, Ended: 7})
		if err != nil || !reflect.DeepEqual(cancels, want) && len(cancels)+len(want) > 0 {
			t.Fatalf("cancels: %v, %v; want %v", cancels, err, want)
		}
	}
	tp, err := a.Throughput(ctx, &broker.ThroughputParams{Queue: f.queue, Now: time.Now(), Span: time.Minute})
	if err != nil || len(tp) != 12 || tp[11]+tp[10] != 14 {
		t.Fatalf("throughput of the last minute: %v, %v; want 12 buckets, 14 elements in the last two", tp, err)
	}
}

// The entries the scripts write in place of a result (reap.lua's "lost",
// purge.lua's "purged") decode to their kind, task and worker.
func TestScriptEntriesDecode(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	private := f.submit(t, "dead", 1)[0]
	public := id.TaskIn(f.mid, 2, 1, 1, 3, 3)
	if _, _, err := submitOf(f.r.Submit(ctx, &broker.SubmitParams{Manager: f.mid, Lane: f.lane(), Tasks: []wire.Task{{ID: public, Payload: []byte("p")}}, TTL: time.Minute, Expect: wire.Expect{}})); err != nil {
		t.Fatal(err)
	}
	if _, err := f.r.Heartbeat(ctx, &broker.HeartbeatParams{Worker: "dead", Lease: -time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.r.Reap(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := NewAdmin(f.c, "rm").Purge(ctx, &broker.QueueParams{Queue: f.queue}); err != nil {
		t.Fatal(err)
	}
	got, err := f.c.LRange(ctx, keys.Results("rm", f.queue, f.mid), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	want := []wire.Entry{{Kind: wire.EntryLost, Task: private, Worker: "dead"}, {Kind: wire.EntryPurged, Task: public}}
	if len(got) != len(want) {
		t.Fatalf("result list %q, want %d entries", got, len(want))
	}
	for i, s := range got {
		if e, err := wire.DecodeEntry(s, 0); err != nil || !reflect.DeepEqual(e, want[i]) {
			t.Errorf("entry %q decodes as %+v, want %+v", s, e, want[i])
		}
		if wire.EncodeEntry(want[i]) != s {
			t.Errorf("wire.EncodeEntry(%+v) = %q, the script wrote %q", want[i], wire.EncodeEntry(want[i]), s)
		}
	}
	// A result entry is decoded there and then, once.
	res := &codec.Result{Task: "m-1", Attempt: 2, Values: []byte{0x91, 0x07}}
	b, err := codec.EncodeResult(res)
	if err != nil {
		t.Fatal(err)
	}
	if e, err := wire.DecodeEntry(string(b), 0); err != nil || e.Kind != wire.EntryResult || e.Task != "m-1" || e.Size != len(b) || !reflect.DeepEqual(e.Result, res) {
		t.Errorf("a result decodes as %+v, %v; want %+v", e, err, res)
	}
	if e, err := wire.DecodeEntry("\x96\x01", 0); err == nil || e.Kind != wire.EntryResult || e.Result != nil {
		t.Errorf("a cut result decodes as %+v, %v; want an error and no result", e, err)
	}
	// WakeCollector's entry ends a wait for results and decodes as a wake.
	if err := f.r.WakeCollector(ctx, &broker.ManagerParams{Manager: f.mid}); err != nil {
		t.Fatal(err)
	}
	first, err := f.r.WaitResults(ctx, &broker.WaitResultsParams{Manager: f.mid, Timeout: time.Second})
	if err != nil || first != got[0] {
		t.Fatalf("WaitResults: %q, %v; want the first entry %q, left in place", first, err, got[0])
	}
	last, _ := f.c.LIndex(ctx, keys.Results("rm", f.queue, f.mid), -1).Result()
	if e, _ := wire.DecodeEntry(last, 0); e.Kind != wire.EntryWake {
		t.Errorf("the wake entry %q decodes as %+v", last, e)
	}
}

// A script reply of the wrong shape is an error that says what came back,
// never a %!w(<nil>) nor a silently dropped value. (Not parallel: it swaps
// package scripts, and parallel tests start only after it ends.)
func TestMalformedRepliesAreErrors(t *testing.T) {
	srv := redistest.Shared(t)
	c := srv.Client(t)
	r := New(c, "rm", redistest.Queue(t))
	ctx := context.Background()
	swap := func(s **script, body string) {
		old := *s
		*s = &script{Script: redis.NewScript(body), name: old.name}
		t.Cleanup(func() { *s = old })
	}
	swap(&takeScript, "return {'id', 'payload', 'id2'}")
	swap(&reapScript, "return {1, 2}")
	swap(&heartbeatScript, "return {1}")
	swap(&submitScript, "return {1}")
	checks := map[string]func() error{
		"take: script returned string last, not its flags": func() error {
			_, _, err := takeOf(r.Take(ctx, &broker.TakeParams{Worker: "w", Max: 1, Room: 1, Lease: time.Second, Serves: serves}))
			return err
		},
		"reap: script returned [1 2], not 4 integers": func() error { _, err := r.Reap(ctx); return err },
		"heartbeat: script returned [1], not 3 integers": func() error {
			_, err := r.Heartbeat(ctx, &broker.HeartbeatParams{Worker: "w", Lease: time.Second})
			return err
		},
		"submit: script returned [1], not 2 integers": func() error {
			_, _, err := submitOf(r.Submit(ctx, &broker.SubmitParams{Manager: "m", Lane: wire.Lane{Name: "m.1"}, Tasks: []wire.Task{{ID: "m-1.1", Payload: []byte("p")}}, TTL: time.Minute, Expect: wire.Expect{}}))
			return err
		},
	}
	for want, call := range checks {
		if err := call(); err == nil || err.Error() != want {
			t.Errorf("got %v, want %q", err, want)
		}
	}
	swap(&takeScript, "return {'id', 'payload', {'x', ''}, {}}")
	if _, _, err := takeOf(r.Take(ctx, &broker.TakeParams{Worker: "w", Max: 1, Room: 1, Lease: time.Second, Serves: serves})); err == nil || strings.Contains(err.Error(), "%!") {
		t.Errorf("a take with a malformed attempt: %v", err)
	}
}

// A task of another priority is queued on that priority's list, taken
// before the default's, and put back on its own list when its worker dies.
func TestPriorityLists(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	// Three batches, each of its lane, of three priorities.
	var tids, lanes []string
	for i, p := range []int{keys.MinPriority, keys.DefaultPriority, keys.MaxPriority} {
		lane := wire.Lane{Name: fmt.Sprintf("%s.%d", f.mid, i+1), Calls: "f\tsig"}
		tid := id.TaskIn(f.mid, uint64(i+1), uint64(i+1), 1, p, keys.DefaultPriority)
		tids, lanes = append(tids, tid), append(lanes, lane.Name)
		if _, _, err := submitOf(f.r.Submit(ctx, &broker.SubmitParams{Manager: f.mid, Lane: lane, Tasks: []wire.Task{{ID: tid, Payload: []byte("p")}}, TTL: time.Minute, Expect: wire.Expect{}})); err != nil {
			t.Fatal(err)
		}
	}
	low, normal, high := tids[0], tids[1], tids[2]
	highRing := keys.Ring("rm", f.queue, keys.MaxPriority)
	if got := f.c.LRange(ctx, highRing, 0, -1).Val(); !reflect.DeepEqual(got, lanes[2:]) {
		t.Fatalf("ring of priority %d holds %q, want %q", keys.MaxPriority, got, lanes[2:])
	}
	var got []string
	for range 3 {
		taken, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "dying", Max: 1, Room: 1, Lease: time.Minute, Serves: serves}))
		if err != nil || len(taken) != 1 {
			t.Fatalf("Take: %v, %v", taken, err)
		}
		got = append(got, taken[0].ID)
	}
	if want := []string{high, normal, low}; !reflect.DeepEqual(got, want) {
		t.Fatalf("taken in order %q, want %q", got, want)
	}
	if _, err := f.r.Heartbeat(ctx, &broker.HeartbeatParams{Worker: "dying", Lease: -time.Second}); err != nil {
		t.Fatal(err)
	}
	if r, err := f.r.Reap(ctx); err != nil || r.Requeued != 3 {
		t.Fatalf("Reap: %+v, %v", r, err)
	}
	for i, p := range []int{keys.MinPriority, keys.DefaultPriority, keys.MaxPriority} {
		if got := f.c.LRange(ctx, keys.Lane("rm", f.queue, lanes[i]), 0, -1).Val(); !reflect.DeepEqual(got, tids[i:i+1]) {
			t.Errorf("after the reap lane %s holds %q, want [%s]", lanes[i], got, tids[i])
		}
		if got := f.c.LRange(ctx, keys.Ring("rm", f.queue, p), 0, -1).Val(); !reflect.DeepEqual(got, lanes[i:i+1]) {
			t.Errorf("after the reap the ring of priority %d holds %q, want [%s]", p, got, lanes[i])
		}
	}
}

// A take that empties a lane takes it out of its ring at once, with the
// keys beside it, so that the next take does not walk it; one that leaves
// tasks in it keeps it there; a submit to it puts it back.
func TestTakeDropsLaneItEmptied(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	ring := keys.Ring("rm", f.queue, keys.DefaultPriority)
	list := keys.Lane("rm", f.queue, f.lane().Name)
	submit := func(seq uint64, n int) {
		t.Helper()
		var ts []wire.Task
		for i := range n {
			ts = append(ts, wire.Task{ID: id.TaskIn(f.mid, seq+uint64(i), 1, 1, keys.DefaultPriority, keys.DefaultPriority), Payload: []byte("p")})
		}
		if _, _, err := submitOf(f.r.Submit(ctx, &broker.SubmitParams{Manager: f.mid, Lane: f.lane(), Tasks: ts, TTL: time.Minute, Expect: wire.Expect{}})); err != nil {
			t.Fatal(err)
		}
	}
	inRing := func() []string { return f.c.LRange(ctx, ring, 0, -1).Val() }
	beside := func() int64 { return f.c.Exists(ctx, list+":e", list+":t").Val() }
	submit(1, 3)
	if taken, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w", Max: 2, Room: 2, Lease: time.Minute, Serves: serves})); err != nil || len(taken) != 2 {
		t.Fatalf("Take: %v, %v", taken, err)
	}
	if got := inRing(); !reflect.DeepEqual(got, []string{f.lane().Name}) || beside() != 2 {
		t.Fatalf("a lane left with a task: ring %q, %d keys beside it; want it in the ring, 2 keys", got, beside())
	}
	if taken, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w", Max: 5, Room: 5, Lease: time.Minute, Serves: serves})); err != nil || len(taken) != 1 {
		t.Fatalf("Take: %v, %v", taken, err)
	}
	if got := inRing(); len(got) != 0 || beside() != 0 {
		t.Fatalf("a lane the take emptied: ring %q, %d keys beside it; want neither", got, beside())
	}
	submit(4, 1)
	if got := inRing(); !reflect.DeepEqual(got, []string{f.lane().Name}) {
		t.Fatalf("after a submit to the emptied lane the ring holds %q", got)
	}
	if taken, _, err := takeOf(f.r.Take(ctx, &broker.TakeParams{Worker: "w", Max: 1, Room: 1, Lease: time.Minute, Serves: serves})); err != nil || len(taken) != 1 {
		t.Fatalf("Take: %v, %v", taken, err)
	}
	if got := inRing(); len(got) != 0 {
		t.Fatalf("a lane emptied by a take of exactly its tasks: ring %q", got)
	}
}

// A manager's record of a batch that ended reaches the history and leaves
// its published running batches; the history keeps its last limit batches.
// A manager whose publish is overdue is lost: its batches go to the
// history as "manager lost" with their last progress, once.
func TestHistory(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	a := NewAdmin(f.c, "rm")
	p := wire.BatchProgress{Func: "f", Total: 10, Done: 4, Failed: 1, Priority: 2, StartedMs: 1700000000123,
		Rate: 3, Waiting: "why", Call: codec.CallInfo{Label: "nightly"}}
	if _, err := f.r.PublishBatches(ctx, &broker.PublishBatchesParams{Manager: f.mid, Batches: map[string]wire.BatchProgress{"b1": p, "b2": p}, TTL: time.Minute, Due: time.Minute}); err != nil {
		t.Fatal(err)
	}
	rec := wire.BatchRecord{ID: "b1", Manager: f.mid, Func: "f", Total: 10, Done: 10, Failed: 2,
		FailedBy: map[string]int{"panic": 1, "error": 1}, Outcome: wire.OutcomeFailed, Started: 1, Ended: 2}
	if err := f.r.RecordBatches(ctx, &broker.RecordBatchesParams{Manager: f.mid, Records: []wire.BatchRecord{rec}, Limit: 3, Age: time.Hour}); err != nil {
		t.Fatal(err)
	}
	hist, malformed, err := historyOf(a.History(ctx, &broker.HistoryParams{Queue: f.queue}))
	if err != nil || malformed != 0 || len(hist) != 1 || !reflect.DeepEqual(hist[0], rec) {
		t.Fatalf("history %+v, %d malformed, %v; want [%+v]", hist, malformed, err, rec)
	}
	if bs, _ := a.Batches(ctx, &broker.QueueParams{Queue: f.queue}); len(bs) != 1 || bs[0].ID != "b2" {
		t.Fatalf("running batches %+v; want b2 alone", bs)
	}
	for i := range 5 {
		r := rec
		r.ID = fmt.Sprint("x", i)
		if err := f.r.RecordBatches(ctx, &broker.RecordBatchesParams{Manager: f.mid, Records: []wire.BatchRecord{r}, Limit: 3, Age: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	hist, _, _ = historyOf(a.History(ctx, &broker.HistoryParams{Queue: f.queue}))
	if ids := recordIDs(hist); !reflect.DeepEqual(ids, []string{"x4", "x3", "x2"}) {
		t.Fatalf("history %v; want the last 3, newest first", ids)
	}
	if n, _ := f.c.HLen(ctx, keys.History("rm", f.queue)).Result(); n != 3 {
		t.Fatalf("history hash has %d records; want 3", n)
	}

	// Lost: due at once.
	if _, err := f.r.PublishBatches(ctx, &broker.PublishBatchesParams{Manager: f.mid, Batches: map[string]wire.BatchProgress{"b2": p}, TTL: time.Minute, Due: -time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	for want := range []int{1, 0} {
		n, err := a.LoseManagers(ctx, &broker.QueueParams{Queue: f.queue})
		if err != nil || n != 1-want {
			t.Fatalf("LoseManagers: %d, %v; want %d", n, err, 1-want)
		}
	}
	// The lost batch's record, found by its id: it may share its
	// millisecond with x4's, and then the newest-first order between them
	// is the ids'.
	hist, _, _ = historyOf(a.History(ctx, &broker.HistoryParams{Queue: f.queue}))
	var got *wire.BatchRecord
	for i := range hist {
		if hist[i].ID == "b2" {
			got = &hist[i]
		}
	}
	if got == nil {
		t.Fatalf("lost manager's batch not in the history: %+v", hist)
	}
	// The script's record is Go's from the same progress (copy_progress
	// mirrors wire.BatchProgress.Record), the call's label included.
	want := p.Record("b2", f.mid)
	want.FailedBy, want.Outcome, want.Reason, want.Ended = map[string]int{}, wire.OutcomeManagerLost,
		"its manager stopped publishing progress; its queued tasks were withdrawn", got.Ended
	if !reflect.DeepEqual(*got, want) || got.Ended < time.Now().Add(-time.Minute).UnixMilli() {
		t.Fatalf("lost manager's batch: %+v; want %+v", *got, want)
	}
	if raw := f.c.HGet(ctx, keys.History("rm", f.queue), "b2").Val(); strings.Contains(raw, `"waiting"`) || strings.Contains(raw, `"rate"`) {
		t.Fatalf("the lost batch's record keeps what only a running batch has: %s", raw)
	}
	if bs, _ := a.Batches(ctx, &broker.QueueParams{Queue: f.queue}); len(bs) != 0 {
		t.Fatalf("running batches of a lost manager still listed: %+v", bs)
	}
}

// Several records in one call are written as one at a time would write
// them: a record that overwrites one takes back what the old one counted in
// the totals, and a batch named twice in one call counts once, by its last
// record.
func TestHistoryManyInOneCall(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	a := NewAdmin(f.c, "rm")
	rec := func(id, outcome string, failedBy map[string]int) wire.BatchRecord {
		failed := 0
		if failedBy == nil {
			failedBy = map[string]int{} // as History reads it back
		}
		for _, n := range failedBy {
			failed += n
		}
		return wire.BatchRecord{ID: id, Manager: f.mid, Func: "f", Total: 10, Done: 10, Failed: failed,
			FailedBy: failedBy, Outcome: outcome, Started: 1, Ended: 2}
	}
	first := []wire.BatchRecord{
		rec("a", wire.OutcomeDone, nil),
		rec("b", wire.OutcomeFailed, map[string]int{"panic": 2}),
	}
	if err := f.r.RecordBatches(ctx, &broker.RecordBatchesParams{Manager: f.mid, Records: first, Limit: 100, Age: time.Hour}); err != nil {
		t.Fatal(err)
	}
	second := []wire.BatchRecord{
		rec("b", wire.OutcomeFailed, map[string]int{"panic": 1, "error": 3}), // overwrites b
		rec("c", wire.OutcomeDone, nil),
		rec("d", wire.OutcomeFailed, map[string]int{"error": 1}), // named twice: the last counts
		rec("e", wire.OutcomeDone, nil),
		rec("d", wire.OutcomeDone, nil),
	}
	if err := f.r.RecordBatches(ctx, &broker.RecordBatchesParams{Manager: f.mid, Records: second, Limit: 100, Age: time.Hour}); err != nil {
		t.Fatal(err)
	}
	hist, malformed, err := historyOf(a.History(ctx, &broker.HistoryParams{Queue: f.queue}))
	if err != nil || malformed != 0 {
		t.Fatalf("history: %d malformed, %v", malformed, err)
	}
	byID := map[string]wire.BatchRecord{}
	for _, r := range hist {
		byID[r.ID] = r
	}
	want := map[string]wire.BatchRecord{"a": first[0], "b": second[0], "c": second[1], "d": second[4], "e": second[3]}
	if !reflect.DeepEqual(byID, want) {
		t.Fatalf("history %+v; want %+v", byID, want)
	}
	outcomes, kinds, err := endedOf(a.Ended(ctx, &broker.QueueParams{Queue: f.queue}))
	if err != nil {
		t.Fatal(err)
	}
	wantOutcomes := map[string]int64{wire.OutcomeDone: 4, wire.OutcomeFailed: 1}
	wantKinds := map[string]int64{"panic": 1, "error": 3}
	for k, v := range outcomes {
		if v == 0 && wantOutcomes[k] == 0 {
			delete(outcomes, k)
		}
	}
	for k, v := range kinds {
		if v == 0 && wantKinds[k] == 0 {
			delete(kinds, k)
		}
	}
	if !reflect.DeepEqual(outcomes, wantOutcomes) || !reflect.DeepEqual(kinds, wantKinds) {
		t.Fatalf("totals %v %v; want %v %v", outcomes, kinds, wantOutcomes, wantKinds)
	}
}

func recordIDs(rs []wire.BatchRecord) []string {
	var ids []string
	for _, r := range rs {
		ids = append(ids, r.ID)
	}
	return ids
}

// A malformed group in Redis (issue 35: one bad field stopped failures.lua
// half way; the worker sent every group again and a count went 5, 10, 15 on
// successive heartbeats) is replaced, said once, and blocks nothing; past
// keys.MaxFailureGroups, new function names share one group per kind; a
// sample and a stack are cut.
func TestFailureGroupsBounded(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	hash := keys.FailureGroups("rm", f.queue)
	a, b := group("a", 5), group("b", 5)
	f.c.HSet(ctx, hash, b.Key(), `{"count":"lots"}`)
	for round := 1; round <= 3; round++ {
		n, bad, err := counted(f.r.CountFailures(ctx, &broker.CountFailuresParams{Worker: "w1", Groups: []wire.FailureGroup{a, b}}))
		wantBad := int64(0)
		if round == 1 {
			wantBad = 1
		}
		if err != nil || n != 10 || bad != wantBad {
			t.Fatalf("round %d: %d added, %d malformed, %v; want 10, %d", round, n, bad, err, wantBad)
		}
		gs, malformed, err := failuresOf(NewAdmin(f.c, "rm").Failures(ctx, &broker.QueueParams{Queue: f.queue}))
		if err != nil || malformed != 0 || len(gs) != 2 {
			t.Fatalf("round %d: %+v, %d malformed, %v", round, gs, malformed, err)
		}
		for _, x := range gs {
			if x.Count != int64(5*round) {
				t.Fatalf("round %d: group %s counts %d, want %d", round, x.Func, x.Count, 5*round)
			}
		}
	}
	// Unique function names past the cap share one group per kind.
	many := make([]wire.FailureGroup, 0, keys.MaxFailureGroups+500)
	for i := range keys.MaxFailureGroups + 500 {
		many = append(many, group("fn-"+strconv.Itoa(i), 1))
	}
	if n, _, err := counted(f.r.CountFailures(ctx, &broker.CountFailuresParams{Worker: "w1", Groups: many})); err != nil || n != int64(len(many)) {
		t.Fatalf("CountFailures of %d groups: %d, %v", len(many), n, err)
	}
	if n, err := f.c.HLen(ctx, hash).Result(); err != nil || n != keys.MaxFailureGroups+1 {
		t.Fatalf("%d groups in the hash (%v), want the cap and one (other)", n, err)
	}
	gs, _, _ := failuresOf(NewAdmin(f.c, "rm").Failures(ctx, &broker.QueueParams{Queue: f.queue}))
	var other int64
	for _, x := range gs {
		if x.Func == wire.OtherGroup {
			other += x.Count
		}
		if len(x.Sample) > wire.MaxSample || len(x.Stack) > wire.MaxStack {
			t.Fatalf("group %s: sample %d bytes, stack %d", x.Func, len(x.Sample), len(x.Stack))
		}
	}
	if other != 502 {
		t.Fatalf("(other) counts %d, want the 502 failures past the cap", other)
	}
}

// group is a failure group of function fn with n failures, a sample and a
// stack longer than their caps.
func group(fn string, n int64) wire.FailureGroup {
	return wire.FailureGroup{Func: fn, Kind: "error", Fingerprint: "x", Count: n, First: 1, Last: 2,
		Sample: strings.Repeat("m", 10<<10), Stack: strings.Repeat("s", 100<<10), Task: "t"}
}

// Publish works with 100,000 running batches (issue 35: past about 4,000,
// unpack failed with "too many results to unpack", every publish failed,
// and workers recorded the manager's batches as lost), and so does
// recording them lost: in slices, each call short (it was one call, which
// held Redis past its 5 s busy threshold on a loaded machine, and every
// client got BUSY), the history back within its bounds at the end.
func TestPublishManyBatches(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	batches := make(map[string]wire.BatchProgress, 100_000)
	for i := range 100_000 {
		batches["b"+strconv.Itoa(i)] = wire.BatchProgress{Func: "f", Total: 1}
	}
	if _, err := f.r.PublishBatches(ctx, &broker.PublishBatchesParams{Manager: f.mid, Batches: batches, TTL: time.Minute, Due: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if n, err := f.c.HLen(ctx, keys.Batches("rm", f.queue, f.mid)).Result(); err != nil || n != 100_000 {
		t.Fatalf("%d batches published (%v), want 100,000", n, err)
	}
	// Its manager overdue, all of them are recorded as manager lost.
	if _, err := f.r.PublishBatches(ctx, &broker.PublishBatchesParams{Manager: f.mid, Batches: batches, TTL: time.Minute, Due: -time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if n, err := NewAdmin(f.c, "rm").LoseManagers(ctx, &broker.QueueParams{Queue: f.queue}); err != nil || n != 100_000 {
		t.Fatalf("LoseManagers: %d, %v; want 100,000 batches recorded", n, err)
	}
	if n, err := f.c.ZCard(ctx, keys.HistoryIndex("rm", f.queue)).Result(); err != nil || n > keys.DefaultHistory+keys.DefaultHistory/100 {
		t.Fatalf("the history holds %d batches (%v), want at most %d", n, err, keys.DefaultHistory+keys.DefaultHistory/100)
	}
	ended, err := f.c.HGet(ctx, keys.Ended("rm", f.queue), "outcome:manager lost").Int64()
	if err != nil || ended != 100_000 {
		t.Fatalf("%d batches counted manager lost (%v), want 100,000", ended, err)
	}
	if n, err := f.c.Exists(ctx, keys.Batches("rm", f.queue, f.mid), keys.LostBatches("rm", f.queue, f.mid), keys.Losing("rm", f.queue)).Result(); err != nil || n != 0 {
		t.Fatalf("%d of the lost manager's batch keys are left (%v), want none", n, err)
	}
}

// counted returns what CountFailures added and replaced, as the tests read
// it.
func counted(res *broker.CountFailuresResult, err error) (added, malformed int64, _ error) {
	if res == nil {
		return 0, 0, err
	}
	return res.Added, res.Malformed, err
}

// The history counts a pipeline's batches in its stage counts as it writes
// their records: a record that overwrites one (a durable batch taken over,
// a lost manager's batch recorded by the one that came back) takes back
// what the old one counted; a batch that runs a stage's elements again
// counts among its reruns only; and the counts outlive the history's trim.
func TestStageCounts(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	a := NewAdmin(f.c, "rm")
	call := codec.CallInfo{Pipeline: "job1", Stage: "1-2 map"}
	rerun := call
	rerun.Rerun = true
	red := codec.CallInfo{Pipeline: "job1", Stage: "1-2 reduce"}
	recs := [][]wire.BatchRecord{
		{{ID: "m1", Manager: f.mid, Func: "emit", Total: 100, Done: 60, Failed: 0, Outcome: wire.OutcomeManagerLost, Started: 1000, Ended: 2000, Call: call}},
		// m1 again, as the manager that took it over recorded it; a rerun of 20 of its elements
		{{ID: "m1", Manager: f.mid, Func: "emit", Total: 100, Done: 100, Failed: 3, Outcome: wire.OutcomeDone, Started: 1000, Ended: 3000, Call: call},
			{ID: "m2", Manager: f.mid, Func: "emit", Total: 20, Done: 20, Outcome: wire.OutcomeDone, Started: 3500, Ended: 4000, Call: rerun}},
		{{ID: "r1", Manager: f.mid, Func: "emit", Total: 4, Done: 4, Outcome: wire.OutcomeDone, Started: 4000, Ended: 5000, Call: red}},
	}
	for _, rs := range recs {
		if err := f.r.RecordBatches(ctx, &broker.RecordBatchesParams{Manager: f.mid, Records: rs, Limit: 1, Age: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := a.Stages(ctx, &broker.StagesParams{Queue: f.queue, Pipelines: []string{"job1", "none"}})
	if err != nil {
		t.Fatal(err)
	}
	stages := got["job1"]
	slices.SortFunc(stages, func(x, y wire.StageCounts) int { return strings.Compare(x.Stage, y.Stage) })
	want := []wire.StageCounts{
		{Stage: "1-2 map", Func: "emit", Batches: 1, Reruns: 1, Total: 100, Done: 100, Failed: 3, Started: 1000, Ended: 4000, Outcome: wire.OutcomeDone},
		{Stage: "1-2 reduce", Func: "emit", Batches: 1, Total: 4, Done: 4, Started: 4000, Ended: 5000, Outcome: wire.OutcomeDone},
	}
	if !reflect.DeepEqual(stages, want) || len(got["none"]) != 0 {
		t.Fatalf("stage counts %+v (of none: %+v); want %+v", stages, got["none"], want)
	}
	if n, _ := f.c.HLen(ctx, keys.History("rm", f.queue)).Result(); n != 1 {
		t.Fatalf("history hash has %d records; want 1, trimmed", n)
	}
}

// A pipeline's stage counts lost (a FLUSHALL) are put back from what its
// manager counted of the records it wrote (wire.StageCounts.Add, as the
// history counts them); a count Redis holds above the manager's (a record
// of another manager's, or one written since) stays, and a record written
// after the restore adds to it; failed keys are counted apart.
func TestRestoreStages(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	a := NewAdmin(f.c, "rm")
	red := codec.CallInfo{Pipeline: "job2", Stage: "1-2 reduce"}
	recs := []wire.BatchRecord{
		{ID: "h1", Manager: f.mid, Func: "emit", Total: 100, Done: 100, Failed: 7, Outcome: wire.OutcomeFailed, Started: 1000, Ended: 2000, Call: codec.CallInfo{Pipeline: "job2", Stage: "1-2 map"}},
		{ID: "r1", Manager: f.mid, Func: "emit", Total: 4, Done: 4, FailedKeys: 9, Outcome: wire.OutcomeFailed, Started: 2000, Ended: 3000, Call: red},
	}
	if err := f.r.RecordBatches(ctx, &broker.RecordBatchesParams{Manager: f.mid, Records: recs, Limit: 10, Age: time.Hour}); err != nil {
		t.Fatal(err)
	}
	read := func() []wire.StageCounts {
		t.Helper()
		got, err := a.Stages(ctx, &broker.StagesParams{Queue: f.queue, Pipelines: []string{"job2"}})
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(got["job2"], func(x, y wire.StageCounts) int { return strings.Compare(x.Stage, y.Stage) })
		return got["job2"]
	}
	before := read()
	if len(before) != 2 || before[1].FailedKeys != 9 || before[1].Failed != 0 {
		t.Fatalf("stage counts %+v; want the reduce stage's 9 failed keys apart", before)
	}
	var book []wire.StageCounts
	for i := range recs {
		var c wire.StageCounts
		c.Stage = recs[i].Call.Stage
		c.Add(&recs[i])
		book = append(book, c)
	}
	if !reflect.DeepEqual(book, before) {
		t.Fatalf("a manager's counts %+v; want the history's %+v", book, before)
	}
	// Lost, as a FLUSHALL loses it (the package's tests share a server).
	if err := f.c.Del(ctx, keys.Stages("rm", f.queue, "job2")).Err(); err != nil {
		t.Fatal(err)
	}
	// A record written after the loss, before the restore: the
	// manager's counts hold it too.
	late := wire.BatchRecord{ID: "r2", Manager: f.mid, Func: "emit", Total: 4, Done: 4, Outcome: wire.OutcomeDone, Started: 3500, Ended: 4000, Call: red}
	if err := f.r.RecordBatches(ctx, &broker.RecordBatchesParams{Manager: f.mid, Records: []wire.BatchRecord{late}, Limit: 10, Age: time.Hour}); err != nil {
		t.Fatal(err)
	}
	book[1].Add(&late)
	for range 2 { // the second writes nothing
		if err := f.r.RestoreStages(ctx, &broker.RestoreStagesParams{Pipeline: "job2", Stages: book}); err != nil {
			t.Fatal(err)
		}
	}
	if got := read(); !reflect.DeepEqual(got, book) {
		t.Fatalf("stage counts put back %+v; want %+v", got, book)
	}
	more := wire.BatchRecord{ID: "r3", Manager: f.mid, Func: "emit", Total: 4, Done: 4, Outcome: wire.OutcomeDone, Started: 4500, Ended: 5000, Call: red}
	if err := f.r.RecordBatches(ctx, &broker.RecordBatchesParams{Manager: f.mid, Records: []wire.BatchRecord{more}, Limit: 10, Age: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if got := read(); got[1].Batches != 3 || got[1].Total != 12 || got[1].FailedKeys != 9 || got[1].Ended != 5000 {
		t.Fatalf("stage counts %+v after a record more; want it counted on top of what was put back", got)
	}
}
