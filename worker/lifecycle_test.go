package worker_test

import (
	"context"
	"runtime/pprof"
	"strings"
	"testing"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// workerGoroutines returns the stacks of the goroutines running code of
// package worker (the tests' own, in worker_test, aside), whoever's, and
// how many of them carry worker id's profiler label.
func workerGoroutines(t *testing.T, id string) (stacks []string, labelled int) {
	t.Helper()
	var b strings.Builder
	if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
		t.Fatal(err)
	}
	for _, g := range strings.Split(b.String(), "\n\n") {
		if !strings.Contains(g, "github.com/redmap/redmap/worker.") {
			continue
		}
		stacks = append(stacks, g)
		if strings.Contains(g, `"`+worker.ProfileLabel+`":"`+id+`"`) {
			labelled++
		}
	}
	return stacks, labelled
}

// Every goroutine of a worker is a part that the end of Run stops and waits
// for: while it runs they carry its profiler label, and once Run has
// returned none runs, after plain tasks, a reduction and a cancelled
// batch. Not parallel, so that no other test's worker runs beside it.
func TestRunLeavesNoGoroutine(t *testing.T) {
	if g, _ := workerGoroutines(t, ""); len(g) > 0 {
		t.Fatalf("before the test, %d goroutines of package worker run (a test left a worker running):\n%s", len(g), strings.Join(g, "\n\n"))
	}
	e := harness.On(t, redistest.Shared(t))
	square := redmap.Func("lifesquare", func(_ context.Context, x int) (int, error) { return x * x, nil })
	waits := redmap.Func("lifewaits", func(ctx context.Context, _ int) (int, error) { <-ctx.Done(); return 0, ctx.Err() })
	sum := redmap.Reduce("lifesum", func(_ context.Context, a, b int) (int, error) { return a + b, nil })
	w, stop, ran := e.StartWorker(t, worker.Options{Concurrency: 2}, square, waits, sum)
	m := e.Manager(t, manager.Options{})
	ctx := context.Background()
	if _, err := manager.Map(ctx, m, square, make([]int, 500), manager.ChunkSize(10)); err != nil {
		t.Fatalf("Map: %v", err)
	}
	if got, err := manager.MapReduce(ctx, m, square, sum, []int{1, 2, 3}); err != nil || got != 14 {
		t.Fatalf("MapReduce: %d, %v; want 14", got, err)
	}
	cancelled, err := manager.Submit(ctx, m, waits, make([]int, 4), manager.ChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}
	cancelled.Cancel()
	if _, err := cancelled.Wait(ctx); err == nil {
		t.Fatal("a cancelled batch ended without an error")
	}
	if _, labelled := workerGoroutines(t, w.ID()); labelled == 0 {
		t.Fatal("no goroutine carries the running worker's label: the check sees nothing")
	}
	stop()
	if err := <-ran; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if g, _ := workerGoroutines(t, w.ID()); len(g) > 0 {
		t.Fatalf("after Run returned, %d goroutines of package worker still run:\n%s", len(g), strings.Join(g, "\n\n"))
	}
}
