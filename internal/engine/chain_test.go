package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redmap/redmap/codec"
)

// words splits a line into its words; "boom" panics, "bad" fails.
func words() Step {
	s, _ := Flat("words", "sig", nil, func(_ context.Context, line string, emit func(string)) error {
		for _, w := range strings.Fields(line) {
			emit(w)
		}
		return nil
	}).Step()
	return s
}

// lengths is the length of a word: "boom" panics, "bad" fails, and
// "flaky" fails retryably on its first run in each of its elements.
func lengths(flaky *atomic.Int32) Step {
	s, _ := Map("len", "sig", nil, func(_ context.Context, w string) (int, error) {
		switch w {
		case "boom":
			panic("boom")
		case "bad":
			return 0, errors.New("bad word")
		case "flaky":
			if flaky.Add(1)%2 == 1 {
				return 0, Retryable(errors.New("flaky"))
			}
		}
		return len(w), nil
	}).Step()
	return s
}

// A chain runs fused, element by element: an element whose run fails in
// any step fails whole, naming that step, and gives nothing; the others'
// outputs come in their order; a retry runs the element's whole chain
// again, and keeps only the outputs of the run that succeeded.
func TestRunChainFused(t *testing.T) {
	var flaky atomic.Int32
	steps := []Step{words(), lengths(&flaky)}
	in := []string{"a bb", "ccc bad dd", "", "flaky e", "boom ff", "gggg"}
	ys, fails := RunChain(context.Background(), steps, in, Policy{Attempts: 2})
	if got, want := ys.([]int), []int{1, 2, 5, 1, 4}; !slices.Equal(got, want) {
		t.Errorf("outputs %v, want %v", got, want)
	}
	type fail struct {
		step, index int
		kind        codec.Kind
	}
	var got []fail
	for _, f := range fails {
		got = append(got, fail{f.Step, f.Index, f.Kind})
	}
	want := []fail{{1, 1, codec.KindError}, {1, 4, codec.KindPanic}}
	if !slices.Equal(got, want) {
		t.Errorf("failures %v, want %v (%+v)", got, want, fails)
	}
	// The stack is the panic's own: it names the function that panicked.
	if !strings.Contains(fails[1].Stack, "lengths.func") || !strings.Contains(fails[0].Msg, "bad word") {
		t.Errorf("failures say %+v", fails)
	}
	if n := flaky.Load(); n != 2 {
		t.Errorf("flaky ran %d times, want 2 (once failing, once again)", n)
	}
}

// A run of elements failing alike in one step is one failure; a failure in
// another step starts another.
func TestRunChainFailRuns(t *testing.T) {
	var flaky atomic.Int32
	steps := []Step{words(), lengths(&flaky)}
	in := []string{"bad", "bad", "bad x", "x", "bad"}
	_, fails := RunChain(context.Background(), steps, in, Policy{})
	if len(fails) != 2 || fails[0].Index != 0 || fails[0].Last() != 2 || fails[1].Index != 4 || fails[1].Last() != 4 {
		t.Fatalf("failures %+v, want elements 0-2 and 4", fails)
	}
	up, _ := Map("upper", "sig", nil, func(_ context.Context, s string) (string, error) {
		if s == "x" {
			return "", errors.New("bad word")
		}
		return s, nil
	}).Step()
	_, fails = RunChain(context.Background(), []Step{words(), up, lengths(&flaky)}, []string{"x", "bad"}, Policy{})
	if len(fails) != 2 || fails[0].Step != 1 || fails[1].Step != 2 {
		t.Fatalf("failures %+v, want step 1 then step 2 though their messages match", fails)
	}
}

