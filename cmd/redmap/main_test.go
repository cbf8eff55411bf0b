package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/inspect"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// The functions the child workers serve.
var (
	square = redmap.Func("square", func(_ context.Context, x int) (int, error) { return x * x, nil })
	slow   = redmap.Func("slow", func(_ context.Context, x int) (int, error) {
		time.Sleep(2 * time.Millisecond) // a task that takes time, so a batch is seen running
		return x, nil
	})
	flaky = redmap.Func("flaky", func(_ context.Context, x int) (int, error) {
		switch {
		case x == 7:
			panic("seven")
		case x%2 == 1:
			return 0, fmt.Errorf("odd input")
		}
		return x, nil
	})
	// missing fails every element with a message that names a path and an
	// id of its own.
	missing = redmap.Func("missing", func(_ context.Context, x int) (int, error) {
		return 0, fmt.Errorf("open /data/%d.csv: no such file (id %016x, try 1)", x, uint64(x+1)*0x9e3779b97f4a7c15)
	})
	block = redmap.Func("block", func(context.Context, int) (int, error) { select {} })
	// held returns elements under 2,000 at once and runs the others until
	// their batch is cancelled: a batch of 3,000 seen running, with
	// results, for as long as a test needs (each shard's lane is taken in
	// order, so its first elements end before its held ones fill the
	// slots).
	held = redmap.Func("held", func(ctx context.Context, x int) (int, error) {
		if x < 2000 {
			return x, nil
		}
		<-ctx.Done()
		return 0, ctx.Err()
	})
	// noting logs each element through redmap.Logger and runs element 1
	// until its batch is cancelled.
	noting = redmap.Func("noting", func(ctx context.Context, x int) (int, error) {
		redmap.Logger(ctx).InfoContext(ctx, "noting", "x", x)
		if x == 1 {
			<-ctx.Done()
			return 0, ctx.Err()
		}
		return x, nil
	})
	// waitCtx runs until its batch is cancelled.
	waitCtx = redmap.Func("waitctx", func(ctx context.Context, _ int) (int, error) { <-ctx.Done(); return 0, ctx.Err() })
	// five takes 5 s, heedless of its context as many functions are, and
	// says which process ran it: x*10,000,000 + the pid.
	five = redmap.Func("five", func(_ context.Context, x int) (int, error) {
		time.Sleep(5 * time.Second)
		return x*10_000_000 + os.Getpid(), nil
	})
	// A pipeline's steps: pkey emits (x mod 100, 1); psum adds; phold,
	// after it, runs until its batch is cancelled, so that the pipeline's
	// reduce stage runs for as long as a test needs.
	pkey = redmap.Emit("pkey", func(_ context.Context, x int, emit func(int, int)) error {
		emit(x%100, 1)
		return nil
	})
	psum  = redmap.Reduce("psum", func(_ context.Context, a, b int) (int, error) { return a + b, nil })
	phold = redmap.Func("phold", func(ctx context.Context, _ redmap.KV[int, int]) (int, error) { <-ctx.Done(); return 0, ctx.Err() })
	// paced takes 40 ms an element: a fleet's worth of work in seconds.
	paced = redmap.Func("paced", func(ctx context.Context, x int) (int, error) {
		select {
		case <-time.After(40 * time.Millisecond):
			return x * x, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	})
)

func TestMain(m *testing.M) {
	// As a child, the test binary is a worker program made with worker.Main.
	if os.Getenv(harness.ChildEnv) == "worker" {
		if err := worker.Main(harness.ChildArgs(), square, slow, held, flaky, missing, block, waitCtx, five, paced, geo, noting, pkey, psum, phold, pread, pwrite); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	// As a "manager-pipeline" child, it runs a durable pipeline (see
	// runPipelineChild) until killed.
	if os.Getenv(harness.ChildEnv) == "manager-pipeline" {
		if err := runPipelineChild(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := redistest.Run(m)
	harness.Cleanup()
	os.Exit(code)
}

// runCLI runs the redmap command against the test's server; it returns stdout,
// stderr and the exit status.
func runCLI(t *testing.T, srv *redistest.Server, args ...string) (string, string, int) {
	t.Helper()
	return runCLIAt(t, srv.URL(), args...)
}

// runCLIAt runs the redmap command against the Redis of url.
func runCLIAt(t *testing.T, url string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(harness.Build(t, "github.com/redmap/redmap/cmd/redmap"), args...)
	cmd.Env = append(os.Environ(), "REDIS_URL="+url)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

func cliJSON(t *testing.T, srv *redistest.Server, v any, args ...string) {
	t.Helper()
	cliJSONAt(t, srv.URL(), v, args...)
}

func cliJSONAt(t *testing.T, url string, v any, args ...string) {
	t.Helper()
	out, errs, code := runCLIAt(t, url, append(args, "-json")...)
	if code != 0 {
		t.Fatalf("redmap %v: exit %d: %s", args, code, errs)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("redmap %v -json: %v\n%s", args, err, out)
	}
}

// proc is a child worker process made with worker.Main, and the address it
// serves metrics on.
type proc struct {
	*harness.Proc
	metrics string
}

func startWorker(t *testing.T, srv *redistest.Server, queue string, args ...string) *proc {
	t.Helper()
	return startWorkerAt(t, srv.URL(), queue, args...)
}

// startWorkerAt starts a worker process on the Redis of url.
func startWorkerAt(t *testing.T, url, queue string, args ...string) *proc {
	t.Helper()
	p := harness.Start(t, harness.Child("worker", []string{"REDIS_URL=" + url},
		append([]string{"-queue", queue, "-metrics", "127.0.0.1:0"}, args...)...))
	metrics := p.Expect(t, "metrics ")
	p.Expect(t, "worker ")
	return &proc{Proc: p, metrics: metrics}
}

func TestStatusWorkersBatches(t *testing.T) {
	e := harness.Setup(t)
	srv, queue := e.Srv, e.Queue
	w1 := startWorker(t, srv, queue, "-concurrency", "2")
	w2 := startWorker(t, srv, queue, "-concurrency", "2")
	m := e.Manager(t, manager.Options{})
	ctx := context.Background()
	// Elements under 2,000 end; the others run until the batch is
	// cancelled, so the batch is running whenever the CLI reads it, however
	// slow the machine.
	batch, err := manager.Submit(ctx, m, held, ints(3000), manager.ChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}

	var batches []inspect.Batch
	redistest.Eventually(t, "the batch listed", func() bool {
		cliJSON(t, srv, &batches, "batches", "-queue", queue)
		return len(batches) == 1 && batches[0].Total == 3000 && batches[0].Done > 0
	})
	if batches[0].Func != "held" || batches[0].Done > batches[0].Total {
		t.Fatalf("batch %+v", batches[0])
	}
	var workers []inspect.Worker
	cliJSON(t, srv, &workers, "workers", "-queue", queue)
	var ids []string
	for _, w := range workers {
		ids = append(ids, w.ID)
		if !w.Live || w.Concurrency != 2 || !slices.Contains(w.Functions, "held") || w.PID == 0 || w.HeartbeatAge > 5 || w.Version == "" {
			t.Errorf("worker %+v", w)
		}
	}
	if slices.Sort(ids); !slices.Equal(ids, sorted(w1.ID, w2.ID)) {
		t.Fatalf("workers %v, want %s and %s", ids, w1.ID, w2.ID)
	}
	out, _, code := runCLI(t, srv, "status", "-queue", queue)
	for _, want := range []string{"QUEUE", "DEPTH", queue, w1.ID, w2.ID, "held", "3000"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("status (exit %d) lacks %q:\n%s", code, want, out)
		}
	}
	t.Logf("redmap status:\n%s", out)
	batch.Cancel()
	if _, err := batch.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("the batch, cancelled: %v", err)
	}
}

func sorted(xs ...string) []string { slices.Sort(xs); return xs }

// A task lost twice with its workers (a suspect) runs alone, and redmap
// batches says so on its batch, naming the worker and why, from that
// worker's record.
func TestBatchesShowSuspects(t *testing.T) {
	e := harness.Setup(t)
	srv, queue := e.Srv, e.Queue
	m := e.Manager(t, manager.Options{NoWorkerTimeout: time.Minute})
	ctx := context.Background()
	batch, err := manager.Submit(ctx, m, held, []int{2000}) // runs until cancelled
	if err != nil {
		t.Fatal(err)
	}
	// Its task counts as lost twice already, as after two SIGKILLed
	// holders.
	names := append([]string{queue}, e.Client.LRange(ctx, keys.ShardNames("redmap", queue), 0, -1).Val()...)
	marked := 0
	for _, name := range names {
		for _, tid := range e.Client.HKeys(ctx, keys.Tasks("redmap", name, m.ID())).Val() {
			if !strings.HasPrefix(tid, "_") { // the set's count and epoch
				e.Client.HSet(ctx, keys.Attempts("redmap", name, m.ID()), tid, wire.SuspectAfter)
				marked++
			}
		}
	}
	if marked != 1 {
		t.Fatalf("%d tasks in the batch's task sets, want 1", marked)
	}
	w := startWorker(t, srv, queue)
	var batches []inspect.Batch
	redistest.Eventually(t, "the batch listed with its suspect", func() bool {
		cliJSON(t, srv, &batches, "batches", "-queue", queue)
		return len(batches) == 1 && len(batches[0].Alone) > 0
	})
	if a := batches[0].Alone; len(a) != 1 || !strings.Contains(a[0], w.ID) || !strings.Contains(a[0], "runs alone: lost 2 times") {
		t.Fatalf("batches says %q; want the worker %s running its task alone, and why", a, w.ID)
	}
	out, _, code := runCLI(t, srv, "batches", "-queue", queue)
	if code != 0 || !strings.Contains(out, "runs alone") {
		t.Fatalf("redmap batches (exit %d) does not say a task runs alone:\n%s", code, out)
	}
	t.Logf("redmap batches:\n%s", out)
	batch.Cancel()
	if _, err := batch.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled batch: %v", err)
	}
}

// A batch whose function only workers of other types serve waits, and
// redmap batches says so, naming the field that differs, from the progress
// its manager published; its element then fails with ErrTypeMismatch.
// A batch's label (manager.Label) reaches its worker, whose function logs
// it, and operators, who see it beside the batch's function while it runs
// and in its record once it ended, written by its manager, by its worker (a
// lone Map) or by whoever found its manager lost.
func TestLabelShown(t *testing.T) {
	e := harness.Setup(t)
	srv, queue := e.Srv, e.Queue
	w := startWorker(t, srv, queue)
	m := e.Manager(t, manager.Options{})
	ctx := context.Background()
	batch, err := manager.Submit(ctx, m, noting, []int{0, 1}, manager.ChunkSize(1), manager.Label("nightly-import"))
	if err != nil {
		t.Fatal(err)
	}
	w.WaitLog(t, "label=nightly-import")
	var batches []inspect.Batch
	redistest.Eventually(t, "the running batch listed", func() bool {
		cliJSON(t, srv, &batches, "batches", "-queue", queue)
		return len(batches) == 1 && batches[0].Done == 1
	})
	if batches[0].Call.Label != "nightly-import" {
		t.Fatalf("running batch %+v, want its label", batches[0])
	}
	if out, _, code := runCLI(t, srv, "batches", "-queue", queue); code != 0 || !strings.Contains(out, "CALL") || !strings.Contains(out, "label=nightly-import") {
		t.Fatalf("redmap batches (exit %d) shows no label:\n%s", code, out)
	}
	batch.Cancel()
	if _, err := batch.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled batch: %v", err)
	}
	// A lone Map, whose worker writes its record.
	if _, err := manager.Map(ctx, m, noting, []int{2}, manager.Label("one off")); err != nil {
		t.Fatal(err)
	}
	var hist []inspect.Batch
	redistest.Eventually(t, "both in the history", func() bool {
		cliJSON(t, srv, &hist, "batches", "-all", "-queue", queue)
		return len(hist) == 2
	})
	labels := []string{hist[0].Call.Label, hist[1].Call.Label}
	if slices.Sort(labels); !slices.Equal(labels, []string{"nightly-import", "one off"}) {
		t.Fatalf("history %+v, want each batch's label", hist)
	}
	if out, _, _ := runCLI(t, srv, "batches", "-all", "-queue", queue); !strings.Contains(out, `label="one off"`) {
		t.Fatalf("redmap batches -all shows no label:\n%s", out)
	}
	if _, err := manager.Map(ctx, m, noting, []int{3}, manager.Label("bad\nlabel")); err == nil || !strings.Contains(err.Error(), "Label") {
		t.Fatalf("a label with a newline: %v, want an error naming Label", err)
	}
}

func TestBatchesSayWhyABatchWaits(t *testing.T) {
	e := harness.Setup(t)
	srv, queue := e.Srv, e.Queue
	startWorker(t, srv, queue) // serves square: int → int
	m := e.Manager(t, manager.Options{NoWorkerTimeout: time.Minute})
	squareOfText := redmap.Func("square", func(_ context.Context, s string) (int, error) { return len(s), nil })
	batch, err := manager.Submit(context.Background(), m, squareOfText, []string{"seven"})
	if err != nil {
		t.Fatal(err)
	}
	var batches []inspect.Batch
	redistest.Eventually(t, "the batch listed as waiting", func() bool {
		cliJSON(t, srv, &batches, "batches", "-queue", queue)
		return len(batches) == 1 && batches[0].Waiting != ""
	})
	if w := batches[0].Waiting; !strings.Contains(w, "other types") || !strings.Contains(w, "In") {
		t.Fatalf("batches says %q; want it to say only workers of other types are live, naming the input", w)
	}
	out, _, code := runCLI(t, srv, "batches", "-queue", queue)
	if code != 0 || !strings.Contains(out, "other types") {
		t.Fatalf("redmap batches (exit %d) does not say why the batch waits:\n%s", code, out)
	}
	t.Logf("redmap batches:\n%s", out)
	batch.Cancel()
	if _, err := batch.Wait(context.Background()); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled batch: %v", err)
	}
}

