package manager_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// limitedSquare squares x after 20 ms; TestFaultForeignSweep caps it.
var limitedSquare = squareAfter("sweeplimsq", 20*time.Millisecond)

// sweepRun is one batch TestFaultForeignSweep runs, its results read as
// they come.
type sweepRun struct {
	kind  string // plain, private, durable, limited
	batch *manager.Batch[int]
	seen  []int
	n     int  // results read
	ended bool // its results all read
}

// sweepState is what the readers of TestFaultForeignSweep's batches share.
type sweepState struct {
	mu       sync.Mutex
	spoiled  string   // the kind of key spoiled last, and those before it
	taskSets []string // the task sets spoiled: their batches may fail naming them
	failures []string
	changed  chan struct{} // closed and replaced at every result
}

func (s *sweepState) read(r *sweepRun) {
	for res := range r.batch.Results() {
		s.mu.Lock()
		r.n++
		r.seen[res.Index]++
		var ce *redmap.CommandError
		switch {
		case r.seen[res.Index] != 1:
			s.failures = append(s.failures, fmt.Sprintf("%s batch: element %d delivered twice (after foreign data over a %s)", r.kind, res.Index, s.spoiled))
		case res.Err == nil && res.Value == res.Index*res.Index:
		case errors.As(res.Err, &ce) && slices.Contains(s.taskSets, ce.Key):
		default:
			s.failures = append(s.failures, fmt.Sprintf("%s batch: element %d: %d, %v (after foreign data over a %s)", r.kind, res.Index, res.Value, res.Err, s.spoiled))
		}
		close(s.changed)
		s.changed = make(chan struct{})
		s.mu.Unlock()
	}
	s.mu.Lock()
	r.ended = true
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// Foreign data over every kind of key of a queue, one kind after another,
// while a batch of each kind runs on it (plain, private to a worker,
// durable, of a function with a limit): each running batch still moves
// within keyBound, every element ends exactly once with its value — or,
// for a task set, with a *redmap.CommandError naming the key — no worker
// stops, and a Map on the queue afterwards completes.
func TestFaultForeignSweep(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of batches moving under foreign data")
	}
	b := setup(t)
	ctx := context.Background()
	// A lease of 5 s: a 1 s lease lapsed under make test-cluster's load,
	// and a private batch's worker reaped alive fails its tasks as lost.
	wopts := worker.Options{Concurrency: 4, Lease: 5 * time.Second, Heartbeat: 200 * time.Millisecond}
	w1, _, ran1 := b.StartWorker(t, wopts, calmSquare, limitedSquare)
	w2, _, ran2 := b.StartWorker(t, wopts, calmSquare, limitedSquare)
	m := b.Manager(t, manager.Options{Shards: 1})
	harness.WaitLive(t, m, w1.ID(), w2.ID()) // the private batch checks its worker is live
	in := newInspector(t, b)
	if _, err := in.SetLimit(ctx, b.Queue, limitedSquare.Name(), redmap.Limit{Rate: 200, Concurrency: 3}); err != nil {
		t.Fatal(err)
	}
	base := keys.Base("redmap", b.Queue)
	// kindOf names the kind of key k: its name after the queue's, the ids
	// in it replaced.
	ids := []string{m.ID(), "<mid>", w1.ID(), "<wid>", w2.ID(), "<wid>"}
	durables := 0 // each durable batch has a name of its own: a name is held a while after its batch ends
	hex := regexp.MustCompile(`[0-9a-f]{16}`)
	num := regexp.MustCompile(`[0-9]+`)
	lane := regexp.MustCompile(`(<mid>|<did>)\.[0-9a-z]+`)
	kindOf := func(k string) string {
		k = strings.NewReplacer(ids...).Replace(strings.TrimPrefix(k, base))
		k = lane.ReplaceAllString(k, "$1.<lane>")
		return num.ReplaceAllString(hex.ReplaceAllString(k, "<h>"), "<n>")
	}
	isTaskSet := func(kind string) bool { return strings.HasPrefix(kind, "m:") && strings.HasSuffix(kind, ":tasks") }

	st := &sweepState{spoiled: "(none yet)", changed: make(chan struct{})}
	var readers sync.WaitGroup
	defer readers.Wait()
	runs := map[string]*sweepRun{}
	start := func(kind string) {
		opts := []manager.CallOption{manager.ChunkSize(10)}
		h := calmSquare
		switch kind {
		case "private":
			opts = append(opts, manager.OnWorker(w1.ID()))
		case "durable":
			durables++
			name := fmt.Sprintf("sweep%d", durables)
			ids = append(ids, id.Durable(name), "<did>")
			opts = append(opts, manager.Durable(name))
		case "limited":
			h = limitedSquare
		}
		batch, err := manager.Submit(longCtx(t), m, h, ints(600), opts...)
		if err != nil {
			t.Fatalf("submitting a %s batch after foreign data over a %s: %v", kind, st.spoiled, err)
		}
		r := &sweepRun{kind: kind, batch: batch, seen: make([]int, batch.Len())}
		runs[kind] = r
		readers.Add(1)
		go func() { defer readers.Done(); st.read(r) }()
	}
	// moving waits until each of runs has read more than it had, or ended.
	moving := func(what string, wait time.Duration) {
		t.Helper()
		st.mu.Lock()
		from := map[*sweepRun]int{}
		for _, r := range runs {
			if !r.ended {
				from[r] = r.n
			}
		}
		st.mu.Unlock()
		deadline := time.After(wait)
		for {
			st.mu.Lock()
			var stuck []string
			for r, n := range from {
				if !r.ended && r.n == n {
					stuck = append(stuck, r.kind)
				}
			}
			changed := st.changed
			st.mu.Unlock()
			if len(stuck) == 0 {
				return
			}
			select {
			case <-changed:
			case err := <-ran1:
				t.Fatalf("worker 1 stopped %s: %v", what, err)
			case err := <-ran2:
				t.Fatalf("worker 2 stopped %s: %v", what, err)
			case <-deadline:
				slices.Sort(stuck)
				t.Fatalf("%s, the %s batches did not move in %v", what, strings.Join(stuck, ", "), wait)
			}
		}
	}
	spoiled := map[string]bool{}
	var order []string // the kinds spoiled, in order
	var taskSets []string
	for round := 0; ; round++ {
		for _, kind := range []string{"plain", "private", "durable", "limited"} {
			st.mu.Lock()
			r := runs[kind]
			again := r == nil || r.ended
			st.mu.Unlock()
			if again {
				start(kind)
			}
		}
		moving("starting", keyBound)
		var key, kind string
		all := b.Keys(t, base+"*")
		slices.Sort(all)
		for _, k := range all {
			if kk := kindOf(k); !spoiled[kk] && !isTaskSet(kk) {
				key, kind = k, kk
				break
			}
		}
		if key == "" {
			break
		}
		spoiled[kind] = true
		// A key spoiled may stop something only later (a durable batch's
		// next claim): what was spoiled before it is named too.
		what := kind
		if len(order) > 0 {
			what += " (spoiled before it: " + strings.Join(order, ", ") + ")"
		}
		order = append(order, kind)
		st.mu.Lock()
		st.spoiled = what
		st.mu.Unlock()
		if err := b.Client.Set(ctx, key, "not redmap's", 0).Err(); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: foreign string over a %s", round, kind)
		// Twice: a result already on its way when the key was spoiled
		// does not show that the batch goes on.
		moving("after foreign data over a "+what, keyBound)
		moving("after foreign data over a "+what, keyBound)
	}
	// Last, the task sets: their batches fail naming them, the rest run.
	taskSets = append(taskSets, b.Keys(t, base+"m:*:tasks")...)
	st.mu.Lock()
	st.taskSets = taskSets
	st.spoiled = "task set"
	st.mu.Unlock()
	for _, k := range taskSets {
		if err := b.Client.Set(ctx, k, "not redmap's", 0).Err(); err != nil {
			t.Fatal(err)
		}
		t.Logf("foreign string over task set %s", kindOf(k))
	}
	// Every batch ends.
	for _, r := range runs {
		wctx, cancel := context.WithTimeout(ctx, keyBound)
		_, err := r.batch.Wait(wctx)
		cancel()
		var ce *redmap.CommandError
		if err != nil && !(errors.As(err, &ce) && slices.Contains(taskSets, ce.Key)) {
			t.Errorf("the %s batch: %v", r.kind, err)
		}
	}
	readers.Wait()
	st.mu.Lock()
	for _, f := range st.failures {
		t.Error(f)
	}
	st.mu.Unlock()
	for _, r := range runs {
		for i, k := range r.seen {
			if k != 1 {
				t.Errorf("%s batch: element %d delivered %d times", r.kind, i, k)
				break
			}
		}
	}
	kinds := make([]string, 0, len(spoiled))
	for k := range spoiled {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	t.Logf("spoiled %d kinds of key: %s", len(kinds), strings.Join(kinds, " "))
	// A Map on the queue afterwards completes, of each kind.
	for _, kind := range []string{"plain", "private", "durable", "limited"} {
		start(kind)
		wctx, cancel := context.WithTimeout(ctx, keyBound)
		ys, err := runs[kind].batch.Wait(wctx)
		cancel()
		if err != nil {
			t.Fatalf("a %s batch after the sweep: %v", kind, err)
		}
		for i, y := range ys {
			if y != i*i {
				t.Fatalf("a %s batch after the sweep, element %d: %d", kind, i, y)
			}
		}
	}
}
