package manager_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/redmap/redmap/inspect"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// An operator pauses a queue: its worker, rung by a submit, takes nothing
// and waits idle; the batch waits, its tasks queued, and the queue says it
// is paused, and its manager warns that it waits. A resume wakes the worker at once, and the batch ends exact.
func TestPauseAndResume(t *testing.T) {
	b := setup(t)
	w := b.Worker(t, worker.Options{Concurrency: 2}, square)
	logs := &logRecorder{}
	m := b.Manager(t, manager.Options{Logger: slog.New(logs), Poll: 100 * time.Millisecond})
	in, err := inspect.New(b.Client, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	idle := func() bool {
		// The worker in the idle set of every shard, its bell empty: it
		// took, and found nothing it may take.
		shards := append([]string{b.Queue}, b.Client.LRange(ctx, keys.ShardNames("redmap", b.Queue), 0, -1).Val()...)
		for _, sh := range shards {
			if !b.Client.SIsMember(ctx, keys.Idle("redmap", sh), w.ID()).Val() || b.Client.Exists(ctx, keys.Bell("redmap", sh, w.ID())).Val() != 0 {
				return false
			}
		}
		return true
	}
	redistest.Eventually(t, "the worker idle", idle)
	if did, err := in.Pause(ctx, b.Queue, "test"); err != nil || !did {
		t.Fatalf("pause: %v, %v; want the queue paused now", did, err)
	}
	if did, err := in.Pause(ctx, b.Queue, "again"); err != nil || did {
		t.Fatalf("a second pause: %v, %v; want nothing done", did, err)
	}
	xs := span(50)
	batch, err := manager.Submit(ctx, m, square, xs)
	if err != nil {
		t.Fatal(err)
	}
	taken := w.Stats().Taken
	redistest.Eventually(t, "the worker rung by the submit, idle again", idle)
	snap, err := in.Snapshot(ctx, b.Queue)
	if err != nil {
		t.Fatal(err)
	}
	if w.Stats().Taken != taken || batch.Progress().Done != 0 || snap.Queue.Depth == 0 {
		t.Fatalf("while paused: the worker took %d tasks, %d elements done, depth %d; want nothing taken", w.Stats().Taken-taken, batch.Progress().Done, snap.Queue.Depth)
	}
	if snap.Queue.Paused == nil || snap.Queue.Paused.By != "test" || snap.Queue.Paused.Since.IsZero() || snap.Queue.Idle() {
		t.Fatalf("the paused queue reads %+v; want it paused by the first pause, since a time, and not idle", snap.Queue)
	}
	redistest.Eventually(t, "the manager says its batch waits on a paused queue", func() bool { return logs.logged("paused by an operator") })
	resumed, rung, err := in.Resume(ctx, b.Queue)
	if err != nil || !resumed || rung < 1 {
		t.Fatalf("resume: %v, %d rung, %v; want the idle worker rung", resumed, rung, err)
	}
	ys, err := batch.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkSquaresOf(t, xs, ys)
	if snap, err := in.Snapshot(ctx, b.Queue); err != nil || snap.Queue.Paused != nil {
		t.Fatalf("after the resume: %+v, %v; want it running", snap.Queue.Paused, err)
	}
	if resumed, _, err := in.Resume(ctx, b.Queue); err != nil || resumed {
		t.Fatalf("a second resume: %v, %v; want nothing done", resumed, err)
	}
}

// An idle worker's state says for how long it has been idle, not how old
// its last heartbeat is (redmap workers, FOR).
func TestIdleWorkerSince(t *testing.T) {
	b := setup(t)
	b.Worker(t, worker.Options{Heartbeat: 100 * time.Millisecond}, square)
	in, err := inspect.New(b.Client, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	redistest.Eventually(t, "the worker idle for over a second, its heartbeat fresh", func() bool {
		ws, err := in.Workers(ctx, b.Queue, time.Now())
		if err != nil || len(ws) != 1 {
			return false
		}
		w := ws[0]
		return w.State == "idle" && w.Since > 1 && w.HeartbeatAge < 0.5
	})
}
