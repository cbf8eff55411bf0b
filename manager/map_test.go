package manager_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/harness"
	v1 "github.com/redmap/redmap/internal/typetest/v1/tasks"
	v2 "github.com/redmap/redmap/internal/typetest/v2/tasks"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

func TestMapTenThousandOrdered(t *testing.T) {
	b := setup(t)
	b.Worker(t, worker.Options{Concurrency: 4}, square)
	b.Worker(t, worker.Options{Concurrency: 4}, square)
	m := b.Manager(t, manager.Options{})

	for _, opt := range []manager.CallOption{nil, manager.ChunkSize(1), manager.ChunkSize(1000)} {
		var opts []manager.CallOption
		if opt != nil {
			opts = append(opts, opt)
		}
		ys, err := manager.Map(testCtx(t), m, square, ints(10_000), opts...)
		if err != nil {
			t.Fatal(err)
		}
		if len(ys) != 10_000 {
			t.Fatalf("got %d results, want 10000", len(ys))
		}
		for i, y := range ys {
			if y != i*i {
				t.Fatalf("ys[%d] = %d, want %d", i, y, i*i)
			}
		}
	}
	if d := m.Stats().Dropped; d != 0 {
		t.Errorf("manager dropped %d results, want 0", d)
	}
}

func TestMapEmpty(t *testing.T) {
	b := setup(t)
	m := b.Manager(t, manager.Options{})
	ys, err := manager.Map(testCtx(t), m, square, nil)
	if err != nil || len(ys) != 0 {
		t.Fatalf("got %v, %v; want no results and no error", ys, err)
	}
}

