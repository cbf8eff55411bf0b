package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redmap/redmap/codec"
)

// A run under a timeout whose function ignores its context is abandoned
// Policy.Abandon past the timeout: its element fails with KindTimeout, not
// retried, and the task goes on with its next element. OnAbandon is told
// once, and its returned function when the run returns at last; what the
// abandoned run does then (redmap.Rand, its output) touches nothing of the
// task's (the race detector watches).
func TestRunAbandonsFunctionIgnoringContext(t *testing.T) {
	frame, err := codec.EncodeElements([]int{1, -2, 3}, 0)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var calls atomic.Int64
	fn := func(ctx context.Context, x int) (int, error) {
		calls.Add(1)
		if x < 0 {
			<-release // ignores ctx
		}
		Rand(ctx).Uint64() // the task's stream: an abandoned run must not race on it
		return 10 * x, nil
	}
	var abandonedAt []int
	returned := make(chan struct{})
	p := Policy{Attempts: 3, Timeout: 20 * time.Millisecond, Abandon: 20 * time.Millisecond,
		OnAbandon: func(index int) func() {
			abandonedAt = append(abandonedAt, index)
			return func() { close(returned) }
		}}
	values, fails := Run(context.Background(), 3, frame, p, fn)

	if len(fails) != 1 || fails[0].Index != 1 || fails[0].Kind != codec.KindTimeout || !strings.Contains(fails[0].Msg, "abandoned") {
		t.Fatalf("fails %+v; want element 1 alone, timed out and abandoned", fails)
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("%d calls, want 3: the abandoned run is not retried", n)
	}
	if len(abandonedAt) != 1 || abandonedAt[0] != 1 {
		t.Fatalf("OnAbandon told of %v, want [1]", abandonedAt)
	}
	out := make([]*int, 3)
	if err := codec.DecodeElements(values, out); err != nil {
		t.Fatal(err)
	}
	if out[0] == nil || *out[0] != 10 || out[1] != nil || out[2] == nil || *out[2] != 30 {
		t.Fatalf("outputs %v; want 10, nil, 30", out)
	}
	select {
	case <-returned:
		t.Fatal("returned was called before the abandoned run returned")
	default:
	}
	close(release)
	select {
	case <-returned:
	case <-time.After(time.Minute):
		t.Fatal("the abandoned run returned, but its returned function was not called")
	}
}

// A run under a timeout that returns, in time or late but within
// Policy.Abandon, is not abandoned: a function that honours its context
// times out and is retried as before.
func TestRunWithinAbandonGraceIsNotAbandoned(t *testing.T) {
	frame, _ := codec.EncodeElements([]int{0}, 0)
	var calls atomic.Int64
	slow := func(ctx context.Context, _ int) (int, error) {
		calls.Add(1)
		<-ctx.Done()
		return 0, ctx.Err()
	}
	p := Policy{Attempts: 2, Timeout: 10 * time.Millisecond, Abandon: time.Minute,
		OnAbandon: func(int) func() { t.Error("abandoned a run that returned"); return nil }}
	_, fails := Run(context.Background(), 1, frame, p, slow)
	if len(fails) != 1 || fails[0].Kind != codec.KindTimeout || strings.Contains(fails[0].Msg, "abandoned") || calls.Load() != 2 {
		t.Fatalf("fails %+v after %d calls; want a timeout on attempt 2", fails, calls.Load())
	}
}

// Runs made on the callers' goroutine (a timeout, Policy.Abandon) draw the
// same redmap.Rand streams as runs on the task's: an element's stream is
// its batch's seed and its index, wherever it runs.
func TestRunAbandonKeepsRandStreams(t *testing.T) {
	xs := make([]int, 50)
	frame, _ := codec.EncodeElements(xs, 0)
	draw := func(ctx context.Context, _ int) (uint64, error) { return Rand(ctx).Uint64(), nil }
	run := func(p Policy) []uint64 {
		t.Helper()
		values, fails := Run(context.Background(), len(xs), frame, p, draw)
		out := make([]uint64, len(xs))
		if err := codec.DecodeElements(values, out); err != nil || len(fails) != 0 {
			t.Fatalf("%v %+v", err, fails)
		}
		return out
	}
	plain := run(Policy{Seed: 42, Start: 100})
	called := run(Policy{Seed: 42, Start: 100, Timeout: time.Minute, Abandon: time.Second})
	if !slices.Equal(plain, called) {
		t.Fatalf("streams differ:\n%v\n%v", plain, called)
	}
}

// An emitter's run abandoned (it ignores its context) that emits on once
// released appends to pairs of its own: the task's next elements, and the
// partials, are not touched (the race detector watches), and the task's
// keys are those of the elements that returned.
func TestCombineAbandonedEmitterEmitsAside(t *testing.T) {
	release := make(chan struct{})
	done := make(chan struct{})
	em := Emit("emit", "sig", nil, func(_ context.Context, x int, emit func(int, int)) error {
		emit(x, 1)
		if x < 0 {
			<-release // ignores its context
			for i := range 100 {
				emit(i, 1)
			}
		}
		return nil
	})
	sum := Fold("sum", "sig", nil, func(_ context.Context, a, b int) (int, error) { return a + b, nil }, errors.New("reduce"))
	sh, _ := em.Shuffler()
	frame, _ := codec.EncodeElements([]int{1, -2, 3, 4}, 0)
	p := Policy{Timeout: 20 * time.Millisecond, Abandon: 20 * time.Millisecond,
		OnAbandon: func(int) func() { return func() { close(done) } }}
	partials, keys, fails := sh.Combine(context.Background(), 4, frame, p, sum, 1)
	close(release)
	<-done
	if len(fails) != 1 || fails[0].Index != 1 || fails[0].Kind != codec.KindTimeout {
		t.Fatalf("fails %+v; want element 1 timed out", fails)
	}
	if keys != 3 || len(partials) != 1 {
		t.Fatalf("%d keys in %d partials; want 1, 3 and 4 in one", keys, len(partials))
	}
	got, err := DecodePairs[int, int](partials[0])
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got.K)
	if !slices.Equal(got.K, []int{1, 3, 4}) || !slices.Equal(got.V, []int{1, 1, 1}) {
		t.Fatalf("pairs %+v; want keys 1, 3 and 4 once each", got)
	}
}
