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
	r := Run(func(ctx context.Context) {
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
	r := Run(func(ctx context.Context) { <-ctx.Done() })
	r.Start(ctx)
	cancel()
	r.Wait()
}

func TestRunnerStoppedBeforeStartNeverRuns(t *testing.T) {
	var ran atomic.Bool
	r := Run(func(context.Context) { ran.Store(true) })
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
	r := Run(func(ctx context.Context) {
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
		return Run(func(ctx context.Context) {
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
