package brokertest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/id"
)

// The operators' side of the contract (broker.Operator), as cmd/redmap and
// the dashboard use it: each case acts through the queue as a manager or a
// worker does, and checks what an operator reads and does.

// testOperatorQueue: an operator finds the queue (indexed or scanned), its
// shards, its live worker, the tasks waiting; draining a worker is said in
// its next heartbeat; a purge drops what waits.
func testOperatorQueue(t *testing.T, open func(t *testing.T) Harness) {
	h := open(t)
	ctx := context.Background()
	op, name := h.Operator(), h.Name()
	qp := &broker.QueueParams{Queue: name}
	if err := op.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if now, err := op.Now(ctx); err != nil || now <= 0 {
		t.Fatalf("Now: %d, %v", now, err)
	}
	h.Add(t, 0, 0, 0)
	if _, err := h.Queue().Heartbeat(ctx, &broker.HeartbeatParams{Worker: wid, Lease: time.Minute, Info: &wire.WorkerInfo{Host: "here"}}); err != nil {
		t.Fatal(err)
	}
	if qs, err := op.ScanQueues(ctx); err != nil || !slices.Contains(qs, name) {
		t.Fatalf("ScanQueues: %v, %v; want %s among them", qs, err, name)
	}
	if err := op.IndexQueues(ctx, &broker.IndexQueuesParams{Queues: []string{name}}); err != nil {
		t.Fatal(err)
	}
	if qs, err := op.Queues(ctx); err != nil || !slices.Contains(qs, name) {
		t.Fatalf("Queues: %v, %v; want %s among them", qs, err, name)
	}
	if shards, err := op.Shards(ctx, qp); err != nil || !slices.Equal(shards, []string{name}) {
		t.Fatalf("Shards: %v, %v; want [%s]", shards, err, name)
	}
	operatorWorkersAndPurge(t, h, op, name)
}

// operatorWorkersAndPurge: the queue's live worker and the tasks waiting
// are read; then operatorDrainAndPurge.
func operatorWorkersAndPurge(t *testing.T, h Harness, op broker.Operator, name string) {
	ctx := context.Background()
	qp := &broker.QueueParams{Queue: name}
	ws, err := op.Workers(ctx, qp)
	if err != nil || len(ws) != 1 || ws[0].ID != wid || ws[0].Info.Host != "here" {
		t.Fatalf("Workers: %+v, %v; want %s on here", ws, err, wid)
	}
	if n, err := op.Depth(ctx, qp); err != nil || n != 3 {
		t.Fatalf("Depth: %d, %v; want 3", n, err)
	}
	if n, err := op.Queued(ctx, qp); err != nil || n != 3 {
		t.Fatalf("Queued: %d, %v; want 3", n, err)
	}
	if b, err := op.Backlog(ctx, qp); err != nil || b.Tasks != 3 || b.Oldest.IsZero() {
		t.Fatalf("Backlog: %+v, %v; want 3 tasks, the oldest dated", b, err)
	}
	operatorDrainAndPurge(t, h, op, name)
}

// operatorDrainAndPurge: a drain is said in the worker's next heartbeat;
// a purge drops what waits.
func operatorDrainAndPurge(t *testing.T, h Harness, op broker.Operator, name string) {
	ctx := context.Background()
	qp := &broker.QueueParams{Queue: name}
	if err := op.Drain(ctx, &broker.DrainParams{Queue: name, Worker: wid}); err != nil {
		t.Fatal(err)
	}
	if beat, err := h.Queue().Heartbeat(ctx, &broker.HeartbeatParams{Worker: wid, Lease: time.Minute}); err != nil || !beat.Drain {
		t.Fatalf("heartbeat after a drain: %+v, %v; want drain", beat, err)
	}
	if _, err := h.Queue().Retire(ctx, &broker.RetireParams{Worker: wid}); err != nil {
		t.Fatal(err)
	}
	if gone, err := op.Gone(ctx, &broker.GoneParams{Queue: name}); err != nil || len(gone) != 1 || gone[0].ID != wid {
		t.Fatalf("Gone after the retire: %+v, %v; want %s", gone, err, wid)
	}
	purged, err := op.Purge(ctx, qp)
	if err != nil || purged.Dropped != 3 {
		t.Fatalf("Purge: %+v, %v; want 3 dropped", purged, err)
	}
	if n, err := op.Depth(ctx, qp); err != nil || n != 0 {
		t.Fatalf("Depth after the purge: %d, %v; want 0", n, err)
	}
}

