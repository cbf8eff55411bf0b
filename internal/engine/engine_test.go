package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redmap/redmap/codec"
)

// runInts runs fn over xs under p and returns the decoded outputs (nil for
// a failed element) and the failures.
func runInts(t *testing.T, xs []int, p Policy, fn func(context.Context, int) (int, error)) ([]*int, []codec.Failure) {
	t.Helper()
	frame, err := codec.EncodeElements(xs, 0)
	if err != nil {
		t.Fatal(err)
	}
	values, fails := Run(context.Background(), len(xs), frame, p, fn)
	out := make([]*int, len(xs))
	if err := codec.DecodeElements(values, out); err != nil {
		t.Fatalf("outputs: %v", err)
	}
	return out, fails
}

// The retry rules, element by element: a Retryable error runs again up to
// the attempt budget; a plain error or a panic runs once unless the policy
// retries everything; a run past its timeout runs again; OnRetry hears of
// each retry, with the attempt that failed; the message of a last failure
// after retries names its attempt.
func TestRunRetries(t *testing.T) {
	plain := errors.New("plain")
	cases := []struct {
		name      string
		p         Policy
		failFirst int   // runs that fail before one succeeds (past Attempts: fails)
		err       error // what a failing run returns; nil: it panics
		wantCalls int
		wantKind  codec.Kind // 0: the element succeeds
		wantMsg   string
	}{
		{"retryable, succeeds on the third", Policy{Attempts: 3}, 2, Retryable(plain), 3, 0, ""},
		{"retryable, budget spent", Policy{Attempts: 3}, 5, Retryable(plain), 3, codec.KindError, "attempt 3: plain"},
		{"plain error, not retried", Policy{Attempts: 3}, 1, plain, 1, codec.KindError, "plain"},
		{"plain error, Retry", Policy{Attempts: 3, Retry: true}, 1, plain, 2, 0, ""},
		{"panic, not retried", Policy{Attempts: 3}, 1, nil, 1, codec.KindPanic, "boom"},
		{"panic, Retry", Policy{Attempts: 2, Retry: true}, 5, nil, 2, codec.KindPanic, "attempt 2: boom"},
		{"one attempt", Policy{Attempts: 0}, 5, Retryable(plain), 1, codec.KindError, "plain"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var calls atomic.Int64
			var retried []int
			c.p.OnRetry = func(index, attempt int, f *codec.Failure) {
				if index != 7 {
					t.Errorf("OnRetry index %d, want the batch index 7", index)
				}
				retried = append(retried, attempt)
			}
			c.p.Start = 7
			fn := func(ctx context.Context, x int) (int, error) {
				if int(calls.Add(1)) <= c.failFirst {
					if c.err == nil {
						panic("boom")
					}
					return 0, c.err
				}
				return x * 2, nil
			}
			out, fails := runInts(t, []int{21}, c.p, fn)
			if n := int(calls.Load()); n != c.wantCalls {
				t.Errorf("%d calls, want %d", n, c.wantCalls)
			}
			if len(retried) != c.wantCalls-1 {
				t.Errorf("OnRetry told of attempts %v, want %d", retried, c.wantCalls-1)
			}
			for i, a := range retried {
				if a != i+1 {
					t.Errorf("OnRetry attempts %v, want 1, 2, ...", retried)
				}
			}
			if c.wantKind == 0 {
				if len(fails) != 0 || out[0] == nil || *out[0] != 42 {
					t.Fatalf("fails %+v, output %v; want 42", fails, out[0])
				}
				return
			}
			if len(fails) != 1 || fails[0].Kind != c.wantKind || fails[0].Index != 0 || out[0] != nil {
				t.Fatalf("fails %+v, output %v; want one %v failure and no output", fails, out[0], c.wantKind)
			}
			if fails[0].Msg != c.wantMsg && !strings.HasPrefix(fails[0].Msg, c.wantMsg) {
				t.Errorf("message %q, want %q", fails[0].Msg, c.wantMsg)
			}
			if c.wantKind == codec.KindPanic && !strings.Contains(fails[0].Stack, "engine_test.go") {
				t.Errorf("a panic's stack does not name where it panicked:\n%s", fails[0].Stack)
			}
		})
	}
}

// A function that honours its context and runs past the timeout fails with
// KindTimeout, after each of its attempts; the next element runs as usual.
func TestRunTimeout(t *testing.T) {
	var calls atomic.Int64
	fn := func(ctx context.Context, x int) (int, error) {
		if x < 0 {
			calls.Add(1)
			<-ctx.Done()
			return 0, ctx.Err()
		}
		return x, nil
	}
	out, fails := runInts(t, []int{-1, 5}, Policy{Attempts: 2, Timeout: 5 * time.Millisecond}, fn)
	if len(fails) != 1 || fails[0].Index != 0 || fails[0].Kind != codec.KindTimeout {
		t.Fatalf("fails %+v, want element 0 timed out", fails)
	}
	if !strings.Contains(fails[0].Msg, "attempt 2") || !strings.Contains(fails[0].Msg, "timeout of 5ms") {
		t.Errorf("message %q does not say the attempt and the timeout", fails[0].Msg)
	}
	if calls.Load() != 2 {
		t.Errorf("%d runs of the slow element, want 2 (a timeout is retried)", calls.Load())
	}
	if out[0] != nil || out[1] == nil || *out[1] != 5 {
		t.Fatalf("outputs %v, %v; want nil, 5", out[0], out[1])
	}
}

