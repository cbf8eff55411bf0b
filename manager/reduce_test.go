package manager_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// sum is the reducer the tests fold with (child workers register it too).
var sum = redmap.Reduce("sum", func(_ context.Context, a, b int) (int, error) { return a + b, nil })

func sumOfSquares(n int) int {
	s := 0
	for i := range n {
		s += i * i
	}
	return s
}

// MapReduce folds on the workers and in the manager to the exact sum,
// whatever the chunk size, with several workers.
func TestMapReduceSum(t *testing.T) {
	b := setup(t)
	b.Worker(t, worker.Options{Concurrency: 2}, square, sum)
	b.Worker(t, worker.Options{Concurrency: 2}, square, sum)
	m := b.Manager(t, manager.Options{})
	for _, opts := range [][]manager.CallOption{nil, {manager.ChunkSize(1)}, {manager.ChunkSize(7)}, {manager.ChunkSize(5000)}} {
		got, err := manager.MapReduce(testCtx(t), m, square, sum, ints(20_000), opts...)
		if err != nil || got != sumOfSquares(20_000) {
			t.Fatalf("MapReduce %d options: %d, %v; want %d", len(opts), got, err, sumOfSquares(20_000))
		}
	}
	if got, err := manager.MapReduce(testCtx(t), m, square, sum, nil); err != nil || got != 0 {
		t.Fatalf("MapReduce of nothing: %d, %v; want 0", got, err)
	}
	if _, err := manager.MapReduce[int, int](testCtx(t), m, square, nil, ints(3)); err == nil || !strings.Contains(err.Error(), "nil reducer") {
		t.Fatalf("MapReduce without a reducer: %v", err)
	}
}

// Only partials travel back: on a server of its own, a MapReduce sends
// Redis far fewer bytes than a Map of the same input, whose outputs all
// travel.
func TestMapReduceMovesPartials(t *testing.T) {
	t.Parallel()
	b := harness.On(t, redistest.Start(t))
	b.Worker(t, worker.Options{}, square, sum)
	m := b.Manager(t, manager.Options{})
	in := func() int64 {
		s := b.Client.InfoMap(context.Background(), "stats").Item("Stats", "total_net_input_bytes")
		n, _ := strconv.ParseInt(s, 10, 64)
		return n
	}
	xs := make([]int, 50_000)
	for i := range xs {
		xs[i] = 1 << 20 // outputs of 9 bytes each
	}
	before := in()
	if _, err := manager.Map(testCtx(t), m, square, xs, manager.ChunkSize(1000)); err != nil {
		t.Fatal(err)
	}
	mapBytes := in() - before
	before = in()
	if got, err := manager.MapReduce(testCtx(t), m, square, sum, xs, manager.ChunkSize(1000)); err != nil || got != len(xs)<<40 {
		t.Fatalf("MapReduce: %d, %v", got, err)
	}
	reduceBytes := in() - before
	t.Logf("bytes sent to Redis: Map %d, MapReduce %d (inputs included in both)", mapBytes, reduceBytes)
	if reduceBytes*4 > mapBytes*3 {
		t.Fatalf("MapReduce sent %d bytes to Redis, Map %d: the outputs travelled", reduceBytes, mapBytes)
	}
}

// A failed element is left out of the fold and named; the fold of the
// others is exact.
func TestMapReduceFailedElements(t *testing.T) {
	b := setup(t)
	odd := redmap.Func("oddfails", func(_ context.Context, x int) (int, error) {
		if x%10 == 3 {
			return 0, fmt.Errorf("no %d", x)
		}
		return x, nil
	})
	b.Worker(t, worker.Options{}, odd, sum)
	m := b.Manager(t, manager.Options{})
	got, err := manager.MapReduce(testCtx(t), m, odd, sum, ints(1000), manager.ChunkSize(9))
	var be *redmap.BatchError
	if !errors.As(err, &be) || len(be.Failed) != 100 {
		t.Fatalf("got %v, want a BatchError of the 100 elements ending in 3", err)
	}
	for _, f := range be.Failed {
		if f.Index%10 != 3 {
			t.Fatalf("element %d named failed", f.Index)
		}
	}
	want := 0
	for i := range 1000 {
		if i%10 != 3 {
			want += i
		}
	}
	if got != want {
		t.Fatalf("fold of the others: %d, want %d", got, want)
	}
}

// A reducer that fails fails the elements whose output it could not fold
// in, with ErrReduce: only the one output that never needed folding is left.
func TestMapReduceReducerFails(t *testing.T) {
	b := setup(t)
	never := redmap.Reduce("never", func(_ context.Context, a, b int) (int, error) { return 0, errors.New("cannot fold") })
	panics := redmap.Reduce("panics", func(_ context.Context, a, b int) (int, error) { panic("boom") })
	b.Worker(t, worker.Options{}, square, never, panics)
	m := b.Manager(t, manager.Options{})
	for _, red := range []*redmap.Reducer[int]{never, panics} {
		got, err := manager.MapReduce(testCtx(t), m, square, red, ints(50), manager.ChunkSize(4))
		var be *redmap.BatchError
		if !errors.As(err, &be) || len(be.Failed) != 49 || !errors.Is(err, redmap.ErrReduce) {
			t.Fatalf("%s: got %v, want 49 elements failing with ErrReduce", red.Name(), err)
		}
		left := slices.IndexFunc(ints(50), func(i int) bool {
			return !slices.ContainsFunc(be.Failed, func(f *redmap.TaskError) bool { return f.Index == i })
		})
		if got != left*left {
			t.Fatalf("%s: fold %d, want %d, the square of the one element not failed (%d)", red.Name(), got, left*left, left)
		}
	}
}