// testOperatorBatches: a manager's published batch is listed, and an
// operator's cancel of it comes back with the manager's next publish; an
// ended batch is in the history, counted by outcome; failure groups a
// worker counted are listed.
func testOperatorBatches(t *testing.T, open func(t *testing.T) Harness) {
	h := open(t)
	ctx := context.Background()
	op, name, q, mid := h.Operator(), h.Name(), h.Queue(), h.Manager()
	qp := &broker.QueueParams{Queue: name}
	publish := func() []string {
		t.Helper()
		cancel, err := q.PublishBatches(ctx, &broker.PublishBatchesParams{Manager: mid, TTL: time.Minute, Due: time.Second,
			Batches: map[string]wire.BatchProgress{"b1": {Func: "f", Total: 10, Done: 4, Started: time.Now()}}})
		if err != nil {
			t.Fatal(err)
		}
		return cancel
	}
	if cancel := publish(); len(cancel) != 0 {
		t.Fatalf("first publish: cancel %v; want none", cancel)
	}
	bs, err := op.Batches(ctx, qp)
	if err != nil || len(bs) != 1 || bs[0].ID != "b1" || bs[0].Manager != mid || bs[0].Progress.Done != 4 {
		t.Fatalf("Batches: %+v, %v; want b1 of %s, 4 done", bs, err, mid)
	}
	if err := op.CancelBatch(ctx, &broker.CancelBatchParams{Queue: name, Manager: mid, Batch: "b1"}); err != nil {
		t.Fatal(err)
	}
	if cancel := publish(); !slices.Equal(cancel, []string{"b1"}) {
		t.Fatalf("publish after the operator's cancel: %v; want [b1]", cancel)
	}

	operatorEnded(t, op, q, name, mid)
}

