package part

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestRunnerStopsItsFunction(t *testing.T) {
	var ran atomic.Bool
	r := New(func(ctx context.Context) {
		ran.Store(true)
		<-ctx.Done()
	})
	var _ Part = r
	r.Start(context.Background())
	r.Stop()
	r.Wait()
	if !ran.Load() {
		t.Fatal("the function never ran")
	}
	r.Stop() // twice is fine
	r.Wait()
}

func TestRunnerEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	r := New(func(ctx context.Context) { <-ctx.Done() })
	r.Start(ctx)
	cancel()
	r.Wait()
}

func TestRunnerStoppedBeforeStartNeverRuns(t *testing.T) {
	var ran atomic.Bool
	r := New(func(context.Context) { ran.Store(true) })
	r.Stop()
	r.Wait() // returns: it was stopped before it started
	r.Start(context.Background())
	r.Wait()
	if ran.Load() {
		t.Fatal("a part stopped before Start ran")
	}
}

func TestRunnerStartsOnce(t *testing.T) {
	var runs atomic.Int32
	r := New(func(ctx context.Context) {
		runs.Add(1)
		<-ctx.Done()
	})
	r.Start(context.Background())
	r.Start(context.Background())
	r.Stop()
	r.Wait()
	if n := runs.Load(); n != 1 {
		t.Fatalf("started twice, the function ran %d times, want 1", n)
	}
}

func TestEveryTicksUntilStopped(t *testing.T) {
	ticks := make(chan struct{}, 100)
	r := Every(time.Millisecond, func(context.Context) { ticks <- struct{}{} })
	r.Start(context.Background())
	for range 3 {
		<-ticks // three ticks come; the test times out if they do not
	}
	r.Stop()
	r.Wait()
	for len(ticks) > 0 {
		<-ticks
	}
	// Wait returned, so the loop has returned from its last tick: no tick
	// can come after it.
	select {
	case <-ticks:
		t.Fatal("a tick came after Wait returned")
	default:
	}
}

// A List starts its parts in order and stops them last first, each waited
// for before the next is stopped.
func TestListOrder(t *testing.T) {
	var mu sync.Mutex
	var log []string
	note := func(s string) {
		mu.Lock()
		log = append(log, s)
		mu.Unlock()
	}
	mk := func(name string) Part {
		return New(func(ctx context.Context) {
			note("start " + name)
			<-ctx.Done()
			note("end " + name)
		})
	}
	l := List{mk("a"), mk("b")}
	l.Start(context.Background())
	l.Stop()
	var ends []string
	for _, s := range log {
		if strings.HasPrefix(s, "end ") {
			ends = append(ends, s)
		}
	}
	if got := strings.Join(ends, ", "); got != "end b, end a" {
		t.Fatalf("stopped as %q, want b ended before a was stopped", got)
	}
}

// A Set's parts leave it as they end; Stop stops those still running and
// waits for them, and the set starts none after.
func TestSetStopsWhatRuns(t *testing.T) {
	var s Set
	var _ Part = &s
	done := make(chan struct{})
	if !s.Go(context.Background(), func(context.Context) { close(done) }) {
		t.Fatal("Go refused before Stop")
	}
	<-done
	started := make(chan struct{})
	var stopped atomic.Bool
	s.Go(context.Background(), func(ctx context.Context) {
		close(started)
		<-ctx.Done()
		stopped.Store(true)
	})
	<-started
	s.Stop()
	s.Wait()
	if !stopped.Load() {
		t.Fatal("Wait returned before a running part ended")
	}
	if s.Go(context.Background(), func(context.Context) { t.Error("a part ran after Stop") }) {
		t.Fatal("Go started a part after Stop")
	}
}

// A Drain runner's Stop drains it (once) instead of ending its context:
// its function returns once it has handled its input, its context live
// until then.
func TestDrainHandlesItsInput(t *testing.T) {
	in := make(chan int, 3)
	var handled []int
	var live atomic.Bool
	r := Drain(func(ctx context.Context) {
		for x := range in {
			handled = append(handled, x)
		}
		live.Store(ctx.Err() == nil)
	}, func() { close(in) })
	r.Start(context.Background())
	in <- 1
	in <- 2
	r.Stop()
	r.Stop() // once: in is closed once
	r.Wait()
	if len(handled) != 2 || !live.Load() {
		t.Fatalf("handled %v, context live %v; want [1 2] under a live context", handled, live.Load())
	}
	never := Drain(func(context.Context) { t.Error("ran after Stop") }, func() {})
	never.Stop()
	never.Wait()
	never.Start(context.Background())
}
