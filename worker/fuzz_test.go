package worker

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/cache"
	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/engine"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
)

// The whole path of a task on a worker (decode, resolve, fetch and decode
// its constant, run, encode the result) on bytes anyone with access to
// Redis could write: it never panics, always gives a result its manager can
// read, and allocates within a stated multiple of the bytes it read.

type fuzzDoc struct {
	ID    uint16
	Name  string
	Score float64
	Tags  []int8
	Attrs map[string]uint32
	Next  *fuzzDoc
}

var (
	fuzzSquare = redmap.Func("fuzz-square", func(_ context.Context, x int) (int, error) { return x * x, nil })
	fuzzDocs   = redmap.Func("fuzz-docs", func(_ context.Context, d fuzzDoc) (int, error) { return len(d.Name) + len(d.Tags), nil })
	fuzzNarrow = redmap.Func("fuzz-narrow", func(_ context.Context, x uint8) (int8, error) { return int8(x / 2), nil })
	fuzzAny    = redmap.Func("fuzz-any", func(_ context.Context, x any) (any, error) { return x, nil })
	fuzzLookup = redmap.FuncWith("fuzz-lookup", func(_ context.Context, table map[string][]float64, k string) (float64, error) {
		if v := table[k]; len(v) > 0 {
			return v[0], nil
		}
		return 0, errors.New("no such key")
	})
	fuzzSum   = redmap.Reduce("fuzz-sum", func(_ context.Context, a, b int) (int, error) { return a + b, nil })
	fuzzWords = redmap.Emit("fuzz-words", func(_ context.Context, s string, emit func(string, int)) error {
		for _, w := range strings.Fields(s) {
			emit(w, 1)
		}
		return nil
	})
)

// fuzzShuffle sets a task of fuzzWords as a map/reduce by key's, of phase.
func fuzzShuffle(phase int) func(*codec.Task) {
	return func(t *codec.Task) {
		t.Reduce, t.ReduceSig = fuzzSum.Name(), fuzzSum.Signature()
		t.Shuffle, _ = wire.EncodeShuffle(&wire.Shuffle{Job: "fuzz", Parts: 3, Phase: phase, TTL: 60_000})
	}
}

// fuzzHarness is one worker over a real redis-server, made once per fuzzing
// process.
type fuzzHarness struct {
	w     *Worker
	store *cache.Store
	table cache.Ref // a constant fuzzLookup's seeds name
}

var (
	fuzzOnce sync.Once
	fuzzH    *fuzzHarness
	fuzzErr  error
)

func harness(t *testing.T) *fuzzHarness {
	fuzzOnce.Do(func() {
		// A client of the process's own, not the test's: the harness
		// outlives the first input.
		client := redis.NewClient(&redis.Options{Addr: redistest.Shared(t).Addr()})
		w, err := New(client, Options{Queue: "fuzz", Prefix: "fuzz" + strconv.Itoa(time.Now().Nanosecond())})
		if err != nil {
			fuzzErr = err
			return
		}
		if err := w.Register(fuzzSquare, fuzzDocs, fuzzNarrow, fuzzAny, fuzzLookup, fuzzSum, fuzzWords); err != nil {
			fuzzErr = err
			return
		}
		store := cache.NewStore(client, w.opts.Prefix, 64)
		b, _ := codec.EncodeValue(&map[string][]float64{"a": {1.5}, "b": {2, 3}})
		ref, _, err := store.Put(context.Background(), b, "fuzz", time.Hour)
		fuzzH, fuzzErr = &fuzzHarness{w: w, store: store, table: ref}, err
	})
	if fuzzErr != nil {
		t.Fatal(fuzzErr)
	}
	return fuzzH
}

// fuzzTask is a well-formed task of h over xs, a seed.
func fuzzTask[In any](h interface {
	Name() string
	Signature() string
}, xs []In, mod func(*codec.Task)) []byte {
	in, err := codec.EncodeElements(xs, 0)
	if err != nil {
		panic(err)
	}
	t := &codec.Task{Func: h.Name(), Sig: h.Signature(), Count: len(xs), Input: in, Attempts: 1}
	if mod != nil {
		mod(t)
	}
	b, err := codec.EncodeTask(t)
	if err != nil {
		panic(err)
	}
	return b
}

