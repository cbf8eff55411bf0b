package worker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// The faults of a worker's calls that carry many bytes: a slow link
// between it and Redis, a Redis at maxmemory. Each test has a redis-server
// of its own.

// blob64 returns 64 KiB that say which element made them.
var blob64 = redmap.Func("blob64", func(_ context.Context, i int) ([]byte, error) { return blobOf(i, 64<<10), nil })

// blobOf is n bytes that start with i and repeat its low byte.
func blobOf(i, n int) []byte {
	b := bytes.Repeat([]byte{byte(i)}, n)
	copy(b, fmt.Sprintf("%d;", i))
	return b
}

// callLog counts the worker's failed Redis calls by operation.
type callLog struct {
	mu     sync.Mutex
	failed map[string]int
	last   map[string]string
}

func (l *callLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *callLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *callLog) WithGroup(string) slog.Handler            { return l }
func (l *callLog) Handle(_ context.Context, r slog.Record) error {
	if !strings.HasPrefix(r.Message, "Redis call failed") {
		return nil
	}
	var op, msg string
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "op":
			op = a.Value.String()
		case "err":
			msg = a.Value.String()
		}
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failed == nil {
		l.failed, l.last = map[string]int{}, map[string]string{}
	}
	l.failed[op]++
	l.last[op] = msg
	return nil
}

func (l *callLog) count(op string) (int, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failed[op], l.last[op]
}

// A worker behind a 10 MB/s link (80 Mbit/s) reports 1,500 outputs of
// 64 KiB (96 MiB, 10 s of the link, three times a call's read timeout):
// every one arrives, exact, and finishes do not time out on the
// way (each call carries at most broker.CallBytes). Before calls were bounded,
// every finish timed out and 3 of 3,000 arrived in 120 s; a machine starved
// of CPU (a load of 12 on 2 cores) still saw a few time out, retried.
func TestSlowLinkFinishes(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	proxy.Throttle(10 << 20)
	e := harness.On(t, srv)
	slow := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { slow.Close() })
	var calls callLog
	w, err := worker.New(slow, worker.Options{Queue: e.Queue, Logger: slog.New(&calls)})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(blob64); err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(wctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("worker run: %v", err)
		}
	})
	m := e.Manager(t, manager.Options{})
	// A generous bound on ending at all: alone, on two busy cores with
	// -race, it takes 80 s.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const n = 1500
	in := make([]int, n)
	for i := range in {
		in[i] = i
	}
	start := time.Now()
	out, err := manager.Map(ctx, m, blob64, in)
	if err != nil {
		failed, last := calls.count("finish")
		t.Fatalf("Map over a 10 MB/s link after %v: %v (finish failed %d times, last: %s)", time.Since(start).Round(time.Millisecond), err, failed, last)
	}
	for i, b := range out {
		if !bytes.Equal(b, blobOf(i, 64<<10)) {
			t.Fatalf("output %d is not its element's", i)
		}
	}
	failed, last := calls.count("finish")
	t.Logf("%d × 64 KiB over a 10 MB/s link in %v; finish failed %d times %s", n, time.Since(start).Round(time.Millisecond), failed, last)
	// At least n×64 KiB / CallBytes calls (94): a tenth of them may time
	// out on a starved machine (two make tests at once saw 11), against
	// every one of them with unbounded calls.
	if most := n * (64 << 10) / broker.CallBytes / 10; failed > most {
		t.Errorf("finish failed %d times over a slow link that answers, want at most %d, a tenth of its calls (last: %s)", failed, most, last)
	}
}

// fullRedis starts a redis-server of maxmemory 20 MB, noeviction (the
// documented setting).
func fullRedis(t *testing.T) *redistest.Server {
	t.Helper()
	return redistest.Start(t, "--maxmemory", "20mb", "--maxmemory-policy", "noeviction")
}