func TestFailures(t *testing.T) {
	e := harness.Setup(t)
	srv, queue := e.Srv, e.Queue
	startWorker(t, srv, queue)
	m := e.Manager(t, manager.Options{})
	// A cancelled batch's elements, which end with "context canceled", are
	// not failures of the function.
	cancelled, err := manager.Submit(context.Background(), m, waitCtx, []int{1})
	if err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, "the task running", func() bool {
		var ws []inspect.Worker
		cliJSON(t, srv, &ws, "workers", "-queue", queue)
		return len(ws) == 1 && ws[0].Running == 1
	})
	cancelled.Cancel()
	// Once it has ended, its record (if any) is flushed no later than those
	// of the failures below.
	redistest.Eventually(t, "the cancelled task ended", func() bool {
		var ws []inspect.Worker
		cliJSON(t, srv, &ws, "workers", "-queue", queue)
		return len(ws) == 1 && ws[0].Running == 0
	})
	xs := make([]int, 20)
	for i := range xs {
		xs[i] = i
	}
	if _, err := manager.Map(context.Background(), m, flaky, xs, manager.ChunkSize(1)); err == nil {
		t.Fatal("want failures")
	}
	var groups []inspect.FailureGroup
	redistest.Eventually(t, "failures recorded", func() bool {
		cliJSON(t, srv, &groups, "failures", "-queue", queue)
		var n int64
		for _, g := range groups {
			n += g.Count
		}
		return n == 10 // 9 odd errors and the panic of 7
	})
	byKind := map[string]inspect.FailureGroup{}
	for _, g := range groups {
		byKind[g.Kind] = g
	}
	if g := byKind["error"]; g.Count != 9 || g.Func != "flaky" || g.Error != "odd input" {
		t.Fatalf("error group %+v", g)
	}
	if g := byKind["panic"]; g.Count != 1 || !strings.Contains(g.SampleStack, "main_test.go") {
		t.Fatalf("panic group %+v", g)
	}
	if len(groups) != 2 {
		t.Fatalf("groups %+v, want the error and the panic only (a cancelled element is no failure)", groups)
	}
	out, _, _ := runCLI(t, srv, "failures", "-queue", queue)
	if !strings.Contains(out, "odd input") || !strings.Contains(out, "a stack:") {
		t.Fatalf("failures:\n%s", out)
	}
	t.Logf("redmap failures:\n%s", out)
}

