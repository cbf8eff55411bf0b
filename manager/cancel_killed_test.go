package manager_test

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/inspect"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// An operator cancels a durable batch right after its holder, a manager
// process, was SIGKILLed: its claim still lives, so the holder is asked,
// and no one will read the ask. The cancel reaches the workers anyway:
// they run nothing more of it (a worker process counts its runs), the call
// that takes it over fails every element with ErrCancelled, and the history
// records it cancelled.
func TestCancelReachesWorkersWhenHolderKilled(t *testing.T) {
	b := setup(t)
	const n = 100_000
	w, dir, in := killedHolder(t, b, "killed", 8, n)
	ctx := testCtx(t)
	jc, err := cancelJob(ctx, in, b.Queue, "killed", false)
	if err != nil || jc.Batches["killed"] != "asked" {
		t.Fatalf("the cancel: %+v, %v; want its dead holder asked (its claim lives)", jc, err)
	}
	if bt, ok := batchOf(t, in, b.Queue, "killed"); ok && bt.Outcome != "cancelled" {
		t.Fatalf("the cancelled batch listed %+v; want cancelled", bt)
	}
	redistest.Eventually(t, "nothing of the batch queued or running", func() bool {
		q, err := in.Queued(ctx, b.Queue)
		if err != nil || q != 0 {
			return false
		}
		ws, err := in.Workers(ctx, b.Queue, time.Now())
		return err == nil && len(ws) == 1 && ws[0].State == "idle"
	})
	if err := w.Stop(t); err != nil {
		t.Fatalf("the worker exited with %v", err)
	}
	ran := 0
	for x, k := range readRuns(t, filepath.Join(dir, "runs")) {
		if k != 1 {
			t.Fatalf("element %d ran %d times", x, k)
		}
		ran += k
	}
	t.Logf("%d of %d elements ran: %d before the kill, the rest in flight at the cancel", ran, n, n/10)
	if ran >= n/2 {
		t.Fatalf("%d of %d elements ran after a cancel at %d; want the workers to stop running it", ran, n, n/10)
	}

	m := b.Manager(t, manager.Options{Shards: 1}) // as the child's
	_, err = manager.Map(ctx, m, countedSquare, span(n), manager.Durable("killed"), manager.DurableWait(time.Minute))
	var be *redmap.BatchError
	if !errors.As(err, &be) || len(be.Failed) != n || !errors.Is(be.Failed[0].Err, redmap.ErrCancelled) {
		t.Fatalf("the call that takes the cancelled batch over: %v; want its %d elements failed with ErrCancelled", err, n)
	}
	h, _, err := in.History(ctx, b.Queue, 1)
	if err != nil || len(h) != 1 || h[0].Outcome != "cancelled" {
		t.Fatalf("the history after the takeover: %+v, %v; want the batch cancelled", h, err)
	}
}

// A durable batch none holds whose tasks have all ended is not cancelled:
// its results wait for the call that takes it over, and the cancel says
// so; with discard it is, and the takeover's elements fail with
// ErrCancelled, recorded as cancelled.
func TestCancelEndedDurableNeedsDiscard(t *testing.T) {
	b := setup(t)
	in, m1 := watched(t, b, manager.Options{})
	xs := span(40)
	if _, err := manager.Submit(testCtx(t), m1, durableSquare, xs, manager.Durable("finished")); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, "the batch listed running", func() bool {
		bt, ok := batchOf(t, in, b.Queue, "finished")
		return ok && bt.Outcome == "running" && bt.Total == len(xs)
	})
	if err := m1.Close(); err != nil {
		t.Fatal(err)
	}
	b.Worker(t, worker.Options{Concurrency: 2}, durableSquare)
	redistest.Eventually(t, "the orphan's tasks all done", func() bool {
		bt, ok := batchOf(t, in, b.Queue, "finished")
		return ok && bt.Outcome == "done"
	})
	ctx := testCtx(t)
	if did, err := cancelDurable(ctx, in, b.Queue, "finished"); err != nil || did != "ended" {
		t.Fatalf("cancel of an ended batch: %q, %v; want ended, nothing done", did, err)
	}
	if jc, err := cancelJob(ctx, in, b.Queue, "finished", false); err != nil || jc.Batches["finished"] != "ended" {
		t.Fatalf("CancelJob of an ended batch: %+v, %v; want ended, nothing done", jc, err)
	}
	if bt, ok := batchOf(t, in, b.Queue, "finished"); !ok || bt.Outcome != "done" {
		t.Fatalf("after the refused cancel: %+v, %v; want the batch still done, its results waiting", bt, ok)
	}
	if jc, err := cancelJob(ctx, in, b.Queue, "finished", true); err != nil || jc.Batches["finished"] != "cancelled" {
		t.Fatalf("CancelJob with discard: %+v, %v; want cancelled", jc, err)
	}
	// Until a call takes it over, it is listed cancelled, and a second
	// cancel says it was.
	if bt, ok := batchOf(t, in, b.Queue, "finished"); ok && bt.Outcome != "cancelled" {
		t.Fatalf("the cancelled batch listed %+v; want cancelled (or gone)", bt)
	}
	if did, err := cancelDurable(ctx, in, b.Queue, "finished"); err != nil || did != "already" {
		t.Fatalf("a second cancel: %q, %v; want already", did, err)
	}
	m2 := b.Manager(t, manager.Options{})
	_, err := manager.Map(ctx, m2, durableSquare, xs, manager.Durable("finished"))
	var be *redmap.BatchError
	if !errors.As(err, &be) || len(be.Failed) != len(xs) || !errors.Is(be.Failed[0].Err, redmap.ErrCancelled) {
		t.Fatalf("the takeover of the discarded batch: %v; want every element failed with ErrCancelled", err)
	}
	h, _, err := in.History(ctx, b.Queue, 1)
	if err != nil || len(h) != 1 || h[0].Outcome != "cancelled" {
		t.Fatalf("the history: %+v, %v; want the takeover recorded cancelled", h, err)
	}
}

