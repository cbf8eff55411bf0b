package brokertest

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/id"
)

// testClaim: a durable batch's claim is taken by the first holder and
// refused to another, naming the holder; its holder renews it with the
// record it took; released (lease 0), no record is left, and it is free for
// the next.
func testClaim(t *testing.T, open func(t *testing.T) Harness) {
	h := open(t)
	ctx := context.Background()
	q := h.Queue()
	owner := id.Durable("nightly")
	a, b := wire.Holder{Manager: "ma", Host: "a"}, wire.Holder{Manager: "mb", Host: "b"}
	claim := func(step string, holder wire.Holder, lease time.Duration, fence string, wantHeld bool, wantHolder string) *wire.Claimed {
		t.Helper()
		got, err := q.Claim(ctx, &broker.ClaimParams{Owner: owner, Name: "nightly", Holder: holder, Lease: lease, TTL: time.Hour, Fence: fence})
		if err != nil || got.Held != wantHeld || got.Holder.Manager != wantHolder {
			t.Fatalf("%s: %+v, %v; want held %v by %s", step, got, err, wantHeld, wantHolder)
		}
		return got
	}
	took := claim("a takes the claim", a, time.Minute, "", true, a.Manager)
	if took.Record == "" {
		t.Fatal("a took the claim: no record to renew it with")
	}
	claim("b asks for it", b, time.Minute, "", false, a.Manager)
	claim("a renews it", a, time.Minute, took.Record, true, a.Manager)
	if got, err := q.Claim(ctx, &broker.ClaimParams{Owner: owner, Name: "nightly", Holder: a, TTL: time.Hour, Fence: took.Record}); err != nil || !got.Held || got.Record != "" {
		t.Fatalf("a releases it: %+v, %v; want released (held, no record left)", got, err)
	}
	claim("b takes it once released", b, time.Minute, "", true, b.Manager)
}

// testDurableRecords: a durable batch's sums are added and read back; its
// owner's Resume says what the store has of its task set (count, epoch,
// the tasks outstanding) and Kept its kept results (none yet); a
// pipeline's record is written, read, and deleted.
func testDurableRecords(t *testing.T, open func(t *testing.T) Harness) {
	h := open(t)
	ctx := context.Background()
	q := h.Queue()
	owner := id.Durable("nightly")
	sums := map[string]string{"t1": "s1", "t2": "s2"}
	if err := q.AddSums(ctx, &broker.AddSumsParams{Owner: owner, Sums: sums, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if got, err := q.Sums(ctx, &broker.SumsParams{Owner: owner}); err != nil || !maps.Equal(got, sums) {
		t.Fatalf("Sums: %v, %v; want %v", got, err, sums)
	}

	none, err := q.Resume(ctx, &broker.ResumeParams{Owner: owner, TTL: time.Hour})
	if err != nil || none.Count != 0 || len(none.Outstanding) != 0 || none.Kept != 0 {
		t.Fatalf("Resume of a batch never submitted: %+v, %v; want nothing", none, err)
	}
	var tasks []wire.Task
	var ids []string
	for i := range 3 {
		tid := id.TaskIn(owner, uint64(i+1), 1, 1, 3, 3)
		tasks = append(tasks, wire.Task{ID: tid, Payload: []byte("payload")})
		ids = append(ids, tid)
	}
	lane := wire.Lane{Name: owner + ".1", Calls: h.Lane().Calls}
	if _, err := q.Submit(ctx, &broker.SubmitParams{Manager: owner, Lane: lane, Tasks: tasks, TTL: time.Hour, Expect: wire.Expect{Epoch: "e1"}}); err != nil {
		t.Fatal(err)
	}
	got, err := q.Resume(ctx, &broker.ResumeParams{Owner: owner, TTL: time.Hour})
	if err != nil || got.Count != 3 || got.Epoch != "e1" || got.Kept != 0 || !sameSet(got.Outstanding, ids) {
		t.Fatalf("Resume after a submit of 3: %+v, %v; want count 3, epoch e1, the 3 outstanding", got, err)
	}
	if kept, err := q.Kept(ctx, &broker.KeptParams{Owner: owner, From: 0, N: 10}); err != nil || len(kept) != 0 {
		t.Fatalf("Kept before any result: %q, %v; want none", kept, err)
	}

	durablePipelineRecord(t, q, owner)
}

// durablePipelineRecord: a pipeline's record is written, read, and
// deleted.
func durablePipelineRecord(t *testing.T, q broker.Queue, owner string) {
	ctx := context.Background()
	if rec, err := q.Pipeline(ctx, &broker.PipelineParams{Owner: owner}); err != nil || rec != nil {
		t.Fatalf("Pipeline before a record: %+v, %v; want none", rec, err)
	}
	rec := &wire.PipelineRecord{Sum: "sum", Head: true, Levels: []wire.PipeLevel{}}
	if err := q.RecordPipeline(ctx, &broker.RecordPipelineParams{Owner: owner, Record: rec, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if back, err := q.Pipeline(ctx, &broker.PipelineParams{Owner: owner}); err != nil || back == nil || back.Sum != "sum" || !back.Head {
		t.Fatalf("Pipeline once recorded: %+v, %v; want the record", back, err)
	}
	if err := q.RecordPipeline(ctx, &broker.RecordPipelineParams{Owner: owner, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if back, err := q.Pipeline(ctx, &broker.PipelineParams{Owner: owner}); err != nil || back != nil {
		t.Fatalf("Pipeline once deleted: %+v, %v; want none", back, err)
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// testShardBasics: a shard says its index and name, answers a ping, counts
// what waits; a signature's types are published and read back; a
// manager's keys are renewed and, dropped, its task set is gone.
func testShardBasics(t *testing.T, open func(t *testing.T) Harness) {
	h := open(t)
	ctx := context.Background()
	q, mid := h.Queue(), h.Manager()
	if q.Shard() != 0 || q.Name() != h.Name() {
		t.Fatalf("shard %d named %q; want 0 named %q", q.Shard(), q.Name(), h.Name())
	}
	if err := q.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	h.Add(t, 0, 0)
	if n, err := q.Depth(ctx); err != nil || n != 2 {
		t.Fatalf("Depth: %d, %v; want 2", n, err)
	}
	if names, err := q.ShardNames(ctx); err != nil || len(names) != 0 {
		t.Fatalf("ShardNames of an unsharded queue: %v, %v; want none", names, err)
	}
	if err := q.PublishTypes(ctx, &broker.PublishTypesParams{Sig: "sig", Types: []string{"int", "string"}}); err != nil {
		t.Fatal(err)
	}
	if got, err := q.Types(ctx, &broker.TypesParams{Sig: "sig"}); err != nil || !slices.Equal(got, []string{"int", "string"}) {
		t.Fatalf("Types: %v, %v; want [int string]", got, err)
	}
	if err := q.Renew(ctx, &broker.RenewParams{Manager: mid, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := q.Drop(ctx, &broker.ManagerParams{Manager: mid}); err != nil {
		t.Fatal(err)
	}
	if got, err := q.Submitted(ctx, &broker.ManagerParams{Manager: mid}); err != nil || got.Count != 0 || got.Epoch != "" {
		t.Fatalf("Submitted once dropped: %+v, %v; want nothing", got, err)
	}
}