// A panic fails its element only; elements failing alike in a row are one
// run of failures (Through), and a failure between successes stays alone.
func TestRunPanicFailsItsElementOnly(t *testing.T) {
	fn := func(ctx context.Context, x int) (int, error) {
		if x%10 == 0 {
			panic(fmt.Sprintf("no %d", x))
		}
		if x < 0 {
			return 0, errors.New("down")
		}
		return x, nil
	}
	out, fails := runInts(t, []int{1, 10, 2, -1, -1, -1, 3}, Policy{}, fn)
	if len(fails) != 2 {
		t.Fatalf("fails %+v, want a panic and a run of three errors", fails)
	}
	if f := fails[0]; f.Index != 1 || f.Kind != codec.KindPanic || f.Msg != "no 10" || f.Last() != 1 {
		t.Errorf("first failure %+v, want element 1's panic", f)
	}
	if f := fails[1]; f.Index != 3 || f.Last() != 5 || f.Kind != codec.KindError || f.Msg != "down" {
		t.Errorf("second failure %+v, want elements 3 through 5, \"down\"", f)
	}
	for i, want := range []int{1, 0, 2, 0, 0, 0, 3} {
		if (want == 0) != (out[i] == nil) || out[i] != nil && *out[i] != want {
			t.Errorf("output %d: %v, want %d (0: none)", i, out[i], want)
		}
	}
}

// Inputs of another type than the function's: the element that does not
// decode and every later one fail as one KindDecode run naming the type;
// the ones before it run.
func TestRunRefusesInputsOfAnotherType(t *testing.T) {
	frame, err := codec.EncodeElements([]any{1, 2, "three", 4}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	_, fails := Run(context.Background(), 4, frame, Policy{}, func(ctx context.Context, x int) (int, error) {
		calls.Add(1)
		return x, nil
	})
	if calls.Load() != 2 {
		t.Errorf("%d calls, want 2 (the elements before the bad one)", calls.Load())
	}
	if len(fails) != 1 || fails[0].Index != 2 || fails[0].Last() != 3 || fails[0].Kind != codec.KindDecode || !strings.Contains(fails[0].Msg, "input as int") {
		t.Fatalf("fails %+v, want elements 2 through 3 undecodable as int", fails)
	}
}

// A reducer of another type than the function's outputs fails the task as
// a type mismatch, naming both, and runs nothing.
func TestReduceRefusesReducerOfAnotherType(t *testing.T) {
	red := Fold("concat", "reduce(string, string) string", nil, func(ctx context.Context, a, b string) (string, error) { return a + b, nil }, errors.New("reduce failed"))
	frame, err := codec.EncodeElements([]int{1, 2}, 0)
	if err != nil {
		t.Fatal(err)
	}
	called := false
	_, fails := Reduce(context.Background(), 2, frame, Policy{}, func(ctx context.Context, x int) (int, error) { called = true; return x, nil }, red)
	if called || len(fails) != 1 || fails[0].Index != -1 || fails[0].Kind != codec.KindTypeMismatch || !strings.Contains(fails[0].Msg, `"concat"`) || !strings.Contains(fails[0].Msg, "int") {
		t.Fatalf("called %v, fails %+v; want a type mismatch of the whole task naming the reducer and int", called, fails)
	}
}

// A function that answers RetryAfter waits and runs again without spending
// an attempt, OnWait choosing the wait; past Policy.Waits it fails as
// KindThrottled.
func TestRunRetryAfter(t *testing.T) {
	var calls atomic.Int64
	fn := func(ctx context.Context, x int) (int, error) {
		if int(calls.Add(1)) <= x {
			return 0, RetryAfter(time.Hour, errors.New("429"))
		}
		return x, nil
	}
	var waited []time.Duration
	p := Policy{Attempts: 1, Waits: 3, OnWait: func(index int, d time.Duration) time.Duration {
		waited = append(waited, d)
		return time.Millisecond // the worker caps a wait; an hour would hang the test
	}}
	out, fails := runInts(t, []int{2}, p, fn)
	if len(fails) != 0 || out[0] == nil || *out[0] != 2 || len(waited) != 2 || waited[0] != time.Hour {
		t.Fatalf("fails %+v, output %v, waits %v; want 2 after two waits of the hour asked", fails, out[0], waited)
	}
	calls.Store(0)
	waited = nil
	_, fails = runInts(t, []int{9}, p, fn)
	if len(fails) != 1 || fails[0].Kind != codec.KindThrottled || !strings.Contains(fails[0].Msg, "after 3 waits") || len(waited) != 3 {
		t.Fatalf("fails %+v after %d waits; want KindThrottled after 3", fails, len(waited))
	}
}

// Difference names the first field two handles' structures differ in, or
// "" when they are the same.
func TestDifference(t *testing.T) {
	mine := []string{"In: int", "Out.Name: string", "Out.Age: int"}
	cases := []struct {
		theirs []string
		want   string
	}{
		{[]string{"In: int", "Out.Name: string", "Out.Age: int"}, ""},
		{[]string{"In: int", "Out.Name: string", "Out.Age: int64"}, "Out.Age is int on manager, int64 on worker"},
		{[]string{"In: int", "Out.Name: string"}, "manager has Out.Age (int), worker does not"},
		{[]string{"In: int", "Out.Name: string", "Out.Age: int", "Out.Extra: bool"}, "worker has Out.Extra (bool), manager does not"},
	}
	for _, c := range cases {
		if got := Difference(mine, c.theirs, "manager", "worker"); got != c.want {
			t.Errorf("Difference(%v) = %q, want %q", c.theirs, got, c.want)
		}
	}
}
