package manager_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/inspect"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/redisbroker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/manager"
)

// An operator cancels a durable pipeline while worker processes run its
// head phase, by its durable name or by the id of its running batch, as
// redmap cancel does: Collect returns an error wrapping ErrCancelled that
// names the pipeline; the head's batch ended cancelled before its end; no
// later stage's batch was submitted; nothing is left queued or running;
// and nothing of the pipeline is left in Redis (its record, its
// partitions, its claim, its phases' batches). The same call again runs
// the pipeline from its start, exact.
func TestPipelineDurableCancelledByOperator(t *testing.T) {
	for _, by := range []string{"name", "batch"} {
		t.Run(by, func(t *testing.T) { durableCancelledDuring(t, by) })
	}
}

func durableCancelledDuring(t *testing.T, by string) {
	b := setup(t)
	_, _, m := twoWorkersFor(t, b, manager.Options{Poll: 100 * time.Millisecond})
	in, err := inspect.New(b.Client, "")
	if err != nil {
		t.Fatal(err)
	}
	name := "dcancel-" + by
	docs := letterDocs(4000, 500) // 2 ms each on the workers: seconds of map tasks
	opts := []manager.CallOption{manager.Durable(name), manager.ChunkSize(20), manager.Partitions(8)}
	ch := collectCancelled(t, m, topPipeline(docs, slowTokens), opts...)
	ctx := testCtx(t)
	head := runningHead(t, in, b, func(x inspect.Batch) bool { return x.Call.Pipeline == name })
	if head.Call.Stage != "1-3 map" || head.Durable != name+"/map" {
		t.Fatalf("the running batch is of stage %q, durable batch %q; want the head's, 1-3 map, %q", head.Call.Stage, head.Durable, name+"/map")
	}
	what := name
	if by == "batch" {
		what = head.ID
	}
	pc, err := cancelPipeline(ctx, in, b.Queue, what)
	if err != nil {
		t.Fatal(err)
	}
	if pc.Pipeline != name {
		t.Fatalf("the cancel of %q: %+v; want pipeline %q", what, pc, name)
	}
	collected := <-ch
	if !errors.Is(collected, redmap.ErrCancelled) || !strings.HasPrefix(collected.Error(), "manager: pipeline \""+name+"\" cancelled") {
		t.Fatalf("Collect of the cancelled pipeline: %v; want ErrCancelled, naming it", collected)
	}
	ofIt := pipelineHistory(t, in, b.Queue, name)
	if len(ofIt) != 1 || ofIt[0].ID != head.ID {
		t.Fatalf("the pipeline's batches in the history: %+v; want its head's alone (no later stage submitted)", ofIt)
	}
	cancelled := ofIt[0]
	if r := cancelled; r.Outcome != "cancelled" || r.Done+r.Failed >= r.Total {
		t.Fatalf("the head's record: %s, %d done, %d failed of %d; want it cancelled before its end", r.Outcome, r.Done, r.Failed, r.Total)
	}
	nothingRunsOrWaits(t, in, b)
	nothingOfPipeline(t, b, name, "map")

	// The same call again starts the pipeline from its start: it takes
	// over nothing of the cancelled run (no cancelled phase fails its
	// elements), and gives the sequential program's lines.
	got, err := manager.Collect(testCtx(t), m, topPipeline(docs, slowTokens), opts...)
	if err != nil {
		t.Fatalf("the same call after the cancel: %v", err)
	}
	slices.Sort(got)
	if want := topLines(docs); !slices.Equal(got, want) {
		t.Fatalf("the same call after the cancel:\n%q\nwant\n%q", got, want)
	}
	// Its head's batch has the cancelled one's id (a phase's owner is
	// named after the pipeline), and its record replaced that one's: a
	// batch taken over would keep the start of the call that first
	// submitted it.
	again := pipelineHistory(t, in, b.Queue, name)
	if len(again) < 3 || again[len(again)-1].ID != head.ID {
		t.Fatalf("the history after the second run: %+v; want its head last, under the cancelled head's id, and its reduces", again)
	}
	if h := again[len(again)-1]; h.Call.Stage != "1-3 map" || h.Outcome != "done" || h.Done != len(docs) || !h.Started.After(cancelled.Ended) {
		t.Fatalf("the second run's head: %+v; want all %d documents mapped again, started after the cancelled head ended (%v)", h, len(docs), cancelled.Ended)
	}
	nothingOfPipeline(t, b, name, "map")
}