// A MapReduce whose reducer no live worker registered waits for one, and
// fails with ErrUnknownFunc naming the reducer after NoWorkerTimeout.
func TestMapReduceUnknownReducer(t *testing.T) {
	b := setup(t)
	b.Worker(t, worker.Options{}, square)
	m := b.Manager(t, manager.Options{Poll: 50 * time.Millisecond, NoWorkerTimeout: 300 * time.Millisecond})
	_, err := manager.MapReduce(testCtx(t), m, square, sum, ints(20))
	if !errors.Is(err, redmap.ErrUnknownFunc) || !strings.Contains(err.Error(), `registered "sum"`) {
		t.Fatalf("got %v, want ErrUnknownFunc naming the reducer", err)
	}
}

// Worker processes SIGKILLed and SIGSTOPped past their lease in the middle
// of a MapReduce: every partial is counted exactly once, so the total is
// exact.
func TestFaultMapReduceWorkersDie(t *testing.T) {
	b := setup(t)
	a, c, m := twoWorkers(t, b)
	started := make(chan struct{})
	go func() {
		// Once both hold tasks, kill one and stall the other past its lease.
		held := func(p string) int64 {
			return b.Client.SCard(context.Background(), keys.Held("redmap", b.Queue, p)).Val()
		}
		eventually(t, "both workers hold tasks", func() bool { return held(a.ID) > 0 && held(c.ID) > 0 })
		a.Cmd.Process.Signal(syscall.SIGKILL)
		c.Cmd.Process.Signal(syscall.SIGSTOP)
		close(started)
	}()
	third := startChild(t, "worker", childEnv(b)...)
	third.Expect(t, "worker ")
	got, err := manager.MapReduce(testCtx(t), m, slowSquare, sum, ints(6000), manager.ChunkSize(20))
	<-started
	c.Cmd.Process.Signal(syscall.SIGCONT)
	if err != nil || got != sumOfSquares(6000) {
		t.Fatalf("MapReduce with workers dying: %d, %v; want %d", got, err, sumOfSquares(6000))
	}
	if <-a.Exited(); a.Err() == nil || !strings.Contains(a.Err().Error(), "killed") {
		t.Fatalf("worker a: %v, want killed", a.Err())
	}
	t.Logf("sum of squares of 6000 elements exact (%d) with one worker killed and one stopped past its lease", got)
}

// redmap.Rand gives each element a stream fixed by the batch seed and its
// index: the same outputs with other workers, chunk sizes and retries;
// another seed gives others.
func TestRandReproducible(t *testing.T) {
	b := setup(t)
	run := func(workers int, opts ...manager.CallOption) []uint64 {
		t.Helper()
		// Every seventh element fails its first attempt after drawing,
		// and is retried: the retry starts its stream again.
		var tried sync.Map
		draw := redmap.Func("draw", func(ctx context.Context, x int) (uint64, error) {
			r := redmap.Rand(ctx)
			v := r.Uint64()
			if _, again := tried.LoadOrStore(x, true); !again && x%7 == 0 {
				return 0, redmap.Retryable(errors.New("flaky"))
			}
			return v ^ redmap.Rand(ctx).Uint64(), nil
		})
		other := *b
		other.Queue = fmt.Sprintf("%s.%d.%d", b.Queue, workers, len(opts))
		for range workers {
			other.Worker(t, worker.Options{Concurrency: 2}, draw)
		}
		m := other.Manager(t, manager.Options{})
		ys, err := manager.Map(testCtx(t), m, draw, ints(1000), opts...)
		if err != nil {
			t.Fatal(err)
		}
		return ys
	}
	one := run(1, manager.Seed(7), manager.ChunkSize(1), manager.Attempts(10))
	three := run(3, manager.Seed(7), manager.ChunkSize(64), manager.Attempts(10))
	if !slices.Equal(one, three) {
		t.Fatal("the same seed gave other outputs with other workers and chunk sizes")
	}
	other := run(2, manager.Seed(8), manager.Attempts(10))
	same := 0
	for i := range one {
		if one[i] == other[i] {
			same++
		}
	}
	if same > 0 {
		t.Fatalf("seeds 7 and 8 agree on %d of 1000 outputs", same)
	}
	t.Logf("seed 7: outputs[0:3] = %d, identical with 1 worker/chunk 1 and 3 workers/chunk 64; seed 8 differs on every element", one[:3])
}

// MapReduceWith folds a function that takes constant data.
func TestMapReduceWith(t *testing.T) {
	b := setup(t)
	plusC := redmap.FuncWith("plusc", func(_ context.Context, c []int, x int) (int, error) { return c[x%len(c)] + x, nil })
	b.Worker(t, worker.Options{}, plusC, sum)
	m := b.Manager(t, manager.Options{})
	table := []int{100, 200, 300}
	got, err := manager.MapReduceWith(testCtx(t), m, plusC, table, sum, ints(3000), manager.ChunkSize(7))
	want := 0
	for x := range 3000 {
		want += table[x%3] + x
	}
	if err != nil || got != want {
		t.Fatalf("MapReduceWith: %d, %v; want %d", got, err, want)
	}
}
