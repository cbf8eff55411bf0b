package manager_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/inspect"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
)

// redmapCLI runs the redmap command as a process against env's Redis, and
// fails the test unless it exits 0; it returns what it printed.
func redmapCLI(t *testing.T, env *harness.Env, args ...string) string {
	t.Helper()
	cmd := exec.Command(harness.Build(t, "github.com/redmap/redmap/cmd/redmap"), args...)
	cmd.Env = append(os.Environ(), "REDIS_URL="+env.URL)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("redmap %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// An operator cancels a plain running batch of a manager process by its id
// with redmap cancel, run as a process: the manager's call returns an
// error wrapping ErrCancelled, and the history records it cancelled, with
// what ran.
func TestCLICancelsPlainBatch(t *testing.T) {
	b := setup(t)
	w := startChild(t, "worker", childEnv(b, "REDMAP_CONCURRENCY=4")...)
	w.Expect(t, "worker ")
	m := startChild(t, "manager-cancelled", "REDMAP_URL="+b.URL, "REDMAP_QUEUE="+b.Queue)
	mid := m.Expect(t, "mapping ")
	in, err := inspect.New(b.Client, "")
	if err != nil {
		t.Fatal(err)
	}
	var bid string
	redistest.Eventually(t, "the batch running, some of it done", func() bool {
		bs, err := in.Batches(testCtx(t), b.Queue)
		if err != nil || len(bs) != 1 || bs[0].Manager != mid || bs[0].Done == 0 {
			return false
		}
		bid = bs[0].ID
		return true
	})
	out := redmapCLI(t, b, "cancel", b.Queue, bid)
	if !strings.Contains(out, "cancelled batch "+bid) {
		t.Fatalf("redmap cancel said %q", out)
	}
	if got := m.Expect(t, "ended "); !strings.HasPrefix(got, "cancelled=true") {
		t.Fatalf("the manager's call ended %q; want an error wrapping ErrCancelled", got)
	}
	<-m.Exited()
	h, _, err := in.History(testCtx(t), b.Queue, 1)
	if err != nil || len(h) != 1 || h[0].ID != bid || h[0].Outcome != "cancelled" || h[0].Total != 3000 || h[0].Done == 0 || h[0].Done == 3000 {
		t.Fatalf("the history: %+v, %v; want batch %s cancelled, part of its 3,000 elements done", h, err, bid)
	}
}

// An operator cancels a durable batch whose manager process was SIGKILLed
// and whose claim lapsed, with redmap cancel run as a process: the history
// records it cancelled with what the workers ran (the worker process
// counts its runs), not its dead manager's last published progress; and
// the call that takes it over, failing its elements with ErrCancelled,
// does not write over that record.
func TestCLICancelOfOrphanRecordsWhatRan(t *testing.T) {
	b := setup(t)
	const n = 100_000
	w, dir, in := killedHolder(t, b, "orphan", 2, n)
	redistest.Eventually(t, "the batch orphaned (its claim lapsed)", func() bool {
		bt, ok := batchOf(t, in, b.Queue, "orphan")
		return ok && bt.Outcome == "orphaned"
	})
	// The worker finishes what it holds and stops: what ran is final.
	if err := w.Stop(t); err != nil {
		t.Fatalf("the worker exited with %v", err)
	}
	redmapCLI(t, b, "cancel", b.Queue, "orphan")
	ran := len(readRuns(t, filepath.Join(dir, "runs"))) // the elements that ran
	ctx := testCtx(t)
	recorded := func(when string) {
		t.Helper()
		h, _, err := in.History(ctx, b.Queue, 1)
		if err != nil || len(h) != 1 || h[0].Outcome != "cancelled" || h[0].Done != ran || h[0].Failed != 0 || h[0].Total != n {
			t.Fatalf("the history %s: %+v, %v; want the batch cancelled, the %d elements the worker ran done, of %d", when, h, err, ran, n)
		}
	}
	recorded("after the cancel")
	t.Logf("%d of %d elements ran", ran, n)

	m := b.Manager(t, manager.Options{Shards: 1}) // as the child's
	_, err := manager.Map(ctx, m, countedSquare, span(n), manager.Durable("orphan"), manager.DurableWait(time.Minute))
	var be *redmap.BatchError
	if !errors.As(err, &be) || len(be.Failed) != n || !errors.Is(be.Failed[0].Err, redmap.ErrCancelled) {
		t.Fatalf("the call that takes the cancelled batch over: %v; want its %d elements failed with ErrCancelled", err, n)
	}
	recorded("after the takeover")
}
