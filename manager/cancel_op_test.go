package manager_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/inspect"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/keys"
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
	// The CLI built before the batch starts: a build on a loaded machine
	// can take longer than the whole batch runs.
	redistest.Slow(t)
	harness.Build(t, "github.com/redmap/redmap/cmd/redmap")
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

// An operator cancels a durable batch whose manager process was SIGKILLed
// and whose claim has lapsed (none holds it: the cancel takes it off the
// queue's list of durable batches): it is listed after the cancel all the
// same, by redmap batches -all and in the history, cancelled, with the
// elements its workers ran done, of its published total.
func TestCLICancelOfLapsedOrphanListed(t *testing.T) {
	b := setup(t)
	const n = 20_000
	w, dir, in := killedHolder(t, b, "lapsed", 2, n)
	ctx := testCtx(t)
	for _, k := range b.Keys(t, "*:{"+keys.Glob(b.Queue)+"*}:m:*:claim") {
		if err := b.Client.PExpire(ctx, k, time.Millisecond).Err(); err != nil {
			t.Fatal(err)
		}
	}
	redistest.Eventually(t, "the killed holder's claim lapsed", func() bool {
		return len(b.Keys(t, "*:{"+keys.Glob(b.Queue)+"*}:m:*:claim")) == 0
	})
	if err := w.Stop(t); err != nil {
		t.Fatalf("the worker exited with %v", err)
	}
	out := redmapCLI(t, b, "cancel", b.Queue, "lapsed")
	t.Logf("redmap cancel: %s", out)
	ran := runsIn(t, dir)
	h, _, err := in.History(ctx, b.Queue, 0)
	if err != nil || len(h) != 1 || h[0].Durable != "" && h[0].Durable != "lapsed" || h[0].Outcome != "cancelled" ||
		h[0].Done != ran || h[0].Total != n || h[0].Func == "" {
		t.Fatalf("the history after the cancel: %+v, %v; want the batch cancelled, its %d elements run done, of %d", h, err, ran, n)
	}
	listed := redmapCLI(t, b, "batches", "-all", "-queue", b.Queue)
	t.Logf("redmap batches -all:\n%s", listed)
	var row []string
	for _, l := range strings.Split(listed, "\n") {
		if f := strings.Fields(l); len(f) > 6 && f[1] == h[0].ID {
			row = f
		}
	}
	// QUEUE BATCH FUNC CALL OUTCOME DONE FAILED TOTAL ...
	if len(row) < 8 || row[4] != "cancelled" || row[5] != strconv.Itoa(ran) || row[7] != strconv.Itoa(n) {
		t.Fatalf("redmap batches -all lists the cancelled batch as %q; want it cancelled, %d done of %d", row, ran, n)
	}
}

// runsIn returns how many runs a worker process counted in dir/runs.
func runsIn(t *testing.T, dir string) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "runs"))
	if err != nil {
		t.Fatal(err)
	}
	return len(strings.Fields(string(data))) / 2
}