// Three managers share one queue and two workers; each must get exactly its
// own results, which name the manager they came from.
func TestThreeManagersOneQueue(t *testing.T) {
	b := setup(t)

	b.Worker(t, worker.Options{Concurrency: 3}, echo)
	b.Worker(t, worker.Options{Concurrency: 3}, echo)

	var wg sync.WaitGroup
	for k := range 3 {
		m := b.Manager(t, manager.Options{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			xs := make([]string, 3000+k)
			for i := range xs {
				xs[i] = fmt.Sprintf("m%d/%d", k, i)
			}
			ys, err := manager.Map(testCtx(t), m, echo, xs, manager.ChunkSize(7))
			if err != nil {
				t.Error(err)
				return
			}
			if len(ys) != len(xs) {
				t.Errorf("manager %d: %d results, want %d", k, len(ys), len(xs))
				return
			}
			for i := range xs {
				if ys[i] != xs[i] {
					t.Errorf("manager %d: ys[%d] = %q, want %q", k, i, ys[i], xs[i])
					return
				}
			}
			if d := m.Stats().Dropped; d != 0 {
				t.Errorf("manager %d dropped %d results", k, d)
			}
		}()
	}
	wg.Wait()
}

// A private batch runs only on the chosen worker, though another is idle.
func TestPrivateBatch(t *testing.T) {
	b := setup(t)
	// Two handles of one name and type; each worker's says who ran it.
	whoIs := func(name string) *redmap.Handle[int, string] {
		return redmap.Func("who", func(context.Context, int) (string, error) { return name, nil })
	}
	a := b.Worker(t, worker.Options{ID: "a-" + b.Queue, Concurrency: 2}, whoIs("a"))
	c := b.Worker(t, worker.Options{ID: "c-" + b.Queue, Concurrency: 2}, whoIs("c"))
	m := b.Manager(t, manager.Options{})
	harness.WaitLive(t, m, a.ID(), c.ID())

	for _, w := range []struct{ id, name string }{{a.ID(), "a"}, {c.ID(), "c"}} {
		ys, err := manager.Map(testCtx(t), m, whoIs("manager"), ints(500), manager.OnWorker(w.id), manager.ChunkSize(1))
		if err != nil {
			t.Fatal(err)
		}
		for i, y := range ys {
			if y != w.name {
				t.Fatalf("private batch for %s: element %d ran on %q", w.name, i, y)
			}
		}
	}

	_, err := manager.Map(testCtx(t), m, whoIs("manager"), ints(1), manager.OnWorker("nobody"))
	if !errors.Is(err, redmap.ErrNoWorker) {
		t.Fatalf("batch for an unknown worker: got %v, want ErrNoWorker", err)
	}
}

func TestResultsInCompletionOrder(t *testing.T) {
	b := setup(t)
	b.Worker(t, worker.Options{Concurrency: 4}, square)
	m := b.Manager(t, manager.Options{})

	batch, err := manager.Submit(testCtx(t), m, square, ints(2000), manager.ChunkSize(10))
	if err != nil {
		t.Fatal(err)
	}
	seen := make(map[int]bool)
	for r := range batch.Results() {
		if r.Err != nil || r.Value != r.Index*r.Index {
			t.Fatalf("result %+v", r)
		}
		if seen[r.Index] {
			t.Fatalf("index %d seen twice", r.Index)
		}
		seen[r.Index] = true
	}
	if len(seen) != 2000 {
		t.Fatalf("Results yielded %d elements, want 2000", len(seen))
	}
	ys, err := batch.Wait(testCtx(t))
	if err != nil || len(ys) != 2000 || ys[1999] != 1999*1999 {
		t.Fatalf("Wait after Results: %d results, err %v", len(ys), err)
	}
}

// Returned errors and panics fail their own elements only; Map returns every
// other output and a BatchError listing exactly the failed indexes.
func TestElementErrorsAndPanics(t *testing.T) {
	b := setup(t)
	picky := redmap.Func("picky", func(_ context.Context, x int) (int, error) {
		switch {
		case x%11 == 0:
			var m map[string]int
			//lint:ignore SA5000 a nil-map write is the real runtime panic this test wants
			m["boom"] = x
		case x%7 == 0:
			return 0, fmt.Errorf("no sevens: %d", x)
		}
		return -x, nil
	})
	b.Worker(t, worker.Options{Concurrency: 2}, picky)
	m := b.Manager(t, manager.Options{})

	for _, chunk := range []int{1, 10} {
		ys, err := manager.Map(testCtx(t), m, picky, ints(200), manager.ChunkSize(chunk))
		var be *redmap.BatchError
		if !errors.As(err, &be) {
			t.Fatalf("chunk %d: got %v, want a BatchError", chunk, err)
		}
		var want []int
		for i := range 200 {
			if i%11 == 0 || i%7 == 0 {
				want = append(want, i)
			} else if ys[i] != -i {
				t.Fatalf("chunk %d: ys[%d] = %d, want %d", chunk, i, ys[i], -i)
			}
		}
		if got := be.Indexes(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("chunk %d: failed indexes %v, want %v", chunk, got, want)
		}
		for _, te := range be.Failed {
			if te.Func != "picky" {
				t.Errorf("TaskError.Func = %q", te.Func)
			}
			switch {
			case te.Index%11 == 0:
				if !errors.Is(te, redmap.ErrPanic) || !strings.Contains(te.Stack, "map_test.go") || !strings.Contains(te.Error(), "nil map") {
					t.Errorf("element %d: want a panic with its stack, got %v (stack %q)", te.Index, te, te.Stack)
				}
			default:
				var re *redmap.RemoteError
				if !errors.As(te, &re) || re.Msg != fmt.Sprintf("no sevens: %d", te.Index) {
					t.Errorf("element %d: want the function's error, got %v", te.Index, te)
				}
			}
		}
	}
}

func TestUnknownFunctionAndTypeMismatch(t *testing.T) {
	b := setup(t)
	asText := redmap.Func("convert", func(_ context.Context, x int) (string, error) { return fmt.Sprint(x), nil })
	b.Worker(t, worker.Options{}, square, asText)
	// A worker takes no task it cannot run: these wait for one that can,
	// and fail after NoWorkerTimeout.
	m := b.Manager(t, manager.Options{Poll: 50 * time.Millisecond, NoWorkerTimeout: 300 * time.Millisecond})

	cube := redmap.Func("cube", func(_ context.Context, x int) (int, error) { return x * x * x, nil })
	_, err := manager.Map(testCtx(t), m, cube, ints(5), manager.ChunkSize(2))
	var be *redmap.BatchError
	if !errors.As(err, &be) || len(be.Failed) != 5 || !errors.Is(err, redmap.ErrUnknownFunc) {
		t.Fatalf("unknown function: got %v, want 5 elements failing with ErrUnknownFunc", err)
	}
	if !strings.Contains(err.Error(), `"cube"`) {
		t.Errorf("error %q does not name the function", err)
	}

	// The manager thinks "convert" returns an int; the worker's returns a string.
	asInt := redmap.Func("convert", func(_ context.Context, x int) (int, error) { return x, nil })
	_, err = manager.Map(testCtx(t), m, asInt, ints(3))
	if !errors.Is(err, redmap.ErrTypeMismatch) || !strings.Contains(err.Error(), "func(int) string") {
		t.Fatalf("type mismatch: got %v, want ErrTypeMismatch naming both types", err)
	}

	// The worker is still serving.
	ys, err := manager.Map(testCtx(t), m, square, ints(3))
	if err != nil || ys[2] != 4 {
		t.Fatalf("after failures: %v, %v", ys, err)
	}
}

func TestInputTooLarge(t *testing.T) {
	b := setup(t)
	m := b.Manager(t, manager.Options{MaxInputSize: 1 << 10})

	xs := []string{"a", "b", strings.Repeat("x", 2<<10), "d"}
	_, err := manager.Map(testCtx(t), m, echo, xs)
	var te *redmap.TaskError
	if !errors.As(err, &te) || te.Index != 2 || !errors.Is(err, redmap.ErrTooLarge) {
		t.Fatalf("got %v, want element 2 refused with ErrTooLarge", err)
	}
	// Nothing was submitted.
	if ks := b.Keys(t, "*{"+b.Queue+"}*"); len(ks) != 0 {
		t.Fatalf("keys after a refused submit: %v", ks)
	}
}

func TestUnencodableInputAndOutput(t *testing.T) {
	b := setup(t)
	chans := redmap.Func("chans", func(_ context.Context, _ chan int) (int, error) { return 1, nil })
	m := b.Manager(t, manager.Options{})
	_, err := manager.Map(testCtx(t), m, chans, []chan int{make(chan int)})
	if !errors.Is(err, redmap.ErrEncode) {
		t.Fatalf("unencodable input: got %v, want ErrEncode", err)
	}

	// An output msgpack cannot encode fails its element; the rest come back.
	type out struct{ F any }
	odd := redmap.Func("odd", func(_ context.Context, x int) (out, error) {
		if x == 1 {
			return out{F: make(chan int)}, nil
		}
		return out{F: x}, nil
	})
	b.Worker(t, worker.Options{}, odd)
	ys, err := manager.Map(testCtx(t), m, odd, ints(3), manager.ChunkSize(3))
	var be *redmap.BatchError
	if !errors.As(err, &be) || fmt.Sprint(be.Indexes()) != "[1]" || !errors.Is(err, redmap.ErrEncode) {
		t.Fatalf("unencodable output: got %v, want element 1 failing with ErrEncode", err)
	}
	if fmt.Sprint(ys[2].F) != "2" {
		t.Fatalf("ys[2] = %+v, want F=2", ys[2])
	}
}

func TestOptionsValidation(t *testing.T) {
	b := setup(t)
	cases := []struct {
		opts  manager.Options
		field string
	}{
		{manager.Options{}, "Queue"},
		{manager.Options{Queue: "a{b}"}, "Queue"},
		{manager.Options{Queue: "q", KeyTTL: -1}, "KeyTTL"},
		{manager.Options{Queue: "q", KeyTTL: 1}, "KeyTTL"},
		{manager.Options{Queue: "q", MaxInputSize: -1}, "MaxInputSize"},
		{manager.Options{Queue: "q", Poll: -1}, "Poll"},
	}
	for _, c := range cases {
		_, err := manager.New(b.Client, c.opts)
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("New(%+v): got %v, want an error naming %s", c.opts, err, c.field)
		}
	}
	wcases := []struct {
		opts  worker.Options
		field string
	}{
		{worker.Options{}, "Queue"},
		{worker.Options{Queue: "q", Concurrency: -1}, "Concurrency"},
		{worker.Options{Queue: "q", ID: "has space"}, "ID"},
		{worker.Options{Queue: "q", Heartbeat: 5e9, Lease: 1e9}, "Lease"},
	}
	for _, c := range wcases {
		_, err := worker.New(b.Client, c.opts)
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("worker.New(%+v): got %v, want an error naming %s", c.opts, err, c.field)
		}
	}
	var nilHandle *redmap.Handle[int, int]
	m := b.Manager(t, manager.Options{})
	if _, err := manager.Map(testCtx(t), m, nilHandle, ints(1)); err == nil {
		t.Error("Map with a nil handle: want an error")
	}
	if _, err := manager.Map(testCtx(t), m, square, ints(1), manager.ChunkSize(-1)); err == nil {
		t.Error("ChunkSize(-1): want an error")
	}
}

