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

// workerGoroutines returns the goroutines running code of package worker
// (the tests' own, in worker_test, aside), whoever's, by goroutine id, each
// with its stack.
func workerGoroutines(t *testing.T) map[string]string {
	t.Helper()
	var b strings.Builder
	if err := pprof.Lookup("goroutine").WriteTo(&b, 2); err != nil {
		t.Fatal(err)
	}
	found := make(map[string]string)
	for _, g := range strings.Split(b.String(), "\n\n") {
		if head, _, ok := strings.Cut(g, " ["); ok && strings.Contains(g, "github.com/redmap/redmap/worker.") {
			found[head] = g
		}
	}
	return found
}

// labelled counts the goroutines carrying worker id's profiler label.
func labelled(t *testing.T, id string) int {
	t.Helper()
	var b strings.Builder
	if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range strings.Split(b.String(), "\n\n") {
		if strings.Contains(g, `"`+worker.ProfileLabel+`":"`+id+`"`) {
			n++
		}
	}
	return n
}

// Every goroutine of a worker is a part that the end of Run stops and waits
// for: while it runs they carry its profiler label, and once Run has
// returned none of those it started runs, after plain tasks, a reduction
// and a cancelled batch. Not parallel, so that no other test starts one
// beside it (what earlier tests' parts left running is told apart by id).
func TestRunLeavesNoGoroutine(t *testing.T) {
	before := workerGoroutines(t)
	e := harness.On(t, redistest.Shared(t))
	square := redmap.Func("lifesquare", func(_ context.Context, x int) (int, error) { return x * x, nil })
	waits := redmap.Func("lifewaits", func(ctx context.Context, _ int) (int, error) { <-ctx.Done(); return 0, ctx.Err() })
	sum := redmap.Reduce("lifesum", func(_ context.Context, a, b int) (int, error) { return a + b, nil })
	w, stop, ran := e.StartWorker(t, worker.Options{Concurrency: 2}, square, waits, sum)
	m := e.Manager(t, manager.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), redistest.WaitLimit(t))
	defer cancel()
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
	started := 0
	for id := range workerGoroutines(t) {
		if _, ok := before[id]; !ok {
			started++
		}
	}
	if started == 0 || labelled(t, w.ID()) == 0 {
		t.Fatal("the running worker started no goroutine of package worker, or none carries its label: the check sees nothing")
	}
	stop()
	if err := <-ran; err != nil {
		t.Fatalf("Run: %v", err)
	}
	var left []string
	for id, g := range workerGoroutines(t) {
		if _, ok := before[id]; !ok {
			left = append(left, g)
		}
	}
	if len(left) > 0 {
		t.Fatalf("after Run returned, %d goroutines it started still run:\n%s", len(left), strings.Join(left, "\n\n"))
	}
}
