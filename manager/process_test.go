package manager_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/redmap/redmap/examples/squares/tasks"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
)

// squares builds examples/squares once per test binary, for processes: it
// skips the test under go test -short before the build, not after it.
func squares(t *testing.T) string {
	redistest.Slow(t)
	return harness.Build(t, "github.com/redmap/redmap/examples/squares")
}

// startWorkerProc starts a squares worker process on queue of the server at
// url, and reads its id.
func startWorkerProc(t *testing.T, url, queue string, args ...string) *harness.Proc {
	t.Helper()
	cmd := exec.Command(squares(t), append([]string{"worker", "-queue", queue}, args...)...)
	cmd.Env = append(cmd.Environ(), "REDIS_URL="+url)
	p := harness.Start(t, cmd)
	p.Expect(t, "worker ")
	return p
}

// Workers in their own OS processes serve an in-test manager and a manager
// process; on SIGTERM they drain and exit 0.
func TestWorkerProcesses(t *testing.T) {
	b := setup(t)
	url := b.URL
	w1 := startWorkerProc(t, url, b.Queue, "-concurrency", "2")
	w2 := startWorkerProc(t, url, b.Queue, "-concurrency", "2")
	m := b.Manager(t, manager.Options{})
	harness.WaitLive(t, m, w1.ID, w2.ID)

	ys, err := manager.Map(testCtx(t), m, tasks.Square, ints(20_000))
	if err != nil {
		t.Fatal(err)
	}
	for i, y := range ys {
		if y != i*i {
			t.Fatalf("ys[%d] = %d, want %d", i, y, i*i)
		}
	}

	// Each worker takes a private batch and runs all of it.
	for _, w := range []*harness.Proc{w1, w2} {
		ys, err := manager.Map(testCtx(t), m, tasks.Square, ints(100), manager.OnWorker(w.ID))
		if err != nil || ys[99] != 99*99 {
			t.Fatalf("private batch on %s: %v", w.ID, err)
		}
	}

	// A manager process on the same queue.
	cmd := exec.Command(squares(t), "manager", "-queue", b.Queue, "-n", "3001")
	cmd.Env = append(cmd.Environ(), "REDIS_URL="+url)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("manager process: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if got, want := lines[len(lines)-1], "sum 9004500500 elements 3001"; got != want {
		t.Fatalf("manager process printed %q, want %q", got, want)
	}

	for _, w := range []*harness.Proc{w1, w2} {
		if err := w.Stop(t); err != nil {
			t.Fatalf("worker %s exited with %v; logs:\n%s", w.ID, err, w.Tail())
		}
	}
	live, err := m.Workers(testCtx(t))
	if err != nil || len(live) != 0 {
		t.Fatalf("live workers after both stopped: %v, %v", live, err)
	}
}