// maxTaskAlloc is the stated bound on a worker's allocation for one task of n
// bytes whose functions allocate nothing themselves: 64n, plus a fixed
// allowance for the result, the logger and the trace machinery.
func maxTaskAlloc(n int) uint64 { return 64*uint64(n) + 256<<10 }

func FuzzTaskPath(f *testing.F) {
	f.Add(fuzzTask(fuzzSquare, []int{1, 2, 3}, nil), []byte{})
	f.Add(fuzzTask(fuzzSquare, []int{1, 2, 3}, func(t *codec.Task) { t.Reduce, t.ReduceSig = fuzzSum.Name(), fuzzSum.Signature() }), []byte{})
	f.Add(fuzzTask(fuzzDocs, []fuzzDoc{{ID: 1, Name: "a", Tags: []int8{-1}, Attrs: map[string]uint32{"k": 1}, Next: &fuzzDoc{}}}, nil), []byte{})
	f.Add(fuzzTask(fuzzNarrow, []uint8{1, 255}, nil), []byte{})
	f.Add(fuzzTask(fuzzAny, []any{1, "x", []any{map[string]any{"a": 1.5}}}, nil), []byte{})
	f.Add(fuzzTask(fuzzLookup, []string{"a", "b", "c"}, nil), []byte{0x81, 0xa1, 'a', 0x91, 0x01})
	// Issue 35's inputs: forged lengths, deep nesting, integers that do
	// not fit, a million-element count over a bad first element.
	f.Add(fuzzTask(fuzzSquare, []int{1}, func(t *codec.Task) { t.Input = []byte{0xdd, 0xff, 0xff, 0xff, 0xff} }), []byte{})
	f.Add(fuzzTask(fuzzAny, []int{1}, func(t *codec.Task) { t.Input = append([]byte{0x91}, make([]byte, 0)...) }), []byte{0xdd, 0x02, 0xfa, 0xf0, 0x80})
	f.Add(fuzzTask(fuzzNarrow, []int{1}, func(t *codec.Task) { t.Input = []byte{0x91, 0xcd, 0x01, 0x2c} }), []byte{})
	big := append([]byte{0xdd, 0x00, 0x0f, 0x42, 0x40, 0xa1, 'x'}, make([]byte, 999_999)...)
	f.Add(fuzzTask(fuzzSquare, []int{1}, func(t *codec.Task) { t.Input, t.Count = big, 1_000_000 }), []byte{})
	f.Add([]byte{0x9e, 0x02, 0xdb, 0xff, 0xff, 0xff, 0xff}, []byte{})
	// A map/reduce by key's map task and reduce task.
	f.Add(fuzzTask(fuzzWords, []string{"a b a", "c"}, fuzzShuffle(wire.PhaseMap)), []byte{})
	f.Add(fuzzTask(fuzzWords, []wire.ReduceInput{{Part: 1, Runs: []int{0, 2, 1}}}, fuzzShuffle(wire.PhaseReduce)), []byte{})
	f.Fuzz(func(t *testing.T, payload, constant []byte) {
		h := harness(t)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		// The second input is a constant: stored under its hash, so its
		// bytes reach the decoder, and named by the task when it names one.
		if len(constant) > 0 {
			ref, _, err := h.store.Put(ctx, constant, "fuzz", time.Minute)
			if err != nil {
				t.Skip("redis:", err)
			}
			if task, err := codec.DecodeTask(payload, 0); err == nil && task.Const != "" {
				task.Const, task.ConstSize = ref.Hash, ref.Size
				payload, _ = codec.EncodeTask(task)
			}
		}
		var done wire.Done
		n := allocated(func() { done = h.w.execute(ctx, wire.Taken{ID: "t-1", Attempt: 0, Payload: payload}) })
		if done.Withdrawn {
			// A map task that ran, and found itself not wanted (no
			// manager wants t-1): it reports nothing.
			if done.Result != nil || done.ID != "t-1" {
				t.Fatalf("a withdrawn task's report %+v, want its id and no result", done)
			}
			return
		}
		r, err := codec.DecodeResult(done.Result, 0)
		if err != nil {
			t.Fatalf("the worker wrote a result its manager cannot read: %v", err)
		}
		if r.Task != "t-1" {
			t.Fatalf("result of %q, want t-1", r.Task)
		}
		if limit := maxTaskAlloc(len(payload) + len(constant)); n > limit {
			t.Fatalf("a task of %d bytes (constant %d) allocated %d bytes, over %d", len(payload), len(constant), n, limit)
		}
	})
}

