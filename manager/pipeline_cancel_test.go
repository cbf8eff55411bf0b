package manager_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/inspect"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/manager"
)

// An operator cancels a running pipeline the way redmap cancel does, by
// the id of one of its batches, while worker processes run its first
// stage: Collect returns, before that stage could have ended, an error
// wrapping ErrCancelled that names the pipeline; the running batch ended
// cancelled with every element accounted for; no later stage's batch was
// ever submitted; and nothing is left queued, running or in the
// pipeline's partitions.
func TestPipelineCancelledByOperator(t *testing.T) {
	b := setup(t)
	_, _, m := twoWorkersFor(t, b, manager.Options{Poll: 100 * time.Millisecond})
	in, err := inspect.New(b.Client, "")
	if err != nil {
		t.Fatal(err)
	}
	docs := letterDocs(4000, 500) // 2 ms each on the workers: seconds of map tasks
	ch := collectCancelled(t, m, topPipeline(docs, slowTokens), manager.ChunkSize(20), manager.Partitions(8), manager.Label("cancelled"))
	ctx := testCtx(t)
	head := runningHead(t, in, b, func(x inspect.Batch) bool { return x.Call.Label == "cancelled" && x.Call.Pipeline != "" })
	if head.Call.Stage != "1-3 map" {
		t.Fatalf("the running batch is of stage %q, want the head's, 1-3 map", head.Call.Stage)
	}
	pc, err := cancelPipeline(ctx, in, b.Queue, head.ID)
	if err != nil {
		t.Fatal(err)
	}
	if pc.Pipeline != head.Call.Pipeline || len(pc.Managers) != 1 || pc.Managers[0] != m.ID() {
		t.Fatalf("the cancel: %+v; want pipeline %q, its manager %s asked", pc, head.Call.Pipeline, m.ID())
	}
	collected := <-ch
	if !errors.Is(collected, redmap.ErrCancelled) || !strings.HasPrefix(collected.Error(), "manager: pipeline \""+head.Call.Pipeline+"\" cancelled") {
		t.Fatalf("Collect of the cancelled pipeline: %v; want ErrCancelled, naming it", collected)
	}

	// The history has the head's batch, cancelled before its end; and no
	// batch of a later stage. Collect's error counts its elements as the
	// record does.
	h, _, err := in.History(ctx, b.Queue, inspect.HistoryShown)
	if err != nil {
		t.Fatal(err)
	}
	var ofIt []inspect.Batch
	for _, x := range h {
		if x.Call.Pipeline == head.Call.Pipeline {
			ofIt = append(ofIt, x)
		}
	}
	if len(ofIt) != 1 || ofIt[0].ID != head.ID {
		t.Fatalf("the pipeline's batches in the history: %+v; want its head's alone (no later stage submitted)", ofIt)
	}
	r := ofIt[0]
	if r.Outcome != "cancelled" || r.Done+r.Failed >= r.Total || r.Total != len(docs) {
		t.Fatalf("the head's record: %s, %d done, %d failed of %d; want it cancelled before its end, of %d elements",
			r.Outcome, r.Done, r.Failed, r.Total, len(docs))
	}
	if want := fmt.Sprintf("of its running batches' %d elements, %d done, %d failed, %d cancelled", r.Total, r.Done, r.Failed, r.Total-r.Done-r.Failed); !strings.Contains(collected.Error(), want) {
		t.Fatalf("Collect's error: %v; want it to say %q, as the history records the batch", collected, want)
	}
	nothingRunsOrWaits(t, in, b)
	cancelledPartitionsExpire(t, b)
}

// collectCancelled runs p on m with opts in the background, for a test
// that cancels it: the channel gets Collect's error, or one saying it gave
// outputs with none.
func collectCancelled(t *testing.T, m *manager.Manager, p *manager.Pipeline[string], opts ...manager.CallOption) <-chan error {
	ch := make(chan error, 1)
	go func() {
		got, err := manager.Collect(testCtx(t), m, p, opts...)
		if err == nil && got != nil {
			err = errors.New("outputs without an error")
		}
		ch <- err
	}()
	return ch
}

// runningHead waits for a running batch of b's queue that matches and
// has some elements done, and returns it.
func runningHead(t *testing.T, in *inspect.Inspector, b *harness.Env, matches func(inspect.Batch) bool) inspect.Batch {
	t.Helper()
	ctx := testCtx(t)
	var head inspect.Batch
	eventually(t, "the head batch running, some of it done", func() bool {
		bs, err := in.Batches(ctx, b.Queue)
		if err != nil {
			return false
		}
		for _, x := range bs {
			if matches(x) && x.Done > 0 {
				head = x
				return true
			}
		}
		return false
	})
	return head
}
