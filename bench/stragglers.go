package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/manager"
)

// slowEnv slows a worker process's straggle by its factor, as a throttled
// machine would: the function slows itself, not redmap.
const slowEnv = "REDMAP_BENCH_SLOW"

// straggleRun is how long straggle takes an element on a healthy worker.
const straggleRun = 500 * time.Millisecond

var slowdown = sync.OnceValue(func() time.Duration {
	if k, err := strconv.Atoi(os.Getenv(slowEnv)); err == nil && k > 0 {
		return time.Duration(k)
	}
	return 1
})

// straggle returns x+1 after straggleRun (times the process's slowdown);
// free of side effects, it says so, and its batches get backup tasks.
var straggle = redmap.Func("straggle", func(ctx context.Context, x int) (int, error) {
	select {
	case <-time.After(straggleRun * slowdown()):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return x + 1, nil
}, redmap.Idempotent())

// stragglers: a Map of 48 one-element tasks of 500 ms on two healthy worker
// processes of 4 slots (the pair), then on the same pair beside a third
// worker 20 times slower, with backup tasks (the default for a function
// declared Idempotent) and without (Backups(false)). The pair's time is the
// floor: with backups the batch should end near it, without it waits for
// the slow worker's tasks (10 s each).
func stragglers(e *env) ([]row, error) {
	const n, slots = 48, 4
	queue := "bench-strag-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	var cmds []*exec.Cmd
	defer func() { e.stopWorkers(cmds) }()
	for range 2 {
		cmd, err := e.startWorker(queue, 1, slots)
		if err != nil {
			return nil, err
		}
		cmds = append(cmds, cmd)
	}
	m, err := manager.New(e.rdb, manager.Options{Queue: queue})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	ctx := context.Background()
	run := func(contender string, opts ...manager.CallOption) (row, error) {
		before := m.Stats()
		r, err := e.measure("stragglers", contender, n, func() error {
			ys, err := manager.Map(ctx, m, straggle, ints(n), append(opts, manager.ChunkSize(1))...)
			if err == nil && ys[n-1] != n {
				err = fmt.Errorf("ys[%d] = %d, want %d", n-1, ys[n-1], n)
			}
			return err
		})
		st := m.Stats()
		r.note = fmt.Sprintf("backups started %d, won %d, wasted %d", st.BackupsStarted-before.BackupsStarted,
			st.BackupsWon-before.BackupsWon, st.BackupsWasted-before.BackupsWasted)
		return r, err
	}
	pair, err := run("healthy pair alone")
	if err != nil {
		return nil, err
	}
	slow, err := e.startWorker(queue, 1, slots, slowEnv+"=20")
	if err != nil {
		return nil, err
	}
	cmds = append(cmds, slow)
	with, err := run("redmap, a worker 20x slower, backups")
	if err != nil {
		return nil, err
	}
	without, err := run("redmap, a worker 20x slower, Backups(false)", manager.Backups(false))
	if err != nil {
		return nil, err
	}
	return []row{pair, with, without}, nil
}
