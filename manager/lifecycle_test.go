package manager_test

import (
	"encoding/json"
	"runtime/pprof"
	"strings"
	"testing"

	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// goroutineProfile returns the process's goroutines, one entry each (debug
// 2: every goroutine with its stack) or per stack and labels (debug 1).
func goroutineProfile(t *testing.T, debug int) []string {
	t.Helper()
	var b strings.Builder
	if err := pprof.Lookup("goroutine").WriteTo(&b, debug); err != nil {
		t.Fatal(err)
	}
	return strings.Split(b.String(), "\n\n")
}

// managerGoroutines returns the stacks of the goroutines running code of
// package manager (the test's own, in manager_test, aside), whoever's.
func managerGoroutines(t *testing.T) []string {
	t.Helper()
	var found []string
	for _, g := range goroutineProfile(t, 2) {
		if strings.Contains(g, "github.com/redmap/redmap/manager.") {
			found = append(found, g)
		}
	}
	return found
}

// goroutinesOf returns the stacks of the goroutines running redmap's code
// under manager mid's profiler label (manager.ProfileLabel: mid, or
// mid/<name> for its durable batches).
func goroutinesOf(t *testing.T, mid string) []string {
	t.Helper()
	var found []string
	for _, g := range goroutineProfile(t, 1) {
		_, labels, ok := strings.Cut(g, "# labels: ")
		if !ok || !strings.Contains(g, "github.com/redmap/redmap/") {
			continue
		}
		labels, _, _ = strings.Cut(labels, "\n")
		var l map[string]string
		if err := json.Unmarshal([]byte(labels), &l); err != nil {
			t.Fatalf("labels %q: %v", labels, err)
		}
		if v := l[manager.ProfileLabel]; v == mid || strings.HasPrefix(v, mid+"/") {
			found = append(found, g)
		}
	}
	return found
}

// Every goroutine of a manager is a part its Close stops and waits for:
// once Close has returned, none runs, after plain, by-key and durable
// batches (the by-key job's renewal, a durable owner's settling); and
// they carry its profiler label. Not parallel, so that no other test's
// manager runs beside it: no goroutine of package manager may run at all.
func TestCloseLeavesNoGoroutine(t *testing.T) {
	if g := managerGoroutines(t); len(g) > 0 {
		t.Fatalf("before the test, %d goroutines of package manager run (a test left a manager open):\n%s", len(g), strings.Join(g, "\n\n"))
	}
	var b *harness.Env
	if cl := redistest.SharedCluster(); cl != nil {
		b = &harness.Env{Client: cl.Client(t), URL: cl.URL(), Queue: redistest.Queue(t)}
	} else {
		b = harness.On(t, redistest.Shared(t))
	}
	b.Worker(t, worker.Options{Concurrency: 2}, durableSquare, words, sum)
	m := b.Manager(t, manager.Options{}) // its cleanup closes it again: a no-op
	ctx := testCtx(t)
	if _, err := manager.Map(ctx, m, durableSquare, span(50)); err != nil {
		t.Fatalf("Map: %v", err)
	}
	if _, err := manager.ReduceByKey(ctx, m, words, sum, documents(200, 50)); err != nil {
		t.Fatalf("ReduceByKey: %v", err)
	}
	if _, err := manager.Map(ctx, m, durableSquare, span(50), manager.Durable(b.Queue+"-lifecycle")); err != nil {
		t.Fatalf("durable Map: %v", err)
	}
	if len(goroutinesOf(t, m.ID())) == 0 {
		t.Fatal("no goroutine carries the open manager's label: the check sees nothing")
	}
	if err := m.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if g := managerGoroutines(t); len(g) > 0 {
		t.Fatalf("after Close, %d goroutines of package manager still run:\n%s", len(g), strings.Join(g, "\n\n"))
	}
}