// operatorEnded: an ended batch is in the history, counted by outcome,
// its failed elements listed; failure groups a worker counted are listed.
func operatorEnded(t *testing.T, op broker.Operator, q broker.Queue, name, mid string) {
	ctx := context.Background()
	qp := &broker.QueueParams{Queue: name}
	rec := wire.BatchRecord{ID: "b1", Manager: mid, Func: "f", Total: 10, Done: 10, Failed: 1, FailedBy: map[string]int{"panic": 1}, Outcome: "failed", Started: time.Now().UnixMilli()}
	if err := q.RecordBatches(ctx, &broker.RecordBatchesParams{Manager: mid, Records: []wire.BatchRecord{rec}, Limit: 100, Age: time.Hour, Ended: 10}); err != nil {
		t.Fatal(err)
	}
	hist, err := op.History(ctx, &broker.HistoryParams{Queue: name})
	if err != nil || len(hist.Records) != 1 || hist.Records[0].ID != "b1" || hist.Records[0].Outcome != "failed" {
		t.Fatalf("History: %+v, %v; want b1, failed", hist, err)
	}
	if in, err := op.InHistory(ctx, &broker.InHistoryParams{Queue: name, IDs: []string{"b1", "b2"}}); err != nil || !in["b1"] || in["b2"] {
		t.Fatalf("InHistory: %v, %v; want b1 only", in, err)
	}
	if ended, err := op.Ended(ctx, qp); err != nil || ended.Outcomes["failed"] != 1 {
		t.Fatalf("Ended: %+v, %v; want one failed batch", ended, err)
	}
	fails := []wire.FailedElement{{Index: 3, Kind: "panic", Error: "boom", Attempts: 1}}
	if err := q.RecordFailed(ctx, &broker.RecordFailedParams{Batch: "b1", Failed: fails, Age: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if got, err := op.FailedElements(ctx, &broker.FailedElementsParams{Queue: name, Batch: "b1"}); err != nil || len(got.Elements.Elements) != 1 || got.Elements.Elements[0].Index != 3 {
		t.Fatalf("FailedElements: %+v, %v; want element 3", got, err)
	}

	group := wire.FailureGroup{Func: "f", Kind: "panic", Fingerprint: "fp", Count: 2, First: time.Now().UnixMilli(), Last: time.Now().UnixMilli(), Sample: "boom", Task: "t1"}
	if added, err := q.CountFailures(ctx, &broker.CountFailuresParams{Worker: wid, Groups: []wire.FailureGroup{group}}); err != nil || added.Added != 2 {
		t.Fatalf("CountFailures: %+v, %v; want 2 added", added, err)
	}
	if got, err := op.Failures(ctx, qp); err != nil || len(got.Groups) != 1 || got.Groups[0].Count != 2 {
		t.Fatalf("Failures: %+v, %v; want one group of 2", got, err)
	}
}

// testOperatorControls: a pause is read back and undone; an operator's
// limit is in force over the code's and, cleared, gives way to it.
func testOperatorControls(t *testing.T, open func(t *testing.T) Harness) {
	h := open(t)
	ctx := context.Background()
	op, name, q := h.Operator(), h.Name(), h.Queue()
	qp := &broker.QueueParams{Queue: name}
	if p, err := op.Paused(ctx, qp); err != nil || p != nil {
		t.Fatalf("Paused before a pause: %+v, %v; want nil", p, err)
	}
	if running, err := op.Pause(ctx, &broker.PauseParams{Queue: name, By: "ops"}); err != nil || !running {
		t.Fatalf("Pause: %v, %v; want it was running", running, err)
	}
	if running, err := op.Pause(ctx, &broker.PauseParams{Queue: name, By: "ops"}); err != nil || running {
		t.Fatalf("Pause again: %v, %v; want it was paused", running, err)
	}
	if p, err := op.Paused(ctx, qp); err != nil || p == nil || p.By != "ops" || p.Since <= 0 {
		t.Fatalf("Paused: %+v, %v; want by ops, dated", p, err)
	}
	if un, err := op.Resume(ctx, qp); err != nil || !un.Paused {
		t.Fatalf("Resume: %+v, %v; want it was paused", un, err)
	}
	if p, err := op.Paused(ctx, qp); err != nil || p != nil {
		t.Fatalf("Paused after the resume: %+v, %v; want nil", p, err)
	}

	operatorLimits(t, op, q, name)
}

// operatorLimits: an operator's limit is in force over the code's and,
// cleared, gives way to it.
func operatorLimits(t *testing.T, op broker.Operator, q broker.Queue, name string) {
	ctx := context.Background()
	qp := &broker.QueueParams{Queue: name}
	now := time.Now()
	code := wire.NewLimitRecord(10, time.Second, 0, 4, "manager m1", now)
	if got, err := q.DeclareLimit(ctx, &broker.DeclareLimitParams{Func: "f", Record: code}); err != nil || got.Limit.Concurrency != 4 {
		t.Fatalf("DeclareLimit: %+v, %v; want concurrency 4", got, err)
	}
	ops := wire.NewLimitRecord(1, time.Second, 0, 2, "operator on here", now)
	if got, err := op.SetLimit(ctx, &broker.SetLimitParams{Queue: name, Func: "f", Record: ops}); err != nil || got.Limit.Concurrency != 2 {
		t.Fatalf("SetLimit: %+v, %v; want concurrency 2 in force", got, err)
	}
	if got, err := q.ReadLimit(ctx, &broker.ReadLimitParams{Func: "f"}); err != nil || got.Limit.Concurrency != 2 || got.From != wire.LimitFromOperator {
		t.Fatalf("ReadLimit: %+v, %v; want the operator's", got, err)
	}
	ls, err := op.Limits(ctx, qp)
	if err != nil || len(ls) != 1 || ls[0].Func != "f" || ls[0].Source != wire.LimitFromOperator || ls[0].Code == nil {
		t.Fatalf("Limits: %+v, %v; want f's, the operator's in force, the code's beside it", ls, err)
	}
	if got, err := op.ClearLimit(ctx, &broker.ClearLimitParams{Queue: name, Func: "f"}); err != nil || got.Limit.Concurrency != 4 || got.From != wire.LimitFromCode {
		t.Fatalf("ClearLimit: %+v, %v; want the code's back in force", got, err)
	}
}

// testOperatorDurable: a durable batch claimed is listed by name, held,
// its tasks outstanding; an operator's cancel asks its holder and marks it
// cancelled, which its states and its owner's next Resume say; a cancel
// again finds it cancelled already.
func testOperatorDurable(t *testing.T, open func(t *testing.T) Harness) {
	h := open(t)
	ctx := context.Background()
	op, name, q := h.Operator(), h.Name(), h.Queue()
	owner := id.Durable("nightly")
	holder := wire.Holder{Manager: "ma", Host: "a"}
	took, err := q.Claim(ctx, &broker.ClaimParams{Owner: owner, Name: "nightly", Holder: holder, Lease: time.Minute, TTL: time.Hour})
	if err != nil || !took.Held {
		t.Fatalf("claim: %+v, %v", took, err)
	}
	tid := id.TaskIn(owner, 1, 1, 1, 3, 3)
	lane := wire.Lane{Name: owner + ".1", Calls: h.Lane().Calls}
	if _, err := q.Submit(ctx, &broker.SubmitParams{Manager: owner, Lane: lane, Tasks: []wire.Task{{ID: tid, Payload: []byte("p")}}, TTL: time.Hour, Expect: wire.Expect{Epoch: "e1"}}); err != nil {
		t.Fatal(err)
	}
	if names, err := op.DurableNames(ctx, &broker.QueueParams{Queue: name}); err != nil || names[owner] != "nightly" {
		t.Fatalf("DurableNames: %v, %v; want nightly as %s", names, err, owner)
	}
	states, err := op.DurableStates(ctx, &broker.DurableStatesParams{Queue: name, Owners: []string{owner}})
	if err != nil || !states.Held[owner] || states.Outstanding[owner] != 1 || states.Cancelled[owner] {
		t.Fatalf("DurableStates: %+v, %v; want held, 1 outstanding, not cancelled", states, err)
	}
	if got, err := op.CancelDurable(ctx, &broker.CancelDurableParams{Queue: name, Name: "nightly", Reason: "ops"}); err != nil || got != "asked" {
		t.Fatalf("CancelDurable of a held batch: %q, %v; want asked", got, err)
	}
	if _, err := q.Claim(ctx, &broker.ClaimParams{Owner: owner, Name: "nightly", Holder: holder, Lease: 0, TTL: time.Hour, Fence: took.Record}); err != nil {
		t.Fatal(err)
	}
	if states, err := op.DurableStates(ctx, &broker.DurableStatesParams{Queue: name, Owners: []string{owner}}); err != nil || states.Held[owner] || !states.Cancelled[owner] {
		t.Fatalf("DurableStates once cancelled and released: %+v, %v; want not held, cancelled", states, err)
	}
	if got, err := op.CancelOwner(ctx, &broker.CancelOwnerParams{Queue: name, Owner: owner, Reason: "ops"}); err != nil || got != "already" {
		t.Fatalf("CancelOwner once cancelled: %q, %v; want already", got, err)
	}
	if res, err := q.Resume(ctx, &broker.ResumeParams{Owner: owner, TTL: time.Hour}); err != nil || res.Cancelled == "" {
		t.Fatalf("Resume of the cancelled batch: %+v, %v; want it cancelled", res, err)
	}
}
