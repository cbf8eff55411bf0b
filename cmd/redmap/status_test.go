package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redmap/redmap/inspect"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
)

// redmap status of many queues lists the busy ones, the deepest first, and
// counts the idle ones in one line; -all lists those too. The partitions
// of a map/reduce by key (named with '%') are no queue, even after -scan.
func TestStatusFoldsIdleQueues(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	envs := harness.Busy(t, srv, square, 1, 3)
	first, busy := envs[0], []string{envs[0].Queue, envs[1].Queue}
	harness.IndexIdle(t, first.Client, 198)
	if err := first.Client.HSet(ctx, keys.Partition("redmap", busy[0], "job", 3, 0), "0:1", "x").Err(); err != nil {
		t.Fatal(err)
	}
	out, errs, code := runCLI(t, srv, "status", "-scan")
	t.Logf("redmap status:\n%s", out)
	rows := strings.Split(out, "\n")
	if code != 0 || len(rows) < 4 || !strings.HasPrefix(rows[1], busy[1]+" ") || !strings.HasPrefix(rows[2], busy[0]+" ") ||
		!strings.HasPrefix(rows[3], "198 idle queue(s)") || strings.Contains(out, "idle-0") || strings.Contains(out, busy[0]+keys.PartitionSep) {
		t.Fatalf("redmap status (exit %d, %s): want %s, then %s, then 198 idle queues in one line, and no partition", code, errs, busy[1], busy[0])
	}
	out, _, code = runCLI(t, srv, "status", "-all")
	rows = strings.Split(out, "\n")
	if code != 0 || len(rows) < 202 || !strings.HasPrefix(rows[1], busy[1]+" ") || !strings.HasPrefix(rows[3], "idle-000 ") ||
		!strings.HasPrefix(rows[200], "idle-197 ") || strings.Contains(out, "idle queue(s)") || strings.Contains(out, busy[0]+keys.PartitionSep) {
		t.Fatalf("redmap status -all (exit %d): want the busy queues, then the 198 idle ones by name:\n%s", code, out)
	}
}

// redmap status lists a durable pipeline's own row (its claim) with what
// runs of it, as redmap batches lists its stages: its stages' functions,
// not "-"; so does -json.
func TestStatusNamesPipelineFuncs(t *testing.T) {
	e := harness.Setup(t)
	startWorker(t, e.Srv, e.Queue, "-concurrency", "4")
	name := "status-pipe"
	startPipelineChild(t, e, name, 100*time.Millisecond, 200)
	redistest.Eventually(t, "the pipeline's reduce running", func() bool {
		return slices.ContainsFunc(batchesOf(t, e, name), func(b inspect.Batch) bool {
			return b.Call.Stage == "1-2 reduce" && b.Outcome == "running"
		})
	})
	out, errs, code := runCLI(t, e.Srv, "status", "-queue", e.Queue)
	t.Logf("redmap status:\n%s", out)
	var own []string
	for _, l := range strings.Split(out, "\n") {
		// QUEUE BATCH NAME STATE FUNC ...
		if f := strings.Fields(l); len(f) > 4 && f[2] == name+"/pipeline" {
			own = f
		}
	}
	if code != 0 || len(own) < 5 || own[4] != "pkey" {
		t.Fatalf("redmap status (exit %d, %s): the pipeline's own row %q; want its stages' function, pkey", code, errs, own)
	}
	var st []queueStatus
	cliJSON(t, e.Srv, &st, "status", "-queue", e.Queue)
	if len(st) != 1 || !slices.ContainsFunc(st[0].RunningBatches, func(b inspect.Batch) bool { return b.Durable == name+"/pipeline" && b.Func == "pkey" }) {
		t.Fatalf("redmap status -json: %+v; want the pipeline's own row naming pkey", st)
	}
}
