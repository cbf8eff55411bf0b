package manager_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/inspect"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/manager"
)

// straggleRun is how long straggle and straggleWords take an element on a
// healthy worker; a worker started with REDMAP_SLOW=k takes k times as
// long: the test slows the function, as a throttled machine would, not
// redmap.
const straggleRun = 300 * time.Millisecond

// slowdown is this process's factor (REDMAP_SLOW), 1 if unset.
var slowdown = sync.OnceValue(func() time.Duration {
	if k, err := strconv.Atoi(os.Getenv("REDMAP_SLOW")); err == nil && k > 0 {
		return time.Duration(k)
	}
	return 1
})

var (
	// straggle returns x*x+1 after straggleRun (times the slowdown); it is
	// free of side effects, and says so.
	straggle = redmap.Func("straggle", func(ctx context.Context, x int) (int, error) {
		if err := pause(ctx, straggleRun*slowdown()); err != nil {
			return 0, err
		}
		return x*x + 1, nil
	}, redmap.Idempotent())
	// straggleWords emits (word, 1) for each word of a document after
	// straggleRun (times the slowdown).
	straggleWords = redmap.Emit("stragglewords", func(ctx context.Context, doc string, emit func(string, int)) error {
		if err := pause(ctx, straggleRun*slowdown()); err != nil {
			return err
		}
		for _, w := range strings.Fields(doc) {
			emit(w, 1)
		}
		return nil
	}, redmap.Idempotent())
)

// healthyPair starts two worker processes of 4 slots each, and waits
// until both are live.
func healthyPair(t *testing.T, b *harness.Env, m *manager.Manager) []*harness.Proc {
	t.Helper()
	var ps []*harness.Proc
	for range 2 {
		p := harness.Start(t, harness.Child("worker", []string{"REDMAP_URL=" + b.URL, "REDMAP_QUEUE=" + b.Queue, "REDMAP_CONCURRENCY=4"}))
		p.Expect(t, "worker ")
		ps = append(ps, p)
	}
	harness.WaitLive(t, m, ps[0].ID, ps[1].ID)
	return ps
}

// backupsSince returns the manager's backup counts less before's.
func backupsSince(m *manager.Manager, before manager.Stats) (started, won, wasted int64) {
	st := m.Stats()
	return st.BackupsStarted - before.BackupsStarted, st.BackupsWon - before.BackupsWon, st.BackupsWasted - before.BackupsWasted
}