// At maxmemory, a durable batch of 2,000 outputs of 64 KiB (128 MiB, six
// times what Redis holds): every element ends, with its value or
// ErrRedisFull, no task runs more often than the attempt budget allows,
// and a Map of 100 small outputs, submitted meanwhile to the same workers,
// completes: the big batch's refused results never hold back its.
func TestRedisFullEndsElements(t *testing.T) {
	if testing.Short() {
		t.Skip("128 MiB of outputs refused and retried at maxmemory: over a minute")
	}
	t.Parallel()
	srv := fullRedis(t)
	e := harness.On(t, srv)
	var runs sync.Map // element -> *atomic.Int32
	counted := redmap.Func("blob64counted", func(_ context.Context, i int) ([]byte, error) {
		c, _ := runs.LoadOrStore(i, new(atomic.Int32))
		c.(*atomic.Int32).Add(1)
		return blobOf(i, 64<<10), nil
	})
	// The small Map's elements return once the big batch has an element
	// failed with ErrRedisFull: their results come while Redis is full.
	full := make(chan struct{})
	var fullOnce sync.Once
	squareWhenFull := redmap.Func("squareWhenFull", func(ctx context.Context, x int) (int, error) {
		select {
		case <-full:
		case <-ctx.Done():
		}
		return x * x, nil
	})
	// The workers' and the manager's logs, shown if the test fails.
	var logs harness.LogBuffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the log:\n%s", logs.String())
		}
	})
	log := slog.New(slog.NewTextHandler(&logs, nil))
	for i := range 2 {
		// The default lease (10 s): a worker leaves after 3 leases without
		// reporting anything, and at maxmemory even an element's
		// ErrRedisFull may be refused for several seconds in a row.
		_, stop, ran := e.StartWorker(t, worker.Options{Concurrency: 2, Heartbeat: 200 * time.Millisecond, Logger: log.With("worker", i)}, counted, squareWhenFull)
		t.Cleanup(func() {
			stop()
			// A worker that could report nothing, not even an element's
			// ErrRedisFull, for 3 leases leaves, saying so: what it held
			// is run again elsewhere, or fails, as the checks below see.
			if err := <-ran; err != nil && !strings.Contains(err.Error(), "no result could be reported") {
				t.Errorf("worker run: %v", err)
			} else if err != nil {
				t.Logf("a worker left: %v", err)
			}
		})
	}
	m := e.Manager(t, manager.Options{Poll: 200 * time.Millisecond, Logger: log.With("manager", true)})
	// A bound against a hang, not on speed: alone, the batch ends in about
	// a minute on one server and 3 on a queue of 3 shards (a Cluster's three
	// masters each at maxmemory); beside the rest of make test-cluster on 2
	// cores it once had 1,433 of its 2,000 elements at 8 minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	const n = 2000
	in := make([]int, n)
	for i := range in {
		in[i] = i
	}
	start := time.Now()
	batch, err := manager.Submit(ctx, m, counted, in, manager.Durable("full-"+e.Queue), manager.ChunkSize(1))
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	// The small Map: one task, which holds one of the four slots until
	// Redis is full.
	small, err := manager.Submit(ctx, m, squareWhenFull, ints(100), manager.ChunkSize(100))
	if err != nil {
		t.Fatalf("submit the small Map: %v", err)
	}
	smallDone := make(chan error, 1)
	go func() {
		ys, err := small.Wait(ctx)
		if err == nil {
			for i, y := range ys {
				if y != i*i {
					err = fmt.Errorf("ys[%d] = %d", i, y)
					break
				}
			}
		}
		smallDone <- err
	}()

	var values, refused atomic.Int32
	ended := make(chan error, 1)
	go func() {
		for r := range batch.Results() {
			switch {
			case r.Err == nil:
				if !bytes.Equal(r.Value, blobOf(r.Index, 64<<10)) {
					ended <- fmt.Errorf("element %d: a wrong value", r.Index)
					return
				}
				values.Add(1)
			case errors.Is(r.Err, redmap.ErrRedisFull):
				fullOnce.Do(func() { close(full) })
				refused.Add(1)
			default:
				ended <- fmt.Errorf("element %d: %w, want its value or ErrRedisFull", r.Index, r.Err)
				return
			}
		}
		ended <- nil
	}()
	select {
	case err := <-ended:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatalf("after %v: %d values, %d ErrRedisFull of %d", time.Since(start).Round(time.Millisecond), values.Load(), refused.Load(), n)
	}
	if v, f := values.Load(), refused.Load(); v+f != n {
		t.Fatalf("%d values and %d ErrRedisFull of %d elements", v, f, n)
	}
	most := int32(0)
	runs.Range(func(_, v any) bool { most = max(most, v.(*atomic.Int32).Load()); return true })
	t.Logf("durable batch at maxmemory: %d values, %d ErrRedisFull in %v; an element ran at most %d times", values.Load(), refused.Load(), time.Since(start).Round(time.Millisecond), most)
	if most > 4 {
		t.Errorf("an element ran %d times", most)
	}
	if refused.Load() == 0 {
		t.Errorf("128 MiB of durable results fit in 20 MB?")
	}
	if err := <-smallDone; err != nil {
		t.Errorf("a 100-element Map beside it: %v", err)
	}
}