// Through a by-key step's emitter, the chain's pairs fold per key; an
// element that fails in a step before the emitter, or in the emitter,
// contributes no pair.
func TestCombineChain(t *testing.T) {
	em := Emit("count", "sig", nil, func(_ context.Context, w string, emit func(string, int)) error {
		if w == "nope" {
			return errors.New("no pairs for nope")
		}
		emit(w, 1)
		return nil
	})
	b, _ := em.Boundary()
	red := Fold("sum", "sig", nil, func(_ context.Context, a, b int) (int, error) { return a + b, nil }, errors.New("reduce"))
	up, _ := Map("upper", "sig", nil, func(_ context.Context, s string) (string, error) {
		if s == "bad" {
			return "", errors.New("bad word")
		}
		return s, nil
	}).Step()
	in := []string{"a b a", "b bad", "nope", "c a", "flaky"}
	partials, keys, fails := b.CombineChain(context.Background(), []Step{words(), up}, in, Policy{Attempts: 2}, red, 3)
	if keys != 4 {
		t.Errorf("%d keys, want 4 (a, b, c, flaky)", keys)
	}
	counts := map[string]int{}
	for _, p := range partials {
		ps, err := DecodePairs[string, int](p)
		if err != nil {
			t.Fatal(err)
		}
		for i, k := range ps.K {
			counts[k] += ps.V[i]
		}
	}
	if want := map[string]int{"a": 3, "b": 1, "c": 1, "flaky": 1}; fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("counts %v, want %v", counts, want)
	}
	if len(fails) != 2 || fails[0].Index != 1 || fails[0].Step != 1 || fails[1].Index != 2 || fails[1].Step != 2 {
		t.Errorf("failures %+v, want element 1 in step 1, element 2 in the emitter (step 2)", fails)
	}
}

// A run that ignores its context past its timeout is abandoned: its
// element fails with a timeout, and what the abandoned run emits later
// reaches no other element's outputs.
func TestRunChainAbandoned(t *testing.T) {
	release := make(chan struct{})
	returned := make(chan struct{})
	slow, _ := Flat("slow", "sig", nil, func(_ context.Context, x int, emit func(int)) error {
		if x == 1 {
			<-release
			for range 100 {
				emit(-1)
			}
			close(returned)
			return nil
		}
		emit(x)
		emit(x * 10)
		return nil
	}).Step()
	p := Policy{Timeout: 20 * time.Millisecond, Abandon: 20 * time.Millisecond}
	ys, fails := RunChain(context.Background(), []Step{slow}, []int{0, 1, 2, 3}, p)
	close(release)
	<-returned
	if got, want := ys.([]int), []int{0, 0, 2, 20, 3, 30}; !slices.Equal(got, want) {
		t.Errorf("outputs %v, want %v", got, want)
	}
	if len(fails) != 1 || fails[0].Index != 1 || fails[0].Kind != codec.KindTimeout {
		t.Errorf("failures %+v, want element 1 timed out", fails)
	}
}

// A chain handed elements of another type than its first step's fails
// whole, with no element's index.
func TestRunChainMismatch(t *testing.T) {
	var flaky atomic.Int32
	_, fails := RunChain(context.Background(), []Step{words(), lengths(&flaky)}, []int{1, 2}, Policy{})
	if len(fails) != 1 || fails[0].Index != -1 || fails[0].Kind != codec.KindTypeMismatch {
		t.Fatalf("failures %+v, want one mismatch of the whole chain", fails)
	}
}

// benchDocs are documents of 200 short words each.
func benchDocs() []string {
	docs := make([]string, 200)
	for i := range docs {
		var b strings.Builder
		for j := range 200 {
			fmt.Fprintf(&b, "w%d ", (i*7+j)%500)
		}
		docs[i] = b.String()
	}
	return docs
}

// What a chain costs a by-key step over a flat map (words, then the
// emitter), against the emitter splitting the documents itself.
func BenchmarkCombineChain(b *testing.B) {
	docs := benchDocs()
	red := Fold("sum", "sig", nil, func(_ context.Context, a, b int) (int, error) { return a + b, nil }, errors.New("reduce"))
	one, _ := Emit("one", "sig", nil, func(_ context.Context, w string, emit func(string, int)) error {
		emit(w, 1)
		return nil
	}).Boundary()
	direct, _ := Emit("split", "sig", nil, func(_ context.Context, doc string, emit func(string, int)) error {
		for _, w := range strings.Fields(doc) {
			emit(w, 1)
		}
		return nil
	}).Boundary()
	b.Run("flat-then-emit", func(b *testing.B) {
		steps := []Step{words()}
		for b.Loop() {
			one.CombineChain(context.Background(), steps, docs, Policy{}, red, 16)
		}
	})
	b.Run("emit", func(b *testing.B) {
		for b.Loop() {
			direct.CombineChain(context.Background(), nil, docs, Policy{}, red, 16)
		}
	})
}