// A forged object record (issue 35: parts 1e18 panicked in makeslice through
// singleflight and killed the worker) fails the task as a corrupt constant.
func TestForgedObjectRecord(t *testing.T) {
	h := harness(t)
	ctx := context.Background()
	client := redistest.Shared(t).Client(t)
	hash := "deadbeef"
	if err := client.HSet(ctx, keys.Object(h.w.opts.Prefix, hash), "size", 1, "parts", "1000000000000000000").Err(); err != nil {
		t.Fatal(err)
	}
	payload := fuzzTask(fuzzLookup, []string{"a"}, func(t *codec.Task) { t.Const, t.ConstSize = hash, 1 })
	done := h.w.execute(ctx, wire.Taken{ID: "t-2", Payload: payload})
	r, err := codec.DecodeResult(done.Result, 0)
	if err != nil || len(r.Fails) != 1 || r.Fails[0].Index != -1 || r.Fails[0].Kind != codec.KindConstCorrupt {
		t.Fatalf("result %+v (%v), want the whole task failing as a corrupt constant", r, err)
	}
}

// A task of a million one-byte elements whose first does not decode (issue
// 35: a million failures, 457 MB, 34 s of CPU, a 78 MB result) fails as one
// run, in a result no larger than the task.
func TestMillionBadElementsOneRun(t *testing.T) {
	h := harness(t)
	input := append([]byte{0xdd, 0x00, 0x0f, 0x42, 0x40, 0xa1, 'x'}, make([]byte, 999_999)...)
	payload := fuzzTask(fuzzSquare, []int{1}, func(t *codec.Task) { t.Input, t.Count = input, 1_000_000 })
	var done wire.Done
	n := allocated(func() { done = h.w.execute(context.Background(), wire.Taken{ID: "t-3", Payload: payload}) })
	r, err := codec.DecodeResult(done.Result, 0)
	if err != nil || len(r.Fails) != 1 || r.Fails[0].Index != 0 || r.Fails[0].Last() != 999_999 || r.Fails[0].Kind != codec.KindDecode {
		t.Fatalf("result %+v (%v), want one decode failure for elements 0 to 999,999", r.Fails, err)
	}
	// A nil a failed element, and one failure: no larger than the task.
	if len(done.Result) > len(payload)+1<<10 {
		t.Fatalf("the result is %d bytes, the task %d", len(done.Result), len(payload))
	}
	if limit := maxTaskAlloc(len(payload)); n > limit {
		t.Fatalf("allocated %d bytes for a %d-byte task, over %d", n, len(payload), limit)
	}
}

// allocated returns the bytes f allocates on the heap.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// panicTracer's spans panic as they start: a part of a task's path outside
// the user's function that panics (issue 35: no recover around a task's
// path, so such a panic killed the worker, once per attempt).
type panicTracer struct{ noop.Tracer }

func (panicTracer) Start(context.Context, string, ...trace.SpanStartOption) (context.Context, trace.Span) {
	panic("the tracer broke")
}

type panicProvider struct{ noop.TracerProvider }

func (panicProvider) Tracer(string, ...trace.TracerOption) trace.Tracer { return panicTracer{} }

