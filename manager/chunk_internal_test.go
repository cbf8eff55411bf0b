package manager

import (
	"context"
	"strings"
	"testing"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/codec"
)

// A task's size follows the function's cost, up to chunkMax elements, and
// its payload stays near chunkBytes: a cheap function of 64 KiB elements
// gets tasks of 64 of them (4 MiB), not 65,536 (4 GiB) or a sixteenth of
// the batch.
func TestChunkSizeKeepsPayloadsNearChunkBytes(t *testing.T) {
	c := newCosts()
	if got := c.chunkSize(plainSizing("f"), 1000); got != 8 {
		t.Fatalf("cost unknown: %d elements a task, want 8", got)
	}
	c.observe("f", 10_000, 1_000) // 10 ns an element
	if got := c.chunkSize(plainSizing("f"), 1<<30); got != chunkMax {
		t.Fatalf("10 ns an element, size unknown: %d elements a task, want %d", got, chunkMax)
	}
	if got := c.chunkSize(plainSizing("f"), 1600); got != 100 {
		t.Fatalf("a batch of 1,600: %d elements a task, want 100 (16 tasks)", got)
	}
	c.observeSize("f", 8<<10, 1) // 8 bytes an element would not bind
	c.observeSize("g", 64<<10, 1)
	c.observe("g", 10_000, 1_000)
	if got := c.chunkSize(plainSizing("g"), 1<<30); got != chunkBytes/(64<<10) {
		t.Fatalf("64 KiB elements: %d elements a task, want %d", got, chunkBytes/(64<<10))
	}
	c.observe("h", 1_000_000, 1) // 1 ms an element: the cost binds first
	c.observeSize("h", 1<<10, 1)
	if got := c.chunkSize(plainSizing("h"), 1<<30); got != 4 {
		t.Fatalf("1 ms elements of 1 KiB: %d elements a task, want 4 (4 ms)", got)
	}
}

// echoes is a worker's run of an identity function over a task's strings.
func echoes(t *codec.Task) ([]byte, error) {
	xs := make([]string, t.Count)
	if err := codec.DecodeElements(t.Input, xs); err != nil {
		return nil, err
	}
	b, _, err := codec.EncodeOutputs(xs)
	return b, err
}

var echoString = redmap.Func("echo", func(_ context.Context, s string) (string, error) { return s, nil })

// The feeder learns how large a function's elements encode, which
// chunkSize then holds tasks to.
func TestFeederLearnsElementSize(t *testing.T) {
	q := newTestQueue(t, 1)
	q.play(echoes, 0)
	m := q.manager(t, Options{})
	xs := make([]string, 64)
	for i := range xs {
		xs[i] = strings.Repeat("x", 8<<10)
	}
	ys, err := Map(unitCtx(t), m, echoString, xs)
	if err != nil || len(ys) != len(xs) || ys[63] != xs[63] {
		t.Fatalf("%d results, %v", len(ys), err)
	}
	m.costs.mu.Lock()
	per := m.costs.bytes[echoString.Name()]
	m.costs.mu.Unlock()
	// Each element's 8,192 bytes, its string header and its share of its
	// task's envelope (function, signature; here a task of one element).
	if per < 8<<10 || per > 8<<10+128 {
		t.Fatalf("learnt %.0f bytes an element, want 8 KiB and at most 128 more", per)
	}
}

// A map task of a map/reduce by key aims at mapTarget of work, not
// chunkTarget, and its cost is learnt apart from plain calls of the same
// emitter; a reduce phase's tasks (sizing with no key) teach nothing.
func TestMapSizingLearnsApart(t *testing.T) {
	c := newCosts()
	plain, byKey := plainSizing("e"), mapSizing("e")
	c.observe(byKey.key, 1_000_000, 1) // 1 ms an element
	if got, want := c.chunkSize(byKey, 1<<30), int(mapTarget/1e6); got != want {
		t.Fatalf("map tasks of 1 ms elements: %d elements a task, want %d", got, want)
	}
	if got := c.chunkSize(byKey, 1600); got != 100 {
		t.Fatalf("a map phase of 1,600: %d elements a task, want 100 (16 tasks)", got)
	}
	if c.known(plain) || c.chunkSize(plain, 1000) != chunkUnknown {
		t.Fatalf("a plain call of the emitter learnt the map tasks' cost")
	}
	c.observe(sizingOf(spec{name: "e", phase: "reduce"}).key, 5e9, 1) // a reduce task: 5 s a partition
	if got, want := c.chunkSize(byKey, 1<<30), int(mapTarget/1e6); got != want {
		t.Fatalf("after a reduce task: map tasks of %d elements, want %d still", got, want)
	}
	if c.known(plain) {
		t.Fatal("a reduce task taught the emitter a cost")
	}
}

// While the cost is unknown the feeder cuts measureTasks tasks and waits;
// the rest is cut to the cost their results report, and a batch whose
// blind tasks report none (Nanos 0) still ends, a few tasks at a time.
func TestFeederMeasuresBeforeCutting(t *testing.T) {
	for _, nanos := range []int64{1_000, 0} {
		q := newTestQueue(t, 1)
		q.play(echoes, nanos)
		m := q.manager(t, Options{})
		xs := make([]string, 3000)
		ys, err := Map(unitCtx(t), m, echoString, xs)
		if err != nil || len(ys) != len(xs) {
			t.Fatalf("%d ns an element: %d results, %v", nanos, len(ys), err)
		}
		tasks := len(q.first().submittedIDs())
		if nanos == 0 {
			// Never measured: blind tasks of min(3000/64, 8) elements.
			if tasks != 375 {
				t.Fatalf("no cost reported: %d tasks, want 375 of 8", tasks)
			}
			continue
		}
		// 4 tasks of 8, then 16 of about 186 (the spread): not 375 of 8.
		if tasks > measureTasks+chunkSpread+1 {
			t.Fatalf("1 µs an element: %d tasks, want at most %d", tasks, measureTasks+chunkSpread+1)
		}
	}
}