// redmap failures lists what failed on the manager's side too, grouped as
// a worker's failures are: here a batch whose function no worker serves,
// failed with ErrNoWorker, counted by the time Map returns.
func TestFailuresIncludeManagerSide(t *testing.T) {
	e := harness.Setup(t)
	m := e.Manager(t, manager.Options{NoWorkerTimeout: 500 * time.Millisecond, Poll: 100 * time.Millisecond})
	_, err := manager.Map(context.Background(), m, square, make([]int, 30), manager.ChunkSize(10))
	var be *redmap.BatchError
	if !errors.As(err, &be) || len(be.Failed) != 30 || !errors.Is(be.Failed[0].Err, redmap.ErrNoWorker) {
		t.Fatalf("a batch with no worker: %v; want 30 elements failed with ErrNoWorker", err)
	}
	var groups []inspect.FailureGroup
	cliJSONAt(t, e.URL, &groups, "failures", "-queue", e.Queue)
	if len(groups) != 1 || groups[0].Kind != "no worker" || groups[0].Count != 30 || groups[0].Func != "square" ||
		len(groups[0].Workers) != 1 || groups[0].Workers[0] != "manager "+m.ID() {
		t.Fatalf("failure groups %+v; want one of 30 elements, kind no worker, seen by the manager", groups)
	}
	out, _, _ := runCLIAt(t, e.URL, "failures", "-queue", e.Queue)
	t.Logf("redmap failures:\n%s", out)
}