func TestHandleTwiceIsAnError(t *testing.T) {
	b := setup(t)
	w, err := worker.New(b.Client, worker.Options{Queue: b.Queue})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(square); err != nil {
		t.Fatal(err)
	}
	other := redmap.Func("square", func(_ context.Context, x int) (int, error) { return x, nil })
	if err := w.Register(other); !errors.Is(err, redmap.ErrDuplicateFunc) {
		t.Fatalf("second square: got %v, want ErrDuplicateFunc", err)
	}
	cube := redmap.Func("cube", func(_ context.Context, x int) (int, error) { return x, nil })
	if err := w.Register(cube, cube); !errors.Is(err, redmap.ErrDuplicateFunc) {
		t.Fatalf("cube twice in one call: got %v, want ErrDuplicateFunc", err)
	}
	empty := redmap.Func("", func(_ context.Context, x int) (int, error) { return x, nil })
	if err := w.Register(empty); err == nil {
		t.Fatal("empty name: want an error")
	}
}

func TestBatchErrorMessage(t *testing.T) {
	be := &redmap.BatchError{Total: 10}
	for _, i := range []int{3, 1, 2} {
		be.Failed = append(be.Failed, &redmap.TaskError{Index: i, Func: "f", Err: redmap.ErrPanic})
	}
	sort.Slice(be.Failed, func(i, j int) bool { return be.Failed[i].Index < be.Failed[j].Index })
	if got := be.Error(); got != "redmap: 3 of 10 elements failed: 3 elements (1, 2, 3): function panicked" {
		t.Fatalf("message %q", got)
	}
}

