package worker_test

import (
	"context"
	"errors"
	"os"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

func TestMain(m *testing.M) { runChild(); redistest.Main(m) }

// Stopping a worker stops it taking tasks, but Run returns only after the
// tasks it holds have finished and their results are delivered.
func TestRunDrainsOnStop(t *testing.T) {
	e := harness.Setup(t)
	rdb, queue := e.Client, e.Queue

	started := make(chan int, 16)
	release := make(chan struct{})
	slow := redmap.Func("slow", func(_ context.Context, x int) (int, error) {
		started <- x
		<-release
		return x + 1, nil
	})
	w, stop, ran := e.StartWorker(t, worker.Options{Concurrency: 2}, slow)
	m := e.Manager(t, manager.Options{Shards: 1}) // the test reads shard 0's public list
	tctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	batch, err := manager.Submit(tctx, m, slow, []int{10, 20, 30}, manager.ChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}
	<-started
	<-started // both slots busy; the third task stays queued
	stop()
	select {
	case err := <-ran:
		t.Fatalf("Run returned (%v) while two tasks were still running", err)
	default:
	}
	if err := w.Register(slow); err == nil {
		t.Error("Handle after Run: want an error")
	}
	if err := w.Run(context.Background()); err == nil {
		t.Error("second Run: want an error")
	}
	close(release)
	if err := <-ran; err != nil {
		t.Fatalf("Run: %v", err)
	}

	// The two that ran were delivered; the third is still queued for another
	// worker, and this one has deregistered.
	got := 0
	for r := range batch.Results() {
		if r.Err != nil || r.Value != []int{11, 21, 31}[r.Index] {
			t.Fatalf("result %+v", r)
		}
		got++
		if got == 2 {
			break
		}
	}
	if n := len(harness.Queued(t, rdb, queue)); n != 1 {
		t.Fatalf("the queue holds %d tasks, want the 1 task not taken", n)
	}
	if live, _ := m.Workers(tctx); len(live) != 0 {
		t.Fatalf("live workers after Run returned: %v", live)
	}
}

// A worker that stops with tasks still in its private queue (or prefetched
// and given back there) does not leave them waiting for ever: they fail with
// ErrLost naming it.
func TestStopFailsPrivateTasksLeft(t *testing.T) {
	e := harness.Setup(t)

	started := make(chan int, 16)
	release := make(chan struct{})
	gate := redmap.Func("gate", func(_ context.Context, x int) (int, error) {
		started <- x
		<-release
		return x, nil
	})
	w, stop, ran := e.StartWorker(t, worker.Options{Concurrency: 1}, gate)
	m := e.Manager(t, manager.Options{})
	tctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	harness.WaitLive(t, m, w.ID())
	batch, err := manager.Submit(tctx, m, gate, []int{0, 1, 2, 3, 4}, manager.ChunkSize(1), manager.OnWorker(w.ID()))
	if err != nil {
		t.Fatal(err)
	}
	<-started
	stop()
	close(release)
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	ys, err := batch.Wait(tctx)
	var be *redmap.BatchError
	if !errors.As(err, &be) || len(be.Failed) != 4 || !errors.Is(err, redmap.ErrLost) || !strings.Contains(err.Error(), w.ID()) {
		t.Fatalf("got %v, want the 4 tasks not run to fail with ErrLost naming the worker", err)
	}
	if ys[0] != 0 || be.Failed[0].Index != 1 {
		t.Fatalf("ys %v, failed %v", ys, be.Indexes())
	}
}

// A running worker keeps its process's collector from running every few
// MiB (Options.GCHeadroom): with a headroom far above this test's live
// heap, the percent rises while Run runs, and falls once Run returns. (The
// tests run in parallel: other workers may hold the default headroom
// meanwhile, which asks for at most 800%; internal/gcfloor's tests show
// the process's own percent restored.)
func TestRunHoldsGCHeadroom(t *testing.T) {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		t.Skip("GOGC or GOMEMLIMIT set: workers leave the collector alone")
	}
	gogc := func() int {
		s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
		metrics.Read(s)
		return int(s[0].Value.Uint64())
	}
	// await runs collections until cond holds: the percent is set after
	// each one (and when Run starts or returns).
	await := func(what string, cond func(int) bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(gogc()); runtime.GC() {
			if time.Now().After(deadline) {
				t.Fatalf("GOGC %d: want it %s", gogc(), what)
			}
		}
	}
	e := harness.Setup(t)
	_, stop, ran := e.StartWorker(t, worker.Options{GCHeadroom: 4 << 30}, redmap.Func("id", func(_ context.Context, x int) (int, error) { return x, nil }))
	await("raised while a worker with 4 GiB of headroom runs", func(p int) bool { return p >= 1000 })
	stop()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	await("back under 1000 once Run returned", func(p int) bool { return p < 1000 })
}
