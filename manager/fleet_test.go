package manager_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/inspect"
	"github.com/redmap/redmap/internal/harness"
	v1 "github.com/redmap/redmap/internal/typetest/v1/tasks"
	v2 "github.com/redmap/redmap/internal/typetest/v2/tasks"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// sleepy squares x after a millisecond: a task of measurable length.
var sleepy = squareAfter("sleepy", time.Millisecond)

// A small batch submitted beside a large one of the same priority is not
// queued behind it: workers share themselves between the two, so the small
// one ends while most of the large one still waits. (First come, first
// served would run every task of the large one first.)
func TestFairShareBesideABigBatch(t *testing.T) {
	b := setup(t)
	b.Worker(t, worker.Options{Concurrency: 2, Prefetch: 2}, sleepy)
	b.Worker(t, worker.Options{Concurrency: 2, Prefetch: 2}, sleepy)
	big := b.Manager(t, manager.Options{})
	small := b.Manager(t, manager.Options{})
	large, err := manager.Submit(testCtx(t), big, sleepy, ints(3000), manager.ChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the large batch under way", func() bool { return large.Progress().Done > 0 })
	for range 5 {
		ys, err := manager.Map(testCtx(t), small, sleepy, ints(8), manager.ChunkSize(1))
		if err != nil || ys[7] != 49 {
			t.Fatalf("small Map: %v, %v", ys, err)
		}
	}
	if p := large.Progress(); p.Done > p.Total/2 {
		t.Fatalf("the large batch had %d of %d elements done when five small Maps beside it ended: they waited behind it", p.Done, p.Total)
	}
	if _, err := large.Wait(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}

// A mixed fleet (a rolling deploy: workers of two builds of the user's
// tasks, whose tasks.Doc differ) runs each batch on the workers of its own
// build only: nothing fails, and no worker takes a task it cannot run.
func TestMixedFleetRunsEachOnItsMatch(t *testing.T) {
	b := setup(t)
	w1 := b.Worker(t, worker.Options{Concurrency: 2}, v1.Count)
	w2 := b.Worker(t, worker.Options{Concurrency: 2}, v2.Count)
	m1 := b.Manager(t, manager.Options{})
	m2 := b.Manager(t, manager.Options{})
	docs1 := make([]v1.Doc, 2000)
	docs2 := make([]v2.Doc, 2000)
	for i := range docs1 {
		docs1[i] = v1.Doc{ID: fmt.Sprint(i), Text: strings.Repeat("w ", i%7)}
		docs2[i] = v2.Doc{ID: fmt.Sprint(i), Body: strings.Repeat("w ", i%5)}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		out, err := manager.Map(testCtx(t), m1, v1.Count, docs1, manager.ChunkSize(10))
		for i, o := range out {
			if err != nil || o.ID != fmt.Sprint(i) || o.Words != i%7 {
				t.Errorf("v1 element %d: %+v, %v", i, o, err)
				return
			}
		}
	})
	wg.Go(func() {
		out, err := manager.Map(testCtx(t), m2, v2.Count, docs2, manager.ChunkSize(10))
		for i, o := range out {
			if err != nil || o.ID != fmt.Sprint(i) || o.Words != i%5 {
				t.Errorf("v2 element %d: %+v, %v", i, o, err)
				return
			}
		}
	})
	wg.Wait()
	if s1, s2 := w1.Stats(), w2.Stats(); s1.Failed != 0 || s2.Failed != 0 || s1.Taken != 200 || s2.Taken != 200 {
		t.Fatalf("worker stats v1 %+v, v2 %+v: want each to take its own 200 tasks and fail none", s1, s2)
	}
}

// A batch only workers of another build could run waits, says why (the
// field that differs) in its progress and the log, and fails with
// ErrNoWorker and ErrTypeMismatch after NoWorkerTimeout; one of a function
// no live worker registered fails with ErrNoWorker and ErrUnknownFunc.
func TestBatchOnlyMismatchedWorkersCouldRun(t *testing.T) {
	b := setup(t)
	b.Worker(t, worker.Options{}, v2.Count)
	logs := &logRecorder{}
	m := b.Manager(t, manager.Options{Poll: 50 * time.Millisecond, NoWorkerTimeout: 500 * time.Millisecond, Logger: slog.New(logs)})
	batch, err := manager.Submit(testCtx(t), m, v1.Count, []v1.Doc{{ID: "a", Text: "two words"}})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the batch says why it waits", func() bool {
		return strings.Contains(batch.Progress().Waiting, "the manager has In.Text (string), the worker does not")
	})
	_, err = batch.Wait(testCtx(t))
	if !errors.Is(err, redmap.ErrNoWorker) || !errors.Is(err, redmap.ErrTypeMismatch) || !strings.Contains(err.Error(), "In.Text") {
		t.Fatalf("got %v; want ErrNoWorker and ErrTypeMismatch naming In.Text", err)
	}
	if !logs.logged("a batch waits") {
		t.Fatalf("no warning that the batch waits; logged %q", logs.above(slog.LevelDebug))
	}
	cube := redmap.Func("cube", func(_ context.Context, x int) (int, error) { return x * x * x, nil })
	_, err = manager.Map(testCtx(t), m, cube, ints(3))
	if !errors.Is(err, redmap.ErrNoWorker) || !errors.Is(err, redmap.ErrUnknownFunc) || !strings.Contains(err.Error(), `"cube"`) {
		t.Fatalf("got %v; want ErrNoWorker and ErrUnknownFunc naming cube", err)
	}
}

