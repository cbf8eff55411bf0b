package worker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// Tests of a function that ignores its context, run in real worker
// processes (worker.Main): the test binary plays the worker when
// harness.ChildEnv says "stuck-worker" (see runChild).

// never is never closed: a run of stuck that waits on it never returns.
var never = make(chan struct{})

// stuck returns 10x, except for negative x: then it says "running <x>" on
// stdout and blocks for ever, ignoring its context, as a function stuck in
// a call without a deadline does.
var stuck = redmap.Func("stuck", func(_ context.Context, x int) (int, error) {
	if x < 0 {
		fmt.Println("running", x)
		<-never
	}
	return 10 * x, nil
})

// lagging returns 10x; for negative x, on a worker started with
// REDMAP_LAG set, it says "running <x>" on stdout and blocks for ever,
// ignoring its context, as stuck does: one worker where a call hangs, and
// others where the same call is quick. It is declared Idempotent, so that a
// call that runs long near its batch's end gets a backup task.
var lagging = redmap.Func("lagging", func(_ context.Context, x int) (int, error) {
	if x < 0 && os.Getenv("REDMAP_LAG") != "" {
		fmt.Println("running", x)
		<-never
	}
	return 10 * x, nil
}, redmap.Idempotent())

// runChild plays the role harness.ChildEnv names, if any, and exits: a
// worker program made with worker.Main serving stuck, its flags from
// harness.Child's args.
func runChild() {
	if os.Getenv(harness.ChildEnv) != "stuck-worker" {
		return
	}
	if err := worker.Main(harness.ChildArgs(), stuck, lagging); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// stuckWorker starts a worker process serving e's queue with flags, and
// returns it once it printed its id, with the address of its metrics if
// flags ask for them.
func stuckWorker(t *testing.T, e *harness.Env, flags ...string) (p *harness.Proc, metrics string) {
	t.Helper()
	p = harness.Start(t, harness.Child("stuck-worker", nil, append([]string{"-redis", e.URL, "-queue", e.Queue}, flags...)...))
	if slices.Contains(flags, "-metrics") {
		metrics = p.Expect(t, "metrics ") // printed before its id
	}
	p.Expect(t, "worker ")
	return p, metrics
}

// within returns a context that ends after d, generous: it bounds "ended at
// all", never how fast.
func within(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// scrape returns the value of the worker metric name at the metrics
// address addr, or -1 if it is not there.
func scrape(t *testing.T, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + name + `\{[^}]*\} (\S+)$`).FindSubmatch(b)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// With Timeout(2s), an element whose function never returns, ignoring its
// context, fails with ErrTimeout; the other elements of its task and of the
// batch get their values, and the worker counts the abandoned call.
func TestTimeoutAbandonsCallIgnoringContext(t *testing.T) {
	e := harness.Setup(t)
	p, addr := stuckWorker(t, e, "-concurrency", "2", "-metrics", "127.0.0.1:0")
	m := e.Manager(t, manager.Options{})
	xs := []int{0, 1, 2, -3, 4, 5, 6, 7, 8, 9}

	began := time.Now()
	ys, err := manager.Map(within(t, 2*time.Minute), m, stuck, xs, manager.ChunkSize(5), manager.Timeout(2*time.Second))
	t.Logf("Map returned after %v: %v", time.Since(began).Round(time.Millisecond), err)
	var be *redmap.BatchError
	if !errors.As(err, &be) || !errors.Is(err, redmap.ErrTimeout) || fmt.Sprint(be.Indexes()) != "[3]" {
		t.Fatalf("Map: %v; want element 3 alone failing with ErrTimeout", err)
	}
	for i, y := range ys {
		if i != 3 && y != 10*xs[i] {
			t.Fatalf("ys[%d] = %d, want %d", i, y, 10*xs[i])
		}
	}
	p.WaitLog(t, "abandoned")
	if n := scrape(t, addr, "redmap_worker_calls_abandoned_total"); n != 1 {
		t.Fatalf("redmap_worker_calls_abandoned_total = %v, want 1", n)
	}
	if n := scrape(t, addr, "redmap_worker_calls_abandoned_running"); n != 1 {
		t.Fatalf("redmap_worker_calls_abandoned_running = %v, want 1", n)
	}
	// Still a worker: it runs the next batch.
	if ys, err := manager.Map(within(t, time.Minute), m, stuck, []int{1, 2}); err != nil || !slices.Equal(ys, []int{10, 20}) {
		t.Fatalf("next batch: %v, %v", ys, err)
	}
}

// A worker with as many abandoned calls still running as its limit
// (worker.DefaultMaxAbandoned, 3) drains and exits non-zero, saying why, for
// its supervisor to start a fresh process; the elements fail with
// ErrTimeout.
func TestAbandonedCallsPastLimitExitWorker(t *testing.T) {
	e := harness.Setup(t)
	p, _ := stuckWorker(t, e, "-concurrency", "3")
	m := e.Manager(t, manager.Options{})

	_, err := manager.Map(within(t, 2*time.Minute), m, stuck, []int{-1, -2, -3}, manager.ChunkSize(1), manager.Timeout(time.Second))
	if !errors.Is(err, redmap.ErrTimeout) {
		t.Fatalf("Map: %v; want ErrTimeout", err)
	}
	p.WaitLog(t, "abandoned calls")
	select {
	case <-p.Exited():
	case <-time.After(time.Minute):
		t.Fatal("the worker did not exit within a minute of its third abandoned call")
	}
	var ee interface{ ExitCode() int }
	if !errors.As(p.Err(), &ee) || ee.ExitCode() == 0 {
		t.Fatalf("worker exited with %v; want a non-zero status", p.Err())
	}
	if tail := p.Tail(); !strings.Contains(tail, worker.ErrAbandoned.Error()) {
		t.Fatalf("the worker's last lines do not say why it exited:\n%s", tail)
	}
}

// With no Timeout, a task whose batch was cancelled while its function
// ignores its context does not hold its slot: the worker, of one slot,
// abandons the call within the grace and runs the next batch.
func TestCancelledTaskFreesSlot(t *testing.T) {
	e := harness.Setup(t)
	p, _ := stuckWorker(t, e, "-concurrency", "1", "-prefetch", "-1")
	m := e.Manager(t, manager.Options{})

	batch, err := manager.Submit(within(t, time.Minute), m, stuck, []int{-1})
	if err != nil {
		t.Fatal(err)
	}
	p.Expect(t, "running -1")
	batch.Cancel()
	ys, err := manager.Map(within(t, 2*time.Minute), m, stuck, []int{1, 2, 3})
	if err != nil || !slices.Equal(ys, []int{10, 20, 30}) {
		t.Fatalf("the batch after the cancelled one: %v, %v", ys, err)
	}
	p.WaitLog(t, "abandoned")
}

// A worker told to stop (SIGTERM) while a function that ignores its context
// runs exits all the same once its grace is over, giving the task back.
func TestStopWithStuckCallExits(t *testing.T) {
	e := harness.Setup(t)
	p, _ := stuckWorker(t, e, "-concurrency", "1", "-grace", "1s")
	m := e.Manager(t, manager.Options{})
	if _, err := manager.Submit(within(t, time.Minute), m, stuck, []int{-1}); err != nil {
		t.Fatal(err)
	}
	p.Expect(t, "running -1")
	if err := p.Stop(t); err != nil { // fails the test past 20 s
		t.Fatalf("worker exited with %v", err)
	}
}