// With two healthy workers and one 20 times slower, whose heartbeats are on
// time, a Map of 48 one-element tasks of a function declared Idempotent
// does not wait for the slow worker's tasks: their backups, run by the
// healthy workers, win; every element ends once, with its value. The same
// holds of a MapReduce (each partial folded once) and a ReduceByKey (each
// map task's partials counted once), and when the slow worker is killed
// (SIGKILL) while its tasks' copies run. The batch times are logged beside
// the healthy pair's alone (bench -scenario stragglers measures them).
func TestBackupsOvertakeASlowWorker(t *testing.T) {
	b := setup(t)
	m := b.Manager(t, manager.Options{})
	ctx := testCtx(t)
	xs := ints(48)
	check := func(t *testing.T, ys []int, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		for i, y := range ys {
			if y != i*i+1 {
				t.Fatalf("ys[%d] = %d, want %d", i, y, i*i+1)
			}
		}
	}

	healthy := healthyPair(t, b, m)
	start := time.Now()
	ys, err := manager.Map(ctx, m, straggle, xs, manager.ChunkSize(1))
	check(t, ys, err)
	pair := time.Since(start)
	if started, _, _ := backupsSince(m, manager.Stats{}); started != 0 {
		// The healthy pair's tasks all run about as long: none is held
		// twice its median, past a second.
		t.Logf("the healthy pair alone made %d backups", started)
	}
	t.Logf("the healthy pair alone: %v", pair)

	slowEnv := []string{"REDMAP_URL=" + b.URL, "REDMAP_QUEUE=" + b.Queue, "REDMAP_CONCURRENCY=4",
		"REDMAP_SLOW=20", "REDMAP_LEASE_MS=3000", "REDMAP_HEARTBEAT_MS=500"}
	slow := harness.Start(t, harness.Child("worker", slowEnv))
	slow.Expect(t, "worker ")
	harness.WaitLive(t, m, healthy[0].ID, healthy[1].ID, slow.ID)

	t.Run("Map", func(t *testing.T) {
		before := m.Stats()
		start := time.Now()
		ys, err := manager.Map(ctx, m, straggle, xs, manager.ChunkSize(1))
		check(t, ys, err)
		started, won, wasted := backupsSince(m, before)
		t.Logf("with a worker 20x slower: %v (%.2fx the pair's); backups started %d, won %d, wasted %d", time.Since(start),
			time.Since(start).Seconds()/pair.Seconds(), started, won, wasted)
		if won == 0 || started > 5 || won+wasted > started {
			t.Fatalf("backups started %d, won %d, wasted %d: want some won, at most 5 (a tenth of 48 tasks, rounded up) started", started, won, wasted)
		}
	})

	t.Run("MapReduce", func(t *testing.T) {
		before := m.Stats()
		got, err := manager.MapReduce(ctx, m, straggle, sum, xs, manager.ChunkSize(1))
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		for _, x := range xs {
			want += x*x + 1
		}
		started, won, wasted := backupsSince(m, before)
		t.Logf("MapReduce: backups started %d, won %d, wasted %d", started, won, wasted)
		if got != want {
			t.Fatalf("sum %d, want %d: a partial folded twice, or lost", got, want)
		}
		if won == 0 {
			t.Fatalf("no backup won (started %d): the slow worker's partials set the pace", started)
		}
	})

	t.Run("ReduceByKey", func(t *testing.T) {
		before := m.Stats()
		docs := make([]string, 48)
		for i := range docs {
			docs[i] = fmt.Sprintf("all w%d", i%7)
		}
		got, err := manager.ReduceByKey(ctx, m, straggleWords, sum, docs, manager.ChunkSize(1), manager.Partitions(4))
		if err != nil {
			t.Fatal(err)
		}
		started, won, wasted := backupsSince(m, before)
		t.Logf("ReduceByKey: backups started %d, won %d, wasted %d", started, won, wasted)
		if got["all"] != 48 || len(got) != 8 {
			t.Fatalf("counts %v, want all: 48 and 7 more words", got)
		}
		for i := range 7 {
			if want := (48 - i + 6) / 7; got[fmt.Sprintf("w%d", i)] != want {
				t.Fatalf("w%d counted %d, want %d: a map task's partials counted twice, or lost", i, got[fmt.Sprintf("w%d", i)], want)
			}
		}
		if won == 0 {
			t.Fatalf("no backup won (started %d)", started)
		}
	})

	t.Run("off", func(t *testing.T) {
		// A call that turns them off waits for the slow worker.
		before := m.Stats()
		ys, err := manager.Map(ctx, m, straggle, xs, manager.ChunkSize(1), manager.Backups(false))
		check(t, ys, err)
		if started, _, _ := backupsSince(m, before); started != 0 {
			t.Fatalf("%d backups of a call with Backups(false)", started)
		}
	})

	t.Run("SIGKILL", func(t *testing.T) {
		before := m.Stats()
		done := make(chan struct{})
		var ys []int
		var err error
		go func() {
			defer close(done)
			ys, err = manager.Map(ctx, m, straggle, xs, manager.ChunkSize(1))
		}()
		// Kill the slow worker once its tasks' copies are queued: its tasks
		// are then both reaped and overtaken.
		eventually(t, "the slow worker's tasks copied", func() bool {
			started, _, _ := backupsSince(m, before)
			select {
			case <-done:
				return true
			default:
				return started > 0
			}
		})
		if err := slow.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-done
		check(t, ys, err)
	})

	// The races the slow worker lost name it slow to operators (redmap
	// workers), and only it.
	in, err := inspect.New(b.Client, "")
	if err != nil {
		t.Fatal(err)
	}
	ws, err := in.Workers(ctx, b.Queue, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// The batches' history records counted them in the queue's totals, as
	// the manager did (redmap_backup_tasks_total).
	met, err := in.Metrics(ctx, b.Queue)
	if err != nil {
		t.Fatal(err)
	}
	st := m.Stats()
	if met.Backups["started"] != st.BackupsStarted || met.Backups["won"] != st.BackupsWon || met.Backups["wasted"] != st.BackupsWasted {
		t.Fatalf("the queue's totals %v; the manager's started %d, won %d, wasted %d", met.Backups, st.BackupsStarted, st.BackupsWon, st.BackupsWasted)
	}
	for _, w := range ws {
		t.Logf("worker %s: %d backup races, %d overtaken, slow %v", w.ID, w.BackupRaces, w.Overtaken, w.Slow)
		if w.Slow != (w.ID == slow.ID) {
			t.Fatalf("worker %s slow %v (%d of %d races lost); the slow one is %s", w.ID, w.Slow, w.Overtaken, w.BackupRaces, slow.ID)
		}
	}
}
