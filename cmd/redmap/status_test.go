package main

import (
	"context"
	"strings"
	"testing"

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