// A rolling deploy with real processes: a batch of 20,000 elements runs on
// two workers of build v1; two workers of build v2 (whose tasks.Doc has
// other fields) start and a v2 manager submits its own batch; the v1
// workers are drained one by one, the second once the v1 batch is done (the
// order README gives: new workers, then managers, then drain the old).
// Both batches are exact, and nothing failed.
func TestRollingDeploy(t *testing.T) {
	b := setup(t)
	in, err := inspect.New(b.Client, "")
	if err != nil {
		t.Fatal(err)
	}
	start := func(types string) *harness.Proc {
		p := harness.Start(t, harness.Child("worker", []string{"REDMAP_URL=" + b.URL, "REDMAP_QUEUE=" + b.Queue, "REDMAP_TYPES=" + types, "REDMAP_CONCURRENCY=2"}))
		p.Expect(t, "worker ")
		return p
	}
	old := []*harness.Proc{start("v1"), start("v1")}
	m1 := b.Manager(t, manager.Options{})
	harness.WaitLive(t, m1, old[0].ID, old[1].ID)
	docs1 := make([]v1.Doc, 20_000)
	for i := range docs1 {
		docs1[i] = v1.Doc{ID: fmt.Sprint(i), Text: strings.Repeat("w ", i%7)}
	}
	batch1, err := manager.Submit(testCtx(t), m1, v1.Count, docs1)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the v1 batch under way", func() bool { return batch1.Progress().Done > 2000 })
	fresh := []*harness.Proc{start("v2"), start("v2")}
	m2 := b.Manager(t, manager.Options{})
	harness.WaitLive(t, m2, fresh[0].ID, fresh[1].ID)
	docs2 := make([]v2.Doc, 5000)
	for i := range docs2 {
		docs2[i] = v2.Doc{ID: fmt.Sprint(i), Body: strings.Repeat("w ", i%5)}
	}
	batch2, err := manager.Submit(testCtx(t), m2, v2.Count, docs2)
	if err != nil {
		t.Fatal(err)
	}
	drain := func(p *harness.Proc) {
		if err := in.Drain(testCtx(t), b.Queue, p.ID); err != nil {
			t.Fatal(err)
		}
		<-p.Exited()
		if p.Err() != nil {
			t.Fatalf("drained worker %s exited with %v; logs:\n%s", p.ID, p.Err(), p.Tail())
		}
	}
	drain(old[0])
	out1, err := batch1.Wait(testCtx(t))
	if err != nil {
		t.Fatalf("v1 batch: %v", err)
	}
	drain(old[1])
	out2, err := batch2.Wait(testCtx(t))
	if err != nil {
		t.Fatalf("v2 batch: %v", err)
	}
	for i, o := range out1 {
		if o.ID != fmt.Sprint(i) || o.Words != i%7 {
			t.Fatalf("v1 element %d: %+v", i, o)
		}
	}
	for i, o := range out2 {
		if o.ID != fmt.Sprint(i) || o.Words != i%5 {
			t.Fatalf("v2 element %d: %+v", i, o)
		}
	}
	t.Logf("20,000 v1 and 5,000 v2 elements exact across the deploy; the v1 workers drained one by one")
}