// A panic on a task's path outside its function fails that task whole,
// saying where and with the stack, and the worker goes on to the next.
func TestTaskPathPanicFailsTheTask(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: redistest.Shared(t).Addr()})
	t.Cleanup(func() { client.Close() })
	w, err := New(client, Options{Queue: "panics", TracerProvider: panicProvider{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(fuzzSquare); err != nil {
		t.Fatal(err)
	}
	traced := fuzzTask(fuzzSquare, []int{1, 2}, func(t *codec.Task) {
		t.Trace = map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	})
	done := w.execute(context.Background(), wire.Taken{ID: "t-9", Payload: traced})
	r, err := codec.DecodeResult(done.Result, 0)
	if err != nil || len(r.Fails) != 1 || r.Fails[0].Index != -1 || !strings.Contains(r.Fails[0].Msg, "the tracer broke") || r.Fails[0].Stack == "" {
		t.Fatalf("result %+v (%v), want the whole task failed with the panic and its stack", r, err)
	}
	// The next task, untraced, runs.
	done = w.execute(context.Background(), wire.Taken{ID: "t-10", Payload: fuzzTask(fuzzSquare, []int{3}, nil)})
	if r, err := codec.DecodeResult(done.Result, 0); err != nil || len(r.Fails) != 0 {
		t.Fatalf("the next task: %+v (%v)", r, err)
	}
}

// A partial forged in Redis (bytes that are not pairs, keys and values that
// do not pair up, a value of another type) fails its partition's reduce
// with the reason, and the worker goes on; a partition whose partials are
// all there and well formed is reduced exactly.
func TestForgedPartial(t *testing.T) {
	h := harness(t)
	ctx := context.Background()
	client := redistest.Shared(t).Client(t)
	sh := &wire.Shuffle{Job: "forged", Parts: 4, Phase: wire.PhaseReduce, TTL: 60_000}
	part := func(p int) string { return keys.Partition(h.w.opts.Prefix, "fuzz", sh.Job, p, 0) }
	good, _ := engine.EncodePairs(&engine.Pairs[string, int]{K: []string{"a", "b"}, V: []int{2, 3}})
	// Two keys, one value: the count says two.
	k2, _ := codec.EncodeElements([]string{"a", "b"}, 0)
	v1, _ := codec.EncodeElements([]int{2}, 0)
	unpaired, _ := codec.EncodeValue(&struct {
		N int    `msgpack:"n"`
		K []byte `msgpack:"k"`
		V []byte `msgpack:"v"`
	}{N: 2, K: k2, V: v1})
	mistyped, _ := engine.EncodePairs(&engine.Pairs[string, string]{K: []string{"a"}, V: []string{"x"}})
	for p, b := range [][]byte{good, {0xdd, 0xff, 0xff, 0xff, 0xff}, unpaired, mistyped} {
		if err := client.HSet(ctx, part(p), "0:1", b, "1:1", good).Err(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for p := range 4 {
			client.Del(ctx, part(p), keys.PartitionOut(h.w.opts.Prefix, "fuzz", sh.Job, p, 0))
		}
	})
	ins := []wire.ReduceInput{{Part: 0, Runs: []int{0, 1, 2}}, {Part: 1, Runs: []int{0, 1, 2}},
		{Part: 2, Runs: []int{0, 1, 2}}, {Part: 3, Runs: []int{0, 1, 2}}}
	payload := fuzzTask(fuzzWords, ins, func(t *codec.Task) {
		t.Reduce, t.ReduceSig = fuzzSum.Name(), fuzzSum.Signature()
		t.Shuffle, _ = wire.EncodeShuffle(sh)
	})
	done := h.w.execute(ctx, wire.Taken{ID: "t-4", Payload: payload})
	r, err := codec.DecodeResult(done.Result, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Fails) != 3 {
		t.Fatalf("failures %+v, want partitions 1 to 3's", r.Fails)
	}
	for i, f := range r.Fails {
		if f.Index != i+1 || f.Kind != codec.KindDecode {
			t.Fatalf("failure %d: %+v, want partition %d's, a decode failure", i, f, i+1)
		}
	}
	outs := make([]*wire.ReduceOutput, 4)
	if err := codec.DecodeElements(r.Values, outs); err != nil || outs[0] == nil || outs[0].Keys != 2 || outs[0].Pages != 1 {
		t.Fatalf("partition 0's output %+v (%v), want 2 keys on a page", outs[0], err)
	}
	page, err := client.LIndex(ctx, keys.PartitionOut(h.w.opts.Prefix, "fuzz", sh.Job, 0, 0), 0).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	got, err := engine.DecodePairs[string, int](page)
	if err != nil || len(got.K) != 2 {
		t.Fatalf("partition 0's page: %+v, %v", got, err)
	}
	for i, k := range got.K {
		if want := map[string]int{"a": 4, "b": 6}[k]; got.V[i] != want {
			t.Fatalf("partition 0: %q reduced to %d, want %d", k, got.V[i], want)
		}
	}
	if n, _ := client.Exists(ctx, part(0)).Result(); n != 0 {
		t.Fatal("partition 0's partials are still in Redis after its reduce")
	}
}