// Every failed element is counted, however many a heartbeat sees, and those
// counted in a worker's last moments are written before it exits; messages
// that differ only in a path and a number fall in one group, shown with one
// message in full.
func TestFailuresCountedAndGrouped(t *testing.T) {
	e := harness.Setup(t)
	srv, queue := e.Srv, e.Queue
	w := startWorker(t, srv, queue)
	m := e.Manager(t, manager.Options{})
	_, err := manager.Map(context.Background(), m, missing, make([]int, 700), manager.ChunkSize(7))
	var be *redmap.BatchError
	if !errors.As(err, &be) || len(be.Failed) != 700 {
		t.Fatalf("missing: %v; want 700 elements failed", err)
	}
	// SIGTERM at once: what the worker counted since its last heartbeat
	// is written as it stops.
	w.Cmd.Process.Signal(syscall.SIGTERM)
	<-w.Exited()
	if err := w.Err(); err != nil {
		t.Fatalf("worker exited with %v", err)
	}
	var groups []inspect.FailureGroup
	cliJSON(t, srv, &groups, "failures", "-queue", queue)
	if len(groups) != 1 {
		t.Fatalf("groups %+v; want one", groups)
	}
	g := groups[0]
	if g.Count != 700 || g.Group != "open <path>: no such file (id <id>, try <n>)" ||
		!regexp.MustCompile(`^open /data/\d+\.csv: no such file \(id [0-9a-f]{16}, try 1\)$`).MatchString(g.Error) ||
		len(g.Workers) != 1 || g.Workers[0] != w.ID || g.First.After(g.Last) {
		t.Fatalf("group %+v; want 700 failures in one group, with one message in full, from worker %s", g, w.ID)
	}
	out, _, _ := runCLI(t, srv, "failures", "-queue", queue, "-n", "5")
	t.Logf("redmap failures -n 5:\n%s", out)
}

func TestDrain(t *testing.T) {
	e := harness.Setup(t)
	srv, queue := e.Srv, e.Queue
	w := startWorker(t, srv, queue)
	m := e.Manager(t, manager.Options{})
	if ys, err := manager.Map(context.Background(), m, square, []int{1, 2, 3}); err != nil || ys[2] != 9 {
		t.Fatalf("map: %v %v", ys, err)
	}
	out, errs, code := runCLI(t, srv, "drain", w.ID[:10]) // a unique prefix will do
	if code != 0 || !strings.Contains(out, "draining worker "+w.ID) {
		t.Fatalf("drain: exit %d, %s %s", code, out, errs)
	}
	select {
	case <-w.Exited():
		if w.Err() != nil {
			t.Fatalf("drained worker exited with %v", w.Err())
		}
	case <-time.After(redistest.WaitLimit(t)):
		t.Fatal("drained worker did not exit")
	}
	if _, errs, code := runCLI(t, srv, "drain", "nobody"); code != 1 || !strings.Contains(errs, `no worker "nobody"`) {
		t.Fatalf("drain nobody: exit %d %q", code, errs)
	}
}

