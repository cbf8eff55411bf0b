package redmap_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/engine"
	"github.com/redmap/redmap/internal/failure"
)

func TestSignatures(t *testing.T) {
	type doc struct{ ID int }
	cases := []struct {
		h    redmap.AnyHandle
		want string
	}{
		{redmap.Func("a", func(context.Context, int) (string, error) { return "", nil }), "func(int) string"},
		{redmap.Func("b", func(context.Context, []doc) (map[string]float64, error) { return nil, nil }),
			"func([]redmap_test.doc) map[string]float64"},
		{redmap.FuncWith("c", func(context.Context, *doc, int) (bool, error) { return false, nil }),
			"func(*redmap_test.doc, int) bool"},
	}
	for _, c := range cases {
		if got, _, _ := strings.Cut(c.h.Signature(), " #"); got != c.want {
			t.Errorf("%s: signature %q, want %q and a fingerprint", c.h.Name(), c.h.Signature(), c.want)
		}
	}
}

// The fingerprint follows the structure, not the printed names: a field
// renamed, retyped or retagged at any depth changes it, and the difference
// is named; the same structure under another name does not.
func TestFingerprint(t *testing.T) {
	type inner struct{ N int }
	type v1 struct {
		ID   string
		Text string
		In   []inner
	}
	type v2 struct {
		ID    string
		Title string
		In    []inner
	}
	type v3 struct {
		ID   string
		Text string
		In   []struct{ N string }
	}
	type v4 struct {
		ID   string `msgpack:"id"`
		Text string
		In   []inner
	}
	type same struct {
		ID   string
		Text string
		In   []struct{ N int }
	}
	h1 := redmap.Func("f", func(context.Context, v1) (int, error) { return 0, nil })
	for _, c := range []struct {
		h    redmap.AnyHandle
		diff string
	}{
		{redmap.Func("f", func(context.Context, v2) (int, error) { return 0, nil }), "manager has In.Text (string), worker does not"},
		{redmap.Func("f", func(context.Context, v3) (int, error) { return 0, nil }), "In.In[].N is int on manager, string on worker"},
		{redmap.Func("f", func(context.Context, v4) (int, error) { return 0, nil }), "manager has In.ID (string), worker does not"},
		{redmap.Func("f", func(context.Context, same) (int, error) { return 0, nil }), ""},
	} {
		fp1, _ := strings.CutPrefix(h1.Signature()[strings.Index(h1.Signature(), "#"):], "#")
		fp2, _ := strings.CutPrefix(c.h.Signature()[strings.Index(c.h.Signature(), "#"):], "#")
		if got := engine.Difference(rt(h1).Types(), rt(c.h).Types(), "manager", "worker"); got != c.diff || (fp1 == fp2) != (c.diff == "") {
			t.Errorf("%s vs %s: difference %q (fingerprints %s, %s), want %q", h1.Signature(), c.h.Signature(), got, fp1, fp2, c.diff)
		}
	}
}

// Run fails each bad element alone: an error, a panic, and an input that does
// not decode (which takes the rest of its frame with it).
func TestRunFailsElementsAlone(t *testing.T) {
	h := redmap.Func("f", func(_ context.Context, x int) (int, error) {
		switch x {
		case 2:
			return 0, errors.New("two")
		case 3:
			panic("three")
		}
		return x * 10, nil
	})
	// 1, 2, 3, 4, then a string where an int belongs, then 6.
	frame := []byte{0x96, 0x01, 0x02, 0x03, 0x04, 0xa1, 'x', 0x06}
	values, fails := rt(h).Run(context.Background(), nil, 6, frame, engine.Policy{}, nil)
	out := make([]int, 6)
	if err := codec.DecodeElements(values, out); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(out) != "[10 0 0 40 0 0]" {
		t.Fatalf("outputs %v", out)
	}
	// The undecodable element and the one after it (the frame cannot be
	// read past it) fail as one run.
	want := []struct {
		index, last int
		kind        codec.Kind
	}{{1, 1, codec.KindError}, {2, 2, codec.KindPanic}, {4, 5, codec.KindDecode}}
	if len(fails) != len(want) {
		t.Fatalf("fails %+v", fails)
	}
	for i, w := range want {
		if fails[i].Index != w.index || fails[i].Last() != w.last || fails[i].Kind != w.kind {
			t.Errorf("fail %d: %+v, want indexes %d to %d kind %d", i, fails[i], w.index, w.last, w.kind)
		}
	}
	if fails[1].Stack == "" || fails[1].Msg != "three" {
		t.Errorf("panic without its message or stack: %+v", fails[1])
	}
}

func TestHandleWithWrongConstantType(t *testing.T) {
	h := redmap.FuncWith("g", func(_ context.Context, c string, x int) (int, error) { return len(c) + x, nil })
	frame, _ := codec.EncodeElements([]int{1, 2}, 0)
	_, fails := rt(h).Run(context.Background(), 42, 2, frame, engine.Policy{}, nil)
	if len(fails) != 1 || fails[0].Index != -1 || fails[0].Kind != codec.KindTypeMismatch {
		t.Fatalf("fails %+v, want the whole task failing with a type mismatch", fails)
	}
	c, err := rt(h).DecodeConstant([]byte{0xa2, 'h', 'i'})
	if err != nil || c != "hi" {
		t.Fatalf("decode constant: %v, %v", c, err)
	}
	values, fails := rt(h).Run(context.Background(), c, 2, frame, engine.Policy{}, nil)
	out := make([]int, 2)
	if err := codec.DecodeElements(values, out); err != nil || len(fails) != 0 || out[1] != 4 {
		t.Fatalf("run: %v %v %+v", out, err, fails)
	}
}

