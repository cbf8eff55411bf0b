package worker_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redmap/redmap/inspect"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
)

// lagWorker starts a worker process of one slot, taking nothing ahead,
// where lagging hangs on negative elements (REDMAP_LAG), ignoring its
// context, with a short abandon grace and at most one
// abandoned call: the first call it counts abandoned makes it exit.
func lagWorker(t *testing.T, e *harness.Env) (p *harness.Proc, metrics string) {
	t.Helper()
	p = harness.Start(t, harness.Child("stuck-worker", []string{"REDMAP_LAG=1"}, "-redis", e.URL, "-queue", e.Queue,
		"-concurrency", "1", "-prefetch", "-1", "-abandon-grace", "200ms", "-max-abandoned", "1",
		"-metrics", "127.0.0.1:0"))
	metrics = p.Expect(t, "metrics ")
	p.Expect(t, "worker ")
	return p, metrics
}

// A backup task's race lost by a call that ignores its context costs the
// worker nothing it counts: the call, cancelled since the copy's result
// won, is left to finish, said at INFO; it is not abandoned (no ERROR, not
// counted toward -max-abandoned, here 1), its slot goes to the next task,
// and the batch's record counts the backup started and won. Twice: the
// worker, whose first losing call still runs, takes the second batch's.
func TestLosingBackupCopyIsNotAbandoned(t *testing.T) {
	e := harness.Setup(t)
	lag, addr := lagWorker(t, e)
	m := e.Manager(t, manager.Options{})
	xs := []int{-1, 1, 2, 3, 4, 5, 6, 7}
	want := []int{-10, 10, 20, 30, 40, 50, 60, 70}
	for round := range 2 {
		batch, err := manager.Submit(within(t, 2*time.Minute), m, lagging, xs, manager.ChunkSize(1))
		if err != nil {
			t.Fatal(err)
		}
		// The lagging worker, alone, takes the first task (its lane is first
		// in, first out) and hangs in it; a quick worker then runs the rest,
		// and the hung task's copy.
		lag.Expect(t, "running -1")
		quick := harness.Start(t, harness.Child("stuck-worker", nil, "-redis", e.URL, "-queue", e.Queue, "-concurrency", "2"))
		quick.Expect(t, "worker ")
		ys, err := batch.Wait(within(t, 2*time.Minute))
		if err != nil || !slices.Equal(ys, want) {
			t.Fatalf("round %d: %v, %v; want %v", round, ys, err, want)
		}
		lag.WaitLog(t, "a losing backup copy ignored its context")
		select {
		case <-lag.Exited():
			t.Fatalf("round %d: the lagging worker exited (%v):\n%s", round, lag.Err(), lag.Tail())
		default:
		}
		if tail := lag.Tail(); strings.Contains(tail, "level=ERROR") {
			t.Fatalf("round %d: the lagging worker logged an error:\n%s", round, tail)
		}
		if n := scrape(t, addr, "redmap_worker_calls_abandoned_total"); n != 0 {
			t.Fatalf("round %d: redmap_worker_calls_abandoned_total = %v, want 0", round, n)
		}
		if n := scrape(t, addr, "redmap_worker_calls_outrun_running"); n != float64(round+1) {
			t.Fatalf("round %d: redmap_worker_calls_outrun_running = %v, want %d", round, n, round+1)
		}
		if err := quick.Stop(t); err != nil {
			t.Fatalf("the quick worker exited with %v", err)
		}

		in, err := inspect.New(e.Client, "")
		if err != nil {
			t.Fatal(err)
		}
		var hist []inspect.Batch
		redistest.Eventually(t, "the batch's record", func() bool { // the manager's history part writes it
			hist, _, err = in.History(within(t, time.Minute), e.Queue, 1)
			return err == nil && len(hist) == 1 && hist[0].ID == batch.ID()
		})
		if bk := hist[0].Backups; bk.Started != 1 || bk.Won != 1 || bk.Wasted != 0 {
			t.Fatalf("round %d: the batch's record counts backups %+v; want 1 started, 1 won, 0 wasted", round, bk)
		}
	}
}

// A call that ignores its context and raced a backup task still counts
// toward -max-abandoned when its batch was cancelled: neither copy lost a
// race. Both the original, on a worker whose limit is 1 (which exits 1),
// and the copy, on another worker, are abandoned and counted.
func TestCancelledRaceIsAbandoned(t *testing.T) {
	e := harness.Setup(t)
	lag, _ := lagWorker(t, e)
	m := e.Manager(t, manager.Options{})
	batch, err := manager.Submit(within(t, 2*time.Minute), m, lagging, []int{-1, 1, 2, 3, 4, 5, 6, 7}, manager.ChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}
	lag.Expect(t, "running -1")
	// The copy hangs too, on the second worker, once it ran the rest.
	copier := harness.Start(t, harness.Child("stuck-worker", []string{"REDMAP_LAG=1"}, "-redis", e.URL, "-queue", e.Queue,
		"-concurrency", "2", "-abandon-grace", "200ms", "-metrics", "127.0.0.1:0"))
	addr := copier.Expect(t, "metrics ")
	copier.Expect(t, "worker ")
	copier.Expect(t, "running -1")
	batch.Cancel()

	lag.WaitLog(t, "a function ignored its context past its bound")
	select {
	case <-lag.Exited():
	case <-time.After(time.Minute):
		t.Fatal("the worker of the original did not exit within a minute of its abandoned call, its limit")
	}
	var ee interface{ ExitCode() int }
	if !errors.As(lag.Err(), &ee) || ee.ExitCode() == 0 {
		t.Fatalf("the worker of the original exited with %v; want a non-zero status", lag.Err())
	}
	copier.WaitLog(t, "a function ignored its context past its bound")
	if n := scrape(t, addr, "redmap_worker_calls_abandoned_total"); n != 1 {
		t.Fatalf("the copy's worker: redmap_worker_calls_abandoned_total = %v, want 1", n)
	}
}