// A durable map/reduce by key is cancelled by the name the user gave it:
// every phase of it, and its partitions deleted.
func TestCancelDurableShuffleByName(t *testing.T) {
	b := setup(t)
	w := startChild(t, "worker", childEnv(b, "REDMAP_CONCURRENCY=4")...)
	w.Expect(t, "worker ")
	holder := startChild(t, "manager-durable", "REDMAP_URL="+b.URL, "REDMAP_QUEUE="+b.Queue, "REDMAP_N=20000",
		"REDMAP_DURABLE=wc", "REDMAP_MODE=shuffle")
	holder.Expect(t, "submitted")
	job := id.DurableJob("wc")
	parts := func() []string { return b.Keys(t, "*{"+keys.Glob(b.Queue+keys.PartitionSep+job)+".*}:*") }
	redistest.Eventually(t, "partials stored", func() bool { return len(parts()) > 0 })
	holder.Kill()
	<-holder.Exited()
	in, err := inspect.New(b.Client, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	jc, err := cancelJob(ctx, in, b.Queue, "wc", false)
	if err != nil || jc.Batches["wc/map"] == "" || jc.PartitionKeys == 0 {
		t.Fatalf("cancel by the job's name: %+v, %v; want its map phase cancelled and its partitions deleted", jc, err)
	}
	redistest.Eventually(t, "the worker idle", func() bool {
		ws, err := in.Workers(ctx, b.Queue, time.Now())
		return err == nil && len(ws) == 1 && ws[0].State == "idle"
	})
	// A map task in flight at the cancel may store its partials after it:
	// one key a partition (16) at most, which expire with the job.
	left := parts()
	if len(left) > 16 {
		t.Fatalf("%d keys of the job's partitions left after the cancel (%d deleted): %q", len(left), jc.PartitionKeys, left)
	}
	t.Logf("the cancel: %+v; %d partition keys left once the worker was idle", jc, len(left))
}

// A durable batch whose manager closes before its first Poll (its first
// publish of progress) is listed all the same, orphaned, for operators.
func TestDurableLeftBeforeFirstPollListed(t *testing.T) {
	b := setup(t)
	in, err := inspect.New(b.Client, "")
	if err != nil {
		t.Fatal(err)
	}
	m := b.Manager(t, manager.Options{Poll: time.Minute, NoWorkerTimeout: -1})
	if _, err := manager.Submit(testCtx(t), m, durableSquare, span(30), manager.Durable("early")); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	bt, ok := batchOf(t, in, b.Queue, "early")
	if !ok || bt.Outcome != "orphaned" || bt.Total != 30 {
		t.Fatalf("the durable batch left before its first Poll: %+v, listed %v; want it orphaned, of 30", bt, ok)
	}
}

// cancelJob is an operator's inspect.Cancel of durable batch or job name:
// what it did to each of its batches.
func cancelJob(ctx context.Context, in *inspect.Inspector, queue, name string, discard bool) (inspect.JobCancel, error) {
	c, err := in.Cancel(ctx, queue, name, discard)
	if c.Job == nil {
		return inspect.JobCancel{}, err
	}
	return *c.Job, err
}

// cancelDurable is an operator's inspect.Cancel of durable batch name:
// what it did to that batch ("asked", "cancelled", "already", "ended").
func cancelDurable(ctx context.Context, in *inspect.Inspector, queue, name string) (string, error) {
	jc, err := cancelJob(ctx, in, queue, name, false)
	return jc.Batches[name], err
}

// cancelPipeline is an operator's inspect.Cancel of a pipeline, by its
// name or a batch of it.
func cancelPipeline(ctx context.Context, in *inspect.Inspector, queue, target string) (inspect.PipelineCancel, error) {
	c, err := in.Cancel(ctx, queue, target, false)
	if c.Pipeline == nil {
		return inspect.PipelineCancel{}, err
	}
	return *c.Pipeline, err
}

// killedHolder starts a worker process of concurrency slots, counting its
// runs in dir/runs, and a manager process running durable batch name of n
// elements, which it SIGKILLs once a tenth of its results came.
func killedHolder(t *testing.T, b *harness.Env, name string, concurrency, n int) (w *harness.Proc, dir string, in *inspect.Inspector) {
	t.Helper()
	dir = t.TempDir()
	w = startChild(t, "worker", childEnv(b, "REDMAP_CONCURRENCY="+strconv.Itoa(concurrency), "REDMAP_RUNS_FILE="+filepath.Join(dir, "runs"))...)
	w.Expect(t, "worker ")
	holder := startChild(t, "manager-durable", "REDMAP_URL="+b.URL, "REDMAP_QUEUE="+b.Queue, "REDMAP_N="+strconv.Itoa(n), "REDMAP_DURABLE="+name)
	holder.Expect(t, "results "+strconv.Itoa(n/10))
	holder.Kill()
	<-holder.Exited()
	in, err := inspect.New(b.Client, "")
	if err != nil {
		t.Fatal(err)
	}
	return w, dir, in
}