// An operator cancels a durable pipeline by its name between two of its
// phases, while no batch of it runs: its head phase has ended, and the
// next phase waits for its durable batch's claim, which a holder elsewhere
// has. Collect returns ErrCancelled; no later stage's batch is ever
// submitted, even once the claim is free; and nothing of the pipeline is
// left in Redis.
func TestPipelineDurableCancelledBetweenPhases(t *testing.T) {
	b := setup(t)
	_, _, m := twoWorkersFor(t, b, manager.Options{Poll: 100 * time.Millisecond})
	in, err := inspect.New(b.Client, "")
	if err != nil {
		t.Fatal(err)
	}
	name := "dcancel-between"
	release := holdElsewhere(t, b, name+"/reduce1@0")
	docs := letterDocs(300, 100)
	ch := collectCancelled(t, m, topPipeline(docs, tokens),
		manager.Durable(name), manager.DurableWait(time.Hour), manager.ChunkSize(20), manager.Partitions(8))
	ctx := testCtx(t)
	eventually(t, "the head phase ended, no batch of the pipeline running", func() bool {
		bs, err := in.Batches(ctx, b.Queue)
		if err != nil {
			return false
		}
		for _, x := range bs {
			// The pipeline's own row (its claim) and its next phase's,
			// claimed elsewhere, are listed with no stage.
			if x.Call.Pipeline == name && x.Call.Stage != "" {
				return false
			}
		}
		h := pipelineHistory(t, in, b.Queue, name)
		return len(h) == 1 && h[0].Call.Stage == "1-3 map" && h[0].Outcome == "done"
	})
	pc, err := cancelPipeline(ctx, in, b.Queue, name)
	if err != nil {
		t.Fatal(err)
	}
	if pc.Pipeline != name || len(pc.Running) != 0 {
		t.Fatalf("the cancel: %+v; want pipeline %q, none of its batches running", pc, name)
	}
	collected := <-ch
	if !errors.Is(collected, redmap.ErrCancelled) || !strings.HasPrefix(collected.Error(), "manager: pipeline \""+name+"\" cancelled") {
		t.Fatalf("Collect of the pipeline cancelled between phases: %v; want ErrCancelled, naming it", collected)
	}
	release()
	if h := pipelineHistory(t, in, b.Queue, name); len(h) != 1 {
		t.Fatalf("the pipeline's batches in the history: %+v; want its head's alone (no later stage submitted)", h)
	}
	nothingRunsOrWaits(t, in, b)
	nothingOfPipeline(t, b, name, "map")
}

// holdElsewhere takes the claim of durable batch name for a holder on
// another host, which never runs it nor lets it go until the returned
// release.
func holdElsewhere(t *testing.T, b *harness.Env, name string) (release func()) {
	t.Helper()
	q := redisbroker.New(b.Client, "redmap", b.Queue)
	c := broker.ClaimParams{Owner: id.Durable(name), Name: name, Lease: time.Hour, TTL: time.Hour,
		Holder: wire.Holder{Manager: "elsewhere", Host: "elsewhere.invalid", PID: 1, Since: time.Now().UnixMilli()}}
	got, err := q.Claim(testCtx(t), &c)
	if err != nil || !got.Held {
		t.Fatalf("claiming %q elsewhere: %+v, %v", name, got, err)
	}
	return func() {
		t.Helper()
		c.Lease, c.Fence = 0, got.Record
		if _, err := q.Claim(testCtx(t), &c); err != nil {
			t.Fatalf("releasing %q: %v", name, err)
		}
		// What an operator's cancel left of it (its mark): a holder would
		// have deleted it on reading the cancel.
		b.Client.Del(context.Background(), b.Keys(t, "*:m:"+id.Durable(name)+":*")...)
	}
}

// pipelineHistory returns the batches of pipeline name in queue's history,
// newest first.
func pipelineHistory(t *testing.T, in *inspect.Inspector, queue, name string) []inspect.Batch {
	t.Helper()
	h, _, err := in.History(context.Background(), queue, inspect.HistoryShown)
	if err != nil {
		t.Fatal(err)
	}
	var ofIt []inspect.Batch
	for _, x := range h {
		if x.Call.Pipeline == name {
			ofIt = append(ofIt, x)
		}
	}
	return ofIt
}

// nothingRunsOrWaits fails t unless, eventually, no batch runs, no task is
// queued, and b's two workers are idle.
func nothingRunsOrWaits(t *testing.T, in *inspect.Inspector, b *harness.Env) {
	t.Helper()
	ctx := testCtx(t)
	if bs, err := in.Batches(ctx, b.Queue); err != nil || len(bs) != 0 {
		t.Fatalf("running batches after the cancel: %+v, %v; want none", bs, err)
	}
	eventually(t, "nothing queued, the workers idle", func() bool {
		q, err := in.Queued(ctx, b.Queue)
		if err != nil || q != 0 {
			return false
		}
		ws, err := in.Workers(ctx, b.Queue, time.Now())
		if err != nil || len(ws) != 2 {
			return false
		}
		for _, w := range ws {
			if w.State != "idle" {
				return false
			}
		}
		return true
	})
}

// nothingOfPipeline fails t if Redis holds anything of durable pipeline
// name: its record, its claim, its phases' durable batches, or its
// partitions (but for what a map task running at the cancel stored after
// it, which expires).
func nothingOfPipeline(t *testing.T, b *harness.Env, name string, phases ...string) {
	t.Helper()
	cancelledPartitionsExpire(t, b)
	left := append(ownerKeys(t, b, name+"/pipeline"), b.Keys(t, pipelineRecord(b, name))...)
	for _, p := range phases {
		left = append(left, ownerKeys(t, b, name+"/"+p)...)
	}
	if len(left) != 0 {
		t.Fatalf("the cancelled durable pipeline left %q in Redis", left)
	}
}