func ints(n int) []int {
	xs := make([]int, n)
	for i := range xs {
		xs[i] = i
	}
	return xs
}

// One output of 25 MiB, larger than Redis's maxmemory, fails with
// ErrRedisFull within a bound, and its task is not taken again and again.
func TestRedisFullLargeOutput(t *testing.T) {
	t.Parallel()
	srv := fullRedis(t)
	e := harness.On(t, srv)
	var ran atomic.Int32
	huge := redmap.Func("huge", func(_ context.Context, i int) ([]byte, error) {
		ran.Add(1)
		return blobOf(i, 25<<20), nil
	})
	e.Worker(t, worker.Options{Heartbeat: 200 * time.Millisecond, Lease: 2 * time.Second}, huge)
	m := e.Manager(t, manager.Options{Poll: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	_, err := manager.Map(ctx, m, huge, []int{1})
	t.Logf("one 25 MiB output at maxmemory 20 MB: %v after %v, run %d times", err, time.Since(start).Round(time.Millisecond), ran.Load())
	if !errors.Is(err, redmap.ErrRedisFull) && !errors.Is(err, redmap.ErrTooLarge) {
		t.Fatalf("got %v, want ErrRedisFull or ErrTooLarge", err)
	}
	if n := ran.Load(); n > 4 {
		t.Errorf("the task ran %d times", n)
	}
}

// A worker whose finishes never get through while its heartbeats do (a
// link that cuts every connection every 300 ms and carries 100 KB/s: a
// result of 64 KiB never crosses, a heartbeat does) leaves after 3 leases:
// Run returns why, its tasks are reaped, and, with no other worker, the
// batch ends with ErrNoWorker rather than waiting for ever.
func TestWorkerThatCannotReportLeaves(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	e := harness.On(t, srv)
	cut := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { cut.Close() })
	// The first task runs until the link is cut: its result, and those
	// after it, never get through.
	var runs atomic.Int32
	started, cutting := make(chan struct{}), make(chan struct{})
	var once sync.Once
	counted := redmap.Func("blob64runs", func(ctx context.Context, i int) ([]byte, error) {
		runs.Add(1)
		once.Do(func() { close(started) })
		select {
		case <-cutting:
		case <-ctx.Done():
		}
		return blobOf(i, 64<<10), nil
	})
	w, err := worker.New(cut, worker.Options{Queue: e.Queue, Heartbeat: 200 * time.Millisecond, Lease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(counted); err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(context.Background())
	defer stop()
	ran := make(chan error, 1)
	go func() { ran <- w.Run(wctx) }()
	m := e.Manager(t, manager.Options{Poll: 200 * time.Millisecond, NoWorkerTimeout: 2 * time.Second})
	// The Map's 2 s without a worker must count from a worker that serves:
	// on a loaded machine the worker's start can take longer than that.
	harness.WaitLive(t, m, w.ID())

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	mapped := make(chan error, 1)
	go func() {
		_, err := manager.Map(ctx, m, counted, []int{1, 2, 3}, manager.ChunkSize(1))
		mapped <- err
	}()
	select {
	case <-started:
	case err := <-mapped:
		t.Fatalf("Map ended before any task ran: %v", err)
	case <-ctx.Done():
		t.Fatal("no task ran")
	}
	proxy.Throttle(100 << 10)
	go func() {
		tick := time.NewTicker(300 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				proxy.DropAll()
			}
		}
	}()
	close(cutting)
	start := time.Now()
	select {
	case err := <-ran:
		t.Logf("worker left after %v: %v", time.Since(start).Round(time.Millisecond), err)
		if err == nil || !strings.Contains(err.Error(), "no result could be reported") {
			t.Errorf("Run returned %v, want why it left", err)
		}
	case <-ctx.Done():
		t.Fatalf("the worker stayed for %v, its tasks run %d times", time.Since(start).Round(time.Second), runs.Load())
	}
	select {
	case err := <-mapped:
		t.Logf("Map after %v: %v; tasks run %d times", time.Since(start).Round(time.Millisecond), err, runs.Load())
		if !errors.Is(err, redmap.ErrNoWorker) {
			t.Errorf("Map: %v, want ErrNoWorker", err)
		}
	case <-ctx.Done():
		t.Fatalf("Map did not end in %v", time.Since(start).Round(time.Second))
	}
}