func TestPurge(t *testing.T) {
	e := harness.Setup(t)
	srv, queue := e.Srv, e.Queue
	// The keeper forgets a cancelled batch's lane at its next tick, every
	// Poll: a minute here, so that the commands below, each a process,
	// find it queued (with the default second, a loaded machine found it
	// gone before the second command).
	m := e.Manager(t, manager.Options{Poll: time.Minute, KeyTTL: 10 * time.Minute})
	batch, err := manager.Submit(context.Background(), m, square, make([]int, 10), manager.ChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}
	// A cancelled batch leaves its ids queued, no longer wanted; purge drops
	// them too and says so, so that what it announces and does agree.
	cancelled, err := manager.Submit(context.Background(), m, square, make([]int, 3), manager.ChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}
	cancelled.Cancel()
	_, errs, code := runCLI(t, srv, "purge", queue)
	if code != 1 || !strings.Contains(errs, "would drop the 13 queued task id(s)") || !strings.Contains(errs, "-yes") || strings.Count(errs, "\n") != 1 {
		t.Fatalf("purge without -yes: exit %d %q", code, errs)
	}
	out, errs, code := runCLI(t, srv, "purge", queue, "-yes")
	if code != 0 || !strings.Contains(out, "dropped 13 queued task id(s)") || !strings.Contains(out, "10 task(s) failed in their batches, 3 no manager wanted") {
		t.Fatalf("purge -yes: exit %d %q %q", code, out, errs)
	}
	var qs []queueStatus
	cliJSON(t, srv, &qs, "status", "-queue", queue)
	if len(qs) != 1 || qs[0].Depth != 0 {
		t.Fatalf("status after purge: %+v, want depth 0", qs)
	}
	_, err = batch.Wait(context.Background())
	var be *redmap.BatchError
	if !errors.As(err, &be) || len(be.Failed) != 10 || !errors.Is(err, redmap.ErrLost) || !errors.Is(err, redmap.ErrPurged) || !strings.Contains(err.Error(), "purged") {
		t.Fatalf("batch after purge: %v", err)
	}
	// Its record counts them as purged, apart from lost.
	var hist []inspect.Batch
	redistest.Eventually(t, "the purged batch in the history", func() bool {
		cliJSON(t, srv, &hist, "batches", "-all", "-queue", queue)
		for _, b := range hist {
			if b.Outcome == "failed" && b.Total == 10 {
				return true
			}
		}
		return false
	})
	for _, b := range hist {
		if b.Total == 10 && (b.FailedBy["purged"] != 10 || b.FailedBy["lost"] != 0) {
			t.Fatalf("the purged batch's record counts %v, want 10 purged", b.FailedBy)
		}
	}
}

func TestErrors(t *testing.T) {
	srv := harness.Setup(t).Srv
	cases := []struct {
		args []string
		url  string
		code int
		want string
	}{
		{[]string{"status", "-queue", "nope"}, "", 1, `no queue "nope" (no manager or worker of it named it in Redis within a week; -scan finds one an earlier build left) (asked ` + srv.URL()},
		{[]string{"status"}, "redis://127.0.0.1:1/0", 1, "cannot reach Redis at redis://127.0.0.1:1/0"},
		{[]string{"status", "-bogus"}, "", 2, "flag provided but not defined: -bogus"},
		{[]string{"frobnicate"}, "", 2, `unknown command "frobnicate"`},
		{[]string{"drain"}, "", 2, "drain takes 1 argument"},
	}
	for _, c := range cases {
		args := c.args
		if c.url != "" {
			args = append([]string{"-redis", c.url}, args...)
		}
		out, errs, code := runCLI(t, srv, args...)
		if code != c.code || !strings.Contains(errs, c.want) || strings.Count(errs, "\n") != 1 || out != "" {
			t.Errorf("redmap %v: exit %d, stdout %q, stderr %q; want exit %d and one line with %q", args, code, out, errs, c.code, c.want)
		}
	}
	for _, c := range []struct {
		given bool
		env   string
		want  string
	}{
		{false, "", "redmap: no -redis and no $REDIS_URL: asking redis://127.0.0.1:6379/0"},
		{true, "", ""},
		{false, "redis://elsewhere:6380/0", ""},
	} {
		if got := fallbackNote(c.given, c.env, "redis://127.0.0.1:6379/0"); got != c.want {
			t.Errorf("fallbackNote(-redis given %v, $REDIS_URL %q) = %q, want %q", c.given, c.env, got, c.want)
		}
	}
	for _, h := range []string{"-h", "--help", "help"} {
		out, errs, code := runCLI(t, srv, h)
		if code != 0 || !strings.Contains(out, "usage: redmap") || errs != "" {
			t.Errorf("redmap %s: exit %d, stdout %q, stderr %q; want the usage and exit 0", h, code, out, errs)
		}
	}
}

var metricLine = regexp.MustCompile(`(?m)^(redmap_worker_\w+)\{[^}]*\} (\S+)$`)