// An output type the manager cannot decode into (an interface with methods)
// is refused with a clear error by both sides, before anything runs.
func TestUndecodableOutputType(t *testing.T) {
	b := setup(t)
	stringer := redmap.Func("stringer", func(_ context.Context, x int) (fmt.Stringer, error) {
		return time.Duration(x), nil
	})
	w, err := worker.New(b.Client, worker.Options{Queue: b.Queue})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(stringer); !errors.Is(err, redmap.ErrTypeMismatch) || !strings.Contains(err.Error(), "fmt.Stringer") {
		t.Fatalf("Handle: got %v, want ErrTypeMismatch naming fmt.Stringer", err)
	}
	m := b.Manager(t, manager.Options{})
	if _, err := manager.Map(testCtx(t), m, stringer, ints(3)); !errors.Is(err, redmap.ErrTypeMismatch) {
		t.Fatalf("Map: got %v, want ErrTypeMismatch", err)
	}
}

// A batch whose only live workers' tasks.Doc has other fields than the
// manager's (both print as tasks.Doc) is never taken by them; it fails, after
// NoWorkerTimeout, with ErrTypeMismatch naming the first difference, instead
// of decoding into zero values.
func TestTypeMismatchOfSameNamedTypes(t *testing.T) {
	b := setup(t)
	b.Worker(t, worker.Options{}, v2.Count)
	m := b.Manager(t, manager.Options{Poll: 50 * time.Millisecond, NoWorkerTimeout: 300 * time.Millisecond})
	out, err := manager.Map(testCtx(t), m, v1.Count, []v1.Doc{{ID: "a", Text: "two words"}})
	t.Logf("%v", err)
	if !errors.Is(err, redmap.ErrTypeMismatch) || !strings.Contains(err.Error(), "the manager has In.Text (string), the worker does not") {
		t.Fatalf("got %v, %v; want ErrTypeMismatch naming In.Text", out, err)
	}
	if out[0] != (v1.Out{}) {
		t.Fatalf("output %+v alongside the error, want the zero value", out[0])
	}
}

// A private batch sent the moment its worker's Run starts, as a one-process
// program does (go w.Run(ctx); Map(..., OnWorker(w.ID()))), waits for the
// worker to register rather than failing with ErrNoWorker.
func TestPrivateBatchRightAfterRun(t *testing.T) {
	b := setup(t)
	w, err := worker.New(b.Client, worker.Options{Queue: b.Queue, Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(square); err != nil {
		t.Fatal(err)
	}
	m := b.Manager(t, manager.Options{})
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("worker run: %v", err)
		}
	})
	ys, err := manager.Map(testCtx(t), m, square, ints(10), manager.OnWorker(w.ID()))
	if err != nil || ys[9] != 81 {
		t.Fatalf("Map on a worker whose Run just started: %v, %v", ys, err)
	}
}
