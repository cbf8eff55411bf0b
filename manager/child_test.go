package manager_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redmap/redmap/connect"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/cache"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/redistest"
	v1 "github.com/redmap/redmap/internal/typetest/v1/tasks"
	v2 "github.com/redmap/redmap/internal/typetest/v2/tasks"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// The test binary runs itself as a worker or manager process when
// REDMAP_CHILD says so, so fault tests use real processes and real signals
// with functions defined here.

// lookup returns the byte of a large constant table at x.
var lookup = redmap.FuncWith("lookup", func(_ context.Context, table []byte, x int) (byte, error) {
	return table[x%len(table)], nil
})

// pause waits d, or until ctx ends (then its error).
func pause(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// squareAfter returns a handle, name, that squares x after d.
func squareAfter(name string, d time.Duration) *redmap.Handle[int, int] {
	return redmap.Func(name, func(ctx context.Context, x int) (int, error) {
		if err := pause(ctx, d); err != nil {
			return 0, err
		}
		return x * x, nil
	})
}

var (
	// slowSquare returns x*x after about a millisecond, so a batch of it
	// is still running when a test kills or stops its workers.
	slowSquare = squareAfter("slowsq", time.Millisecond)
	// calmSquare squares x after 20 ms: a batch of thousands lasts seconds
	// on two workers, so that something meant to happen while it runs (a
	// reap, once per Poll) does.
	calmSquare = squareAfter("calmsq", 20*time.Millisecond)
)

// bigEcho returns s with "#" after it, after about a millisecond: fed
// bigInput's elements, its payloads and results are over broker.Inline, so
// they go beside the scripts (chaos runs use it).
var bigEcho = redmap.Func("bigecho", func(ctx context.Context, s string) (string, error) {
	if err := pause(ctx, time.Millisecond); err != nil {
		return "", err
	}
	return s + "#", nil
})

// bigInput returns n strings of 17,000 bytes or more, each its own.
func bigInput(n int) []string {
	xs := make([]string, n)
	for i := range xs {
		xs[i] = strings.Repeat(fmt.Sprintf("%08d", i), 2125+i%7)
	}
	return xs
}

// bigWant is what bigEcho returns for bigInput's element i.
func bigWant(i int) string { return strings.Repeat(fmt.Sprintf("%08d", i), 2125+i%7) + "#" }

// nap takes 50 ms and returns the id of the process that ran it.
var nap = redmap.Func("nap", func(ctx context.Context, _ int) (int, error) {
	if err := pause(ctx, 50*time.Millisecond); err != nil {
		return 0, err
	}
	return os.Getpid(), nil
})

// runSpan is when a run of spanned began and ended (Unix ns), and which
// process ran it.
type runSpan struct {
	Pid        int
	Start, End int64
}

// spanned sleeps x ms and returns the span of its run.
var spanned = redmap.Func("spanned", func(ctx context.Context, x int) (runSpan, error) {
	s := runSpan{Pid: os.Getpid(), Start: time.Now().UnixNano()}
	err := pause(ctx, time.Duration(x)*time.Millisecond)
	s.End = time.Now().UnixNano()
	return s, err
})

// poison kills the process that runs it on 13, and returns -x otherwise: a
// poison pill.
var poison = redmap.Func("poison", func(_ context.Context, x int) (int, error) {
	if x == 13 {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	return -x, nil
})

// table returns a deterministic table of n bytes.
func table(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

// runChild runs the process as a child if REDMAP_CHILD is set, and exits.
func runChild() {
	role := os.Getenv(harness.ChildEnv)
	if role == "" {
		return
	}
	rdb, err := childClient()
	queue := os.Getenv("REDMAP_QUEUE")
	switch {
	case err != nil:
	case role == "worker":
		err = childWorker(rdb, queue)
	case role == "manager":
		err = childManager(rdb, queue)
	case role == "manager-nap":
		err = childNapper(rdb, queue)
	case role == "manager-gate":
		err = childGater(rdb, queue)
	case role == "manager-map":
		err = childMapper(rdb, queue)
	case role == "manager-cancelled":
		err = childCancelled(rdb, queue)
	case role == "manager-durable":
		err = childDurable(rdb, queue)
	case role == "manager-pipeline":
		err = childPipeline(rdb, queue)
	default:
		err = fmt.Errorf("unknown child role %q", role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// childClient is the client a child process uses: of the Redis at
// REDMAP_URL, as a user's program connects (connect.URL).
func childClient() (redis.UniversalClient, error) { return connect.URL(os.Getenv("REDMAP_URL")) }

// childWorker serves lookup and square until SIGTERM, then prints its cache
// counters as "stats <json>".
func childWorker(rdb redis.UniversalClient, queue string) error {
	ms := func(env string) time.Duration {
		n, _ := strconv.Atoi(os.Getenv(env))
		return time.Duration(n) * time.Millisecond
	}
	concurrency, _ := strconv.Atoi(os.Getenv("REDMAP_CONCURRENCY"))
	if concurrency == 0 {
		concurrency = 4
	}
	prefetch, _ := strconv.Atoi(os.Getenv("REDMAP_PREFETCH"))
	opts := worker.Options{Queue: queue, Concurrency: concurrency, Prefetch: prefetch,
		Lease: ms("REDMAP_LEASE_MS"), Heartbeat: ms("REDMAP_HEARTBEAT_MS")}
	if path := os.Getenv("REDMAP_TRACE_FILE"); path != "" {
		// Spans are written as they end (a syncer, not a batcher), so that
		// those of a worker SIGKILLed later are on disk.
		tp, stopTracing, err := traceToFile(path)
		if err != nil {
			return err
		}
		defer stopTracing()
		opts.TracerProvider = tp
	}
	if path := os.Getenv("REDMAP_LOG_FILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		defer f.Close()
		opts.Logger = slog.New(slog.NewJSONHandler(f, nil))
	} else if os.Getenv("REDMAP_TEST_LOGDIR") != "" {
		// A chaos run's post-mortem: the harness keeps stderr in a file.
		opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	w, err := worker.New(rdb, opts)
	if err != nil {
		return err
	}
	hs := []redmap.AnyHandle{lookup, square, slowSquare, calmSquare, poison, sum, nap, traced, countedSquare, rated, capped, freeSquare, bigEcho, words, slowWords, slowSum, poisonWords, wide, spanned, straggle, straggleWords, tokens, slowTokens, upper, one, byLetter, top3, line,
		countedTokens, countedByLetter, countedLine}
	switch os.Getenv("REDMAP_TYPES") { // a build of the user's tasks package
	case "v1":
		hs = append(hs, v1.Count)
	case "v2":
		hs = append(hs, v2.Count)
	}
	if err := w.Register(hs...); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	fmt.Println("worker", w.ID())
	if err := w.Run(ctx); err != nil {
		return err
	}
	if err := writeRuns(os.Getenv("REDMAP_RUNS_FILE")); err != nil {
		return err
	}
	if err := writeStepRuns(os.Getenv("REDMAP_STEP_RUNS_FILE")); err != nil {
		return err
	}
	st, _ := json.Marshal(childStats{Cache: w.Stats().Cache, Worker: w.Stats()})
	fmt.Println("stats", string(st))
	return nil
}

// childStats is what a child worker prints when it stops.
type childStats struct {
	Cache  cache.Stats
	Worker worker.Stats
}

// stats stops a child worker with SIGTERM and returns what it printed.
func stats(t *testing.T, c *harness.Proc) childStats {
	t.Helper()
	c.Cmd.Process.Signal(syscall.SIGTERM)
	var st childStats
	if err := json.Unmarshal([]byte(c.Expect(t, "stats ")), &st); err != nil {
		t.Fatal(err)
	}
	if <-c.Exited(); c.Err() != nil {
		t.Fatalf("worker exited with %v", c.Err())
	}
	return st
}

// childManager submits a lookup batch over a constant of REDMAP_CONST_BYTES,
// prints "submitted", and waits to be killed.
func childManager(rdb redis.UniversalClient, queue string) error {
	n, _ := strconv.Atoi(os.Getenv("REDMAP_CONST_BYTES"))
	m, err := manager.New(rdb, manager.Options{Queue: queue, KeyTTL: 3 * time.Second, Shards: redistest.Shards()})
	if err != nil {
		return err
	}
	if _, err := manager.SubmitWith(context.Background(), m, lookup, table(n), []int{1, 2, 3}); err != nil {
		return err
	}
	fmt.Println("submitted")
	select {}
}

// childNapper submits a batch of 400 naps, prints "submitted", and waits
// to be killed.
func childNapper(rdb redis.UniversalClient, queue string) error {
	m, err := manager.New(rdb, manager.Options{Queue: queue, KeyTTL: 3 * time.Second, Poll: 100 * time.Millisecond})
	if err != nil {
		return err
	}
	if _, err := manager.Submit(context.Background(), m, nap, make([]int, 400), manager.ChunkSize(1)); err != nil {
		return err
	}
	fmt.Println("submitted", m.ID())
	select {}
}

// gateOpen holds every run of gate until it is closed (in the test
// process; a child only submits gate's tasks).
var gateOpen = make(chan struct{})

// gate returns its input once gateOpen is closed.
var gate = redmap.Func("gate", func(ctx context.Context, x int) (int, error) {
	select {
	case <-gateOpen:
		return x, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
})

// childGater submits a batch of 100 gate tasks (default KeyTTL, so its
// keys outlive it by a minute), prints "submitted <manager id>", and
// waits to be killed.
func childGater(rdb redis.UniversalClient, queue string) error {
	m, err := manager.New(rdb, manager.Options{Queue: queue, Poll: 100 * time.Millisecond})
	if err != nil {
		return err
	}
	if _, err := manager.Submit(context.Background(), m, gate, make([]int, 100), manager.ChunkSize(1)); err != nil {
		return err
	}
	fmt.Println("submitted", m.ID())
	select {}
}

// childMapper maps nap over 300 elements, one a task, publishing every
// 100 ms, prints "mapping <manager id>" before and "exact <n>" once every
// element has its value, and exits.
func childMapper(rdb redis.UniversalClient, queue string) error {
	m, err := manager.New(rdb, manager.Options{Queue: queue, Poll: 100 * time.Millisecond})
	if err != nil {
		return err
	}
	defer m.Close()
	fmt.Println("mapping", m.ID())
	ys, err := manager.Map(context.Background(), m, nap, make([]int, 300), manager.ChunkSize(1))
	if err != nil {
		return err
	}
	for i, y := range ys {
		if y == 0 {
			return fmt.Errorf("element %d has no value", i)
		}
	}
	fmt.Println("exact", len(ys))
	return nil
}

// childCancelled maps calmSquare over 3,000 elements, 10 a task,
// publishing every 100 ms, prints "mapping <manager id>" before, and once
// the call returns (an operator cancels it) "ended cancelled=<whether its
// error wraps redmap.ErrCancelled>", and exits.
func childCancelled(rdb redis.UniversalClient, queue string) error {
	m, err := manager.New(rdb, manager.Options{Queue: queue, Poll: 100 * time.Millisecond})
	if err != nil {
		return err
	}
	defer m.Close()
	fmt.Println("mapping", m.ID())
	_, err = manager.Map(context.Background(), m, calmSquare, make([]int, 3000), manager.ChunkSize(10))
	fmt.Println("ended", "cancelled="+strconv.FormatBool(errors.Is(err, redmap.ErrCancelled)), err)
	return nil
}

// startChild starts the test binary again as a child in role (see runChild).
func startChild(t *testing.T, role string, env ...string) *harness.Proc {
	t.Helper()
	return harness.Start(t, harness.Child(role, env))
}

// supervise keeps n child workers running, starting a new one whenever one
// exits, until stop (which the test defers, so that it runs before the
// children's own clean-ups). started reports how many it started in all.
func supervise(t *testing.T, n int, env ...string) (started func() int, stop func()) {
	t.Helper()
	return superviseWith(t, n, env, nil)
}

// superviseWith is supervise, calling onStart with each child it starts.
func superviseWith(t *testing.T, n int, env []string, onStart func(*harness.Proc)) (started func() int, stop func()) {
	t.Helper()
	redistest.Slow(t) // here, not in harness.Start: the children start in goroutines, which cannot skip t
	var mu sync.Mutex
	count := 0
	quit := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c := startChild(t, "worker", env...)
				c.Expect(t, "worker ")
				mu.Lock()
				count++
				mu.Unlock()
				if onStart != nil {
					onStart(c)
				}
				select {
				case <-c.Exited():
				case <-quit:
					c.Cmd.Process.Kill()
					<-c.Exited()
					return
				}
				select {
				case <-quit:
					return
				default:
				}
			}
		}()
	}
	var once sync.Once
	stop = func() { once.Do(func() { close(quit); wg.Wait() }) }
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return count
	}, stop
}

// countedRuns counts the runs of each element of countedSquare in this
// process: the function's own counter, written to REDMAP_RUNS_FILE when a
// child worker stops (writeRuns).
var countedRuns struct {
	sync.Mutex
	runs map[int]int
}

// countedSquare squares x after a millisecond, counting its runs.
var countedSquare = redmap.Func("countedsq", func(ctx context.Context, x int) (int, error) {
	countedRuns.Lock()
	if countedRuns.runs == nil {
		countedRuns.runs = make(map[int]int)
	}
	countedRuns.runs[x]++
	countedRuns.Unlock()
	if err := pause(ctx, time.Millisecond); err != nil {
		return 0, err
	}
	return x * x, nil
})

// writeRuns writes countedRuns to path, a line "x n" per element run, if
// path is set.
func writeRuns(path string) error {
	if path == "" {
		return nil
	}
	countedRuns.Lock()
	defer countedRuns.Unlock()
	var b []byte
	for x, n := range countedRuns.runs {
		b = fmt.Appendf(b, "%d %d\n", x, n)
	}
	return os.WriteFile(path, b, 0o600)
}

// readRuns reads the file writeRuns wrote at path: how many times each
// element ran in that worker process. A line that is not "x k" (an empty
// file too) fails the test.
func readRuns(t *testing.T, path string) map[int]int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	runs := make(map[int]int)
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var x, k int
		if _, err := fmt.Sscan(line, &x, &k); err != nil {
			t.Fatalf("runs file line %q: %v", line, err)
		}
		runs[x] += k
	}
	return runs
}

// childDurable runs a durable batch of countedSquare over 0..REDMAP_N-1
// named REDMAP_DURABLE, as REDMAP_MODE says: a Map ("map", the default),
// printing "results <n>" at every tenth of the elements; a MapReduce with
// sum ("reduce"); or a SubmitSeq read with Results ("seq"), printing as
// Map does. It prints "submitted" once the batch is, then "exact" once every
// output (or the fold) is right, each index read once, and exits.
func childDurable(rdb redis.UniversalClient, queue string) error {
	n, _ := strconv.Atoi(os.Getenv("REDMAP_N"))
	m, err := manager.New(rdb, manager.Options{Queue: queue})
	if err != nil {
		return err
	}
	defer m.Close()
	xs := make([]int, n)
	for i := range xs {
		xs[i] = i
	}
	ctx := context.Background()
	named := []manager.CallOption{manager.Durable(os.Getenv("REDMAP_DURABLE"))}
	if a, _ := strconv.Atoi(os.Getenv("REDMAP_ATTEMPTS")); a > 0 {
		named = append(named, manager.Attempts(a))
	}
	var b *manager.Batch[int]
	switch os.Getenv("REDMAP_MODE") {
	case "shuffle":
		docs := documents(n, 2000)
		fmt.Println("submitted")
		got, err := manager.ReduceByKey(ctx, m, slowWords, sum, docs, append(named, manager.Partitions(16), manager.ChunkSize(20))...)
		if err != nil {
			return err
		}
		if want := counts(docs); !maps.Equal(got, want) {
			return fmt.Errorf("%d keys counted, want %d, or some count differs", len(got), len(want))
		}
		fmt.Println("exact")
		return nil
	case "reduce":
		fmt.Println("submitted")
		got, err := manager.MapReduce(ctx, m, countedSquare, sum, xs, named...)
		if err != nil {
			return err
		}
		want := 0
		for _, x := range xs {
			want += x * x
		}
		if got != want {
			return fmt.Errorf("fold %d, want %d", got, want)
		}
		fmt.Println("exact")
		return nil
	}
	// At maxmemory a durable call's submit fails with ErrRedisFull and what
	// it queued stays: the same call, once Redis has room, takes the batch
	// over (TestDurableRedisFull). A program calls it again, as this one does,
	// for a minute at most.
	for start := time.Now(); ; {
		if os.Getenv("REDMAP_MODE") == "seq" {
			b, err = manager.SubmitSeq(ctx, m, countedSquare, slices.Values(xs), named...)
		} else {
			b, err = manager.Submit(ctx, m, countedSquare, xs, named...)
		}
		if !errors.Is(err, redmap.ErrRedisFull) || time.Since(start) > time.Minute {
			break
		}
		fmt.Fprintln(os.Stderr, "child: submit again:", err)
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	fmt.Println("submitted")
	seen := make([]bool, n)
	got, failed, step := 0, 0, max(n/10, 1)
	for r := range b.Results() {
		var te *redmap.TaskError
		typed := errors.As(r.Err, &te) && te.Err != nil
		if r.Err != nil && !typed || r.Err == nil && r.Value != r.Index*r.Index || seen[r.Index] {
			return fmt.Errorf("result %d: %d, %v (seen before: %v)", r.Index, r.Value, r.Err, seen[r.Index])
		}
		if r.Err != nil {
			failed++ // a typed error that says why: allowed
		}
		seen[r.Index] = true
		if got++; got%step == 0 {
			fmt.Println("results", got)
		}
	}
	ys, err := b.Wait(ctx)
	var be *redmap.BatchError
	if err != nil && !(errors.As(err, &be) && len(be.Failed) == failed) {
		return err
	}
	if got != n {
		return fmt.Errorf("%d results read, want %d", got, n)
	}
	var failedAt []int
	if be != nil {
		failedAt = be.Indexes()
	}
	for i, y := range ys { // none for a sequence
		if y != i*i && !slices.Contains(failedAt, i) {
			return fmt.Errorf("ys[%d] = %d, want %d", i, y, i*i)
		}
	}
	fmt.Println("exact", failed)
	return nil
}