func TestMetricsScrape(t *testing.T) {
	e := harness.Setup(t)
	srv, queue := e.Srv, e.Queue
	w := startWorker(t, srv, queue, "-name", "pod-7")
	m := e.Manager(t, manager.Options{})
	if _, err := manager.Map(context.Background(), m, square, make([]int, 1000), manager.ChunkSize(10)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + w.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	got := map[string]float64{}
	for _, mm := range metricLine.FindAllStringSubmatch(string(body), -1) {
		v, _ := strconv.ParseFloat(mm[2], 64)
		got[mm[1]] += v // summed over its series: by function, say
	}
	if got["redmap_worker_tasks_succeeded_total"] < 100 || got["redmap_worker_task_duration_seconds_count"] < 100 ||
		got["redmap_worker_tasks_taken_total"] < 100 {
		t.Fatalf("metrics %v; want 100 tasks or more taken, succeeded and timed", got)
	}
	for _, name := range []string{"redmap_worker_queue_depth", "redmap_worker_tasks_failed_total", "redmap_worker_cache_hits_total", "redmap_worker_tasks_running", "redmap_worker_retry_after_waits_total"} {
		if _, ok := got[name]; !ok {
			t.Errorf("no %s in the scrape", name)
		}
	}
	// By function (stage empty: no pipeline's), under the worker's stable
	// name; its id in the info metric alone.
	for _, line := range []string{
		`redmap_worker_elements_total{function="square",queue="` + queue + `",stage="",worker="pod-7"} 1000`,
		`redmap_worker_elements_failed_total{function="square",queue="` + queue + `",stage="",worker="pod-7"} 0`,
		`redmap_worker_tasks_failed_total{function="flaky",queue="` + queue + `",stage="",worker="pod-7"} 0`,
		`redmap_worker_task_duration_seconds_count{function="square",queue="` + queue + `",stage="",worker="pod-7"} 100`,
		`redmap_worker_info{host="`, `id="` + w.ID + `",queue="` + queue + `",version="`,
	} {
		if !strings.Contains(string(body), line) {
			t.Errorf("no %q in the worker's scrape", line)
		}
	}
	if n := strings.Count(string(body), w.ID); n != 1 {
		t.Errorf("the worker's id in %d lines of its scrape; want it in redmap_worker_info alone", n)
	}
	for _, line := range []string{"\ngo_goroutines ", "\nprocess_cpu_seconds_total ", "\nredmap_build_info{goversion=\"go"} {
		if !strings.Contains(string(body), line) {
			t.Errorf("no %q in the worker's scrape: the Go and process collectors", strings.TrimSpace(line))
		}
	}
}

// The first signal drains (the worker waits for its running task); a second
// exits at once.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	e := harness.Setup(t)
	srv, queue := e.Srv, e.Queue
	w := startWorker(t, srv, queue, "-concurrency", "1")
	m := e.Manager(t, manager.Options{})
	if _, err := manager.Submit(context.Background(), m, block, []int{1}); err != nil {
		t.Fatal(err)
	}
	var workers []inspect.Worker
	redistest.Eventually(t, "the task running", func() bool {
		cliJSON(t, srv, &workers, "workers", "-queue", queue)
		return len(workers) == 1 && workers[0].Held == 1
	})
	w.Cmd.Process.Signal(syscall.SIGTERM)
	w.WaitLog(t, "signal again to exit at once")
	select {
	case <-w.Exited():
		t.Fatalf("worker exited (%v) while its task still ran", w.Err())
	default:
	}
	w.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.Exited():
		var ee *exec.ExitError
		if !errors.As(w.Err(), &ee) || ee.ExitCode() != 1 {
			t.Fatalf("after a second signal: %v, want exit status 1", w.Err())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a second signal did not end the worker")
	}
}

// The dashboard on a network: with -actions (or -private) on an address
// that is not loopback and no operator token, it refuses to start, in one
// line; with a token from a file, TLS and -private, it serves HTTPS, reads
// and acts only for the token.
func TestDashboardOnANetwork(t *testing.T) {
	e := harness.Setup(t)
	for _, args := range [][]string{{"-addr", "0.0.0.0:0", "-actions"}, {"-addr", ":0", "-private"}} {
		out, errs, code := runCLI(t, e.Srv, append([]string{"dashboard"}, args...)...)
		if code == 0 || out != "" || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, "not a loopback address") ||
			!strings.Contains(errs, "REDMAP_DASHBOARD_TOKEN") {
			t.Fatalf("dashboard %v without a token: exit %d, stdout %q, stderr %q; want a refusal in one line", args, code, out, errs)
		}
		t.Logf("dashboard %v: exit %d: %s", args, code, strings.TrimSpace(errs))
	}

	ca, cert, key := redistest.Certificates(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret-operator-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(harness.Build(t, "github.com/redmap/redmap/cmd/redmap"), "dashboard", "-addr", "127.0.0.1:0",
		"-actions", "-private", "-token-file", tokenFile, "-tls-cert", cert, "-tls-key", key)
	cmd.Env = append(os.Environ(), "REDIS_URL="+e.URL)
	p := harness.Start(t, cmd)
	base := strings.TrimSuffix(p.Expect(t, "dashboard "), "/")
	if !strings.HasPrefix(base, "https://") {
		t.Fatalf("dashboard at %s, want https", base)
	}
	pem, err := os.ReadFile(ca)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	do := func(method, path, token string, body string) int {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		req.Header.Set("X-Redmap-Action", "1")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		method, path, token, body string
		want                      int
	}{
		{"GET", "/api/state", "", "", http.StatusUnauthorized},
		{"GET", "/api/state", "wrong", "", http.StatusForbidden},
		{"GET", "/api/state", "s3cret-operator-token", "", http.StatusOK},
		{"POST", "/api/drain", "", `{"queue":"q","worker":"w"}`, http.StatusUnauthorized},
		{"POST", "/api/drain?token=s3cret-operator-token", "", `{"queue":"q","worker":"w"}`, http.StatusUnauthorized},
		{"POST", "/api/drain", "s3cret-operator-token", `{"queue":""}`, http.StatusBadRequest}, // through the guard
	} {
		if got := do(c.method, c.path, c.token, c.body); got != c.want {
			t.Errorf("%s %s (token %q) over TLS: %d, want %d", c.method, c.path, c.token, got, c.want)
		}
	}
	if resp, err := http.Get("http://" + strings.TrimPrefix(base, "https://") + "/api/state"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("plain HTTP to the TLS port served the state")
		}
	}
}