func TestPolicyRetriesAndTimeouts(t *testing.T) {
	frame, _ := codec.EncodeElements([]int{0}, 0)
	run := func(p engine.Policy, fn func(context.Context, int) (int, error)) (int, []codec.Failure) {
		t.Helper()
		values, fails := rt(redmap.Func("f", fn)).Run(context.Background(), nil, 1, frame, p, nil)
		out := make([]int, 1)
		if err := codec.DecodeElements(values, out); err != nil {
			t.Fatal(err)
		}
		return out[0], fails
	}
	calls := 0
	flaky := func(context.Context, int) (int, error) {
		calls++
		if calls < 3 {
			return 0, redmap.Retryable(errors.New("try again"))
		}
		return 7, nil
	}
	if y, fails := run(engine.Policy{Attempts: 3}, flaky); y != 7 || len(fails) != 0 || calls != 3 {
		t.Fatalf("retryable error: %d %+v after %d calls; want 7 on the third call", y, fails, calls)
	}

	calls = 0
	plain := func(context.Context, int) (int, error) { calls++; return 0, errors.New("no") }
	if _, fails := run(engine.Policy{Attempts: 3}, plain); len(fails) != 1 || calls != 1 {
		t.Fatalf("plain error: %+v after %d calls; want one call", fails, calls)
	}
	calls = 0
	if _, fails := run(engine.Policy{Attempts: 3, Retry: true}, plain); len(fails) != 1 || calls != 3 || fails[0].Kind != codec.KindError {
		t.Fatalf("plain error with Retry: %+v after %d calls; want three", fails, calls)
	}

	calls = 0
	slow := func(ctx context.Context, _ int) (int, error) {
		calls++
		<-ctx.Done() // runs until its context ends
		return 0, ctx.Err()
	}
	_, fails := run(engine.Policy{Attempts: 2, Timeout: 20 * time.Millisecond}, slow)
	if len(fails) != 1 || fails[0].Kind != codec.KindTimeout || calls != 2 || !strings.Contains(fails[0].Msg, "attempt 2") {
		t.Fatalf("timeout: %+v after %d calls; want a timeout on attempt 2", fails, calls)
	}
	if err := failure.Cause(fails[0]); !errors.Is(err, redmap.ErrTimeout) {
		t.Fatalf("cause %v, want ErrTimeout", err)
	}
}

// rt returns the worker's side of a handle.
func rt(h redmap.AnyHandle) *engine.Runtime {
	return h.Runtime()
}

// Types that cannot travel through Redis are refused when the handle is
// validated, before anything is submitted or registered.
func TestValidateRefusesUntravelledTypes(t *testing.T) {
	type withFunc struct {
		Name string
		Cb   func()
	}
	for _, h := range []redmap.AnyHandle{
		redmap.Func("ch", func(context.Context, chan int) (int, error) { return 0, nil }),
		redmap.Func("fn", func(context.Context, int) (withFunc, error) { return withFunc{}, nil }),
		redmap.Func("map", func(context.Context, map[string][]chan int) (int, error) { return 0, nil }),
	} {
		if err := h.Validate(); !errors.Is(err, redmap.ErrEncode) {
			t.Errorf("%s: Validate = %v, want ErrEncode", h.Signature(), err)
		}
	}
}

// An emitter whose key type compares by identity (a pointer, an interface,
// inside a struct or an array too) is refused: decoded keys would not meet
// their equals. Keys compared by value pass.
func TestEmitterKeyTypes(t *testing.T) {
	type point struct{ X, Y int }
	type holder struct {
		Name string
		P    *int
	}
	fine := []redmap.AnyHandle{
		redmap.Emit("k-string", func(context.Context, int, func(string, int)) error { return nil }),
		redmap.Emit("k-struct", func(context.Context, int, func(point, int)) error { return nil }),
		redmap.Emit("k-array", func(context.Context, int, func([2]string, int)) error { return nil }),
	}
	for _, h := range fine {
		if err := h.Validate(); err != nil {
			t.Fatalf("%s: %v", h.Name(), err)
		}
	}
	bad := []redmap.AnyHandle{
		redmap.Emit("k-pointer", func(context.Context, int, func(*int, int)) error { return nil }),
		redmap.Emit("k-any", func(context.Context, int, func(any, int)) error { return nil }),
		redmap.Emit("k-held", func(context.Context, int, func(holder, int)) error { return nil }),
		redmap.Emit("k-array-any", func(context.Context, int, func([1]any, int)) error { return nil }),
	}
	for _, h := range bad {
		if err := h.Validate(); !errors.Is(err, redmap.ErrTypeMismatch) {
			t.Fatalf("%s: %v, want ErrTypeMismatch", h.Name(), err)
		}
	}
}