// Queue names may hold glob characters; operators' commands touch only the
// named queue (issue 35: `redmap purge 'a*' -yes` deleted abc's private
// list, whose task's manager was never told).
func TestGlobQueueNames(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := context.Background()
	names := []string{"a*", "abc", "a?c", "a[b]c"}
	batches := map[string]*manager.Batch[int]{}
	for _, q := range names {
		m, err := manager.New(client, manager.Options{Queue: q})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close() })
		b, err := manager.Submit(ctx, m, square, make([]int, 5), manager.ChunkSize(1))
		if err != nil {
			t.Fatal(err)
		}
		batches[q] = b
		// A private list of a worker w1 of each queue, reaped as a private
		// batch was submitted to it (so listed as gone, its record
		// expired): purge of another queue must leave it alone.
		if err := client.RPush(ctx, keys.Private("redmap", q, "w1"), "not-a-task-"+q).Err(); err != nil {
			t.Fatal(err)
		}
		if err := client.ZAdd(ctx, keys.Gone("redmap", q), redis.Z{Score: float64(time.Now().UnixMilli()), Member: "w1"}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var bs []inspect.Batch
	redistest.Eventually(t, "a*'s batch listed", func() bool {
		cliJSON(t, srv, &bs, "batches", "-queue", "a*")
		return len(bs) > 0
	})
	if len(bs) != 1 || bs[0].Queue != "a*" {
		t.Fatalf("batches -queue a*: %+v, want a*'s one", bs)
	}
	out, errs, code := runCLI(t, srv, "purge", "a*", "-yes")
	if code != 0 || !strings.Contains(out, "dropped 6 queued task id(s)") {
		t.Fatalf("purge a*: exit %d %q %q, want its 5 tasks and its worker's private id dropped", code, out, errs)
	}
	for _, q := range names[1:] {
		var qs []queueStatus
		cliJSON(t, srv, &qs, "status", "-queue", q)
		if len(qs) != 1 || qs[0].Depth != 5 {
			t.Errorf("status of %s after purging a*: %+v, want depth 5", q, qs)
		}
		if ids, _ := client.LRange(ctx, keys.Private("redmap", q, "w1"), 0, -1).Result(); len(ids) != 1 {
			t.Errorf("private list of %s after purging a*: %v", q, ids)
		}
		if _, errs, code := runCLI(t, srv, "drain", "-queue", q, "w1"); code == 0 {
			t.Errorf("drain -queue %s w1 (no such worker): exit 0 %q", q, errs)
		}
	}
	if _, err := batches["a*"].Wait(ctx); !errors.Is(err, redmap.ErrLost) {
		t.Fatalf("a*'s batch after purge: %v, want its elements lost", err)
	}
	for _, bad := range []string{"a{b}", "a#1", "a\nb"} {
		if _, errs, code := runCLI(t, srv, "purge", bad, "-yes"); code == 0 || !strings.Contains(errs, "queue name") {
			t.Errorf("purge %q: exit %d %q, want the name refused", bad, code, errs)
		}
	}
}

// The usage is made from the command table: it names every command, each
// with its operands and help, and every flag a command takes, each with
// help text; a command's own flag is refused by another.
func TestUsageFromCommands(t *testing.T) {
	var all strings.Builder
	usage(&all, nil)
	for i := range commands {
		k := &commands[i]
		if k.help == "" || !strings.Contains(all.String(), "  "+k.name) {
			t.Errorf("command %s: no help, or missing from the usage", k.name)
		}
		var one strings.Builder
		usage(&one, k)
		flagSet(k, &cli{}, &invocation{}).VisitAll(func(f *flag.Flag) {
			if f.Usage == "" || !strings.Contains(one.String(), "-"+f.Name) {
				t.Errorf("%s -%s: no help text, or missing from redmap help %s", k.name, f.Name, k.name)
			}
		})
	}
	if _, err := parseArgs([]string{"status", "-yes"}, &cli{}); err == nil || !strings.Contains(err.Error(), "-yes") {
		t.Errorf("status -yes: %v, want purge's flag refused", err)
	}
	o, err := parseArgs([]string{"-yes", "purge", "-json", "q"}, &cli{})
	if err != nil || o.cmd.name != "purge" || len(o.operand) != 1 || o.operand[0] != "q" {
		t.Errorf("-yes purge -json q: %+v, %v", o, err)
	}
}

// A durable batch no manager holds is listed orphaned with its name, and
// `redmap cancel <queue> <name>` cancels it: the history says so, and the
// batch is listed no more.
func TestCancelDurable(t *testing.T) {
	e := harness.Setup(t)
	srv, queue := e.Srv, e.Queue
	m, err := manager.New(e.Client, manager.Options{Queue: queue, Poll: 100 * time.Millisecond, NoWorkerTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	nightly := redmap.Func("nightly", func(_ context.Context, x int) (int, error) { return x, nil })
	if _, err := manager.Submit(context.Background(), m, nightly, []int{1, 2, 3}, manager.Durable("night")); err != nil {
		t.Fatal(err)
	}
	var batches []inspect.Batch
	redistest.Eventually(t, "the durable batch listed", func() bool {
		cliJSON(t, srv, &batches, "batches", "-queue", queue)
		return len(batches) == 1 && batches[0].Durable == "night"
	})
	if err := m.Close(); err != nil { // no manager holds it now
		t.Fatal(err)
	}
	out, _, code := runCLI(t, srv, "batches", "-queue", queue)
	if code != 0 || !strings.Contains(out, "night") || !strings.Contains(out, "orphaned") {
		t.Fatalf("redmap batches (exit %d) does not list the orphan by name and state:\n%s", code, out)
	}
	t.Logf("redmap batches:\n%s", out)
	out, errs, code := runCLI(t, srv, "cancel", queue, "night")
	if code != 0 || !strings.Contains(out, "cancelled durable batch") {
		t.Fatalf("redmap cancel: exit %d %q %q", code, out, errs)
	}
	if _, errs, code := runCLI(t, srv, "cancel", queue, "day"); code == 0 || !strings.Contains(errs, `no running batch, pipeline, or durable batch or job "day"`) {
		t.Fatalf("redmap cancel of a batch Redis never had: exit %d %q", code, errs)
	}
	cliJSON(t, srv, &batches, "batches", "-queue", queue, "-all")
	if len(batches) != 1 || batches[0].Outcome != "cancelled" || !strings.Contains(batches[0].Reason, "night") {
		t.Fatalf("after the cancel, batches -all lists %+v; want the one batch, cancelled", batches)
	}
}

// `redmap pause` stops the taking of a queue's tasks, and status, backlog
// -json and the dashboard's state say so; `redmap resume` undoes it. Each
// says when it had nothing to do.
func TestPauseResume(t *testing.T) {
	e := harness.Setup(t)
	srv, queue := e.Srv, e.Queue
	noop := redmap.Func("noop", func(_ context.Context, x int) (int, error) { return x, nil })
	e.Worker(t, worker.Options{}, noop)
	redistest.Eventually(t, "the queue known", func() bool {
		_, _, code := runCLI(t, srv, "backlog", "-queue", queue)
		return code == 0
	})
	out, errs, code := runCLI(t, srv, "pause", queue, "-by", "ops")
	if code != 0 || !strings.Contains(out, "paused queue "+queue) {
		t.Fatalf("redmap pause: exit %d %q %q", code, out, errs)
	}
	if out, _, code := runCLI(t, srv, "pause", queue); code != 0 || !strings.Contains(out, "paused already") {
		t.Fatalf("a second pause: exit %d %q", code, out)
	}
	out, _, code = runCLI(t, srv, "status")
	if code != 0 || !strings.Contains(out, "STATE") || !strings.Contains(out, "by ops") {
		t.Fatalf("redmap status of a paused queue (exit %d):\n%s", code, out)
	}
	var m []struct {
		Paused bool `json:"paused"`
	}
	cliJSON(t, srv, &m, "backlog", "-json", "-queue", queue)
	if len(m) != 1 || !m[0].Paused {
		t.Fatal("backlog -json of a paused queue says it is not paused")
	}
	// A batch of the paused queue: paused, by whom, and no ETA.
	b, err := manager.Submit(context.Background(), e.Manager(t, manager.Options{}), noop, make([]int, 100), manager.ChunkSize(10))
	if err != nil {
		t.Fatal(err)
	}
	var bs []inspect.Batch
	redistest.Eventually(t, "the paused queue's batch listed", func() bool {
		cliJSON(t, srv, &bs, "batches", "-queue", queue)
		return len(bs) == 1
	})
	if !bs[0].Paused || bs[0].ETA != 0 || !strings.HasPrefix(bs[0].Waiting, "paused by ops since ") {
		t.Fatalf("batches -json of a paused queue's batch: paused %v, ETA %v, waiting %q; want paused, no ETA, waiting \"paused by ops since ...\"", bs[0].Paused, bs[0].ETA, bs[0].Waiting)
	}
	out, _, _ = runCLI(t, srv, "batches", "-queue", queue)
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.Contains(lines[1], "  -  ") || !strings.Contains(lines[1], "paused by ops") {
		t.Fatalf("redmap batches of a paused queue's batch: want ETA - and WAITING paused by ops:\n%s", out)
	}
	out, errs, code = runCLI(t, srv, "resume", queue)
	if code != 0 || !strings.Contains(out, "resumed queue "+queue) {
		t.Fatalf("redmap resume: exit %d %q %q", code, out, errs)
	}
	if _, err := b.Wait(context.Background()); err != nil {
		t.Fatalf("the batch after the resume: %v", err)
	}
	if out, _, code := runCLI(t, srv, "resume", queue); code != 0 || !strings.Contains(out, "was not paused") {
		t.Fatalf("a second resume: exit %d %q", code, out)
	}
	cliJSON(t, srv, &m, "backlog", "-json", "-queue", queue)
	if len(m) != 1 || m[0].Paused {
		t.Fatal("backlog -json after the resume says the queue is paused")
	}
}
