package main

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/inspect"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
)

// stageLine returns the fields of the line of out that lists stage (its
// fields first), or nil.
func stageLine(out, stage string) []string {
	want := strings.Fields(stage)
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if strings.HasPrefix(l, "  ") && len(f) > len(want) && slices.Equal(f[:len(want)], want) {
			return f[len(want):]
		}
	}
	return nil
}

// redmap batches lists a running pipeline as one job, with a line for each
// stage (its done, failed and running elements), not its batches; redmap
// cancel of one of its batches ends the whole pipeline, whose call returns
// ErrCancelled; and batches -all then shows it ended, cancelled, by stage.
func TestPipelineListedAndCancelled(t *testing.T) {
	e := harness.Setup(t)
	srv, queue := e.Srv, e.Queue
	startWorker(t, srv, queue, "-concurrency", "4")
	m := e.Manager(t, manager.Options{Poll: 100 * time.Millisecond})
	ctx := context.Background()
	p := manager.Then(manager.ByKey(manager.From(ints(200)), pkey, psum), phold)
	ch := make(chan error, 1)
	go func() {
		_, err := manager.Collect(ctx, m, p, manager.Partitions(2), manager.ChunkSize(10), manager.Label("nightly"))
		ch <- err
	}()
	var bs []inspect.Batch
	redistest.Eventually(t, "the reduce stage running", func() bool {
		cliJSON(t, srv, &bs, "batches", "-queue", queue)
		return len(bs) == 1 && bs[0].Call.Stage == "1-2 reduce"
	})
	reduce := bs[0]
	out, _, code := runCLI(t, srv, "batches", "-queue", queue)
	t.Logf("redmap batches:\n%s", out)
	if code != 0 || !strings.Contains(out, "PIPELINE") || strings.Contains(out, reduce.ID) {
		t.Fatalf("redmap batches (exit %d) lists no pipeline, or its batch %s as a batch:\n%s", code, reduce.ID, out)
	}
	var job []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, reduce.Call.Pipeline+" ") {
			job = strings.Fields(l)
		}
	}
	// PIPELINE QUEUE STATE FUNC BATCHES ... AGE CALL
	if len(job) < 6 || job[1] != queue || job[2] != "running" || job[3] != "2" || job[len(job)-1] != "label=nightly" {
		t.Fatalf("the pipeline's line %q; want it running, of 2 stages, labelled", job)
	}
	// STATE FUNC BATCHES DONE FAILED RUNNING TOTAL RATE/S
	if head := stageLine(out, "1 map"); len(head) < 7 || !slices.Equal(head[:7], []string{"done", "pkey", "1", "200", "0", "0", "200"}) {
		t.Fatalf("the head stage's line %q; want it done, its 200 elements", head)
	}
	if red := stageLine(out, "1-2 reduce"); len(red) < 7 || !slices.Equal(red[:7], []string{"running", "pkey", "1", "0", "0", "2", "2"}) {
		t.Fatalf("the reduce stage's line %q; want it running, its 2 partitions", red)
	}

	out, errs, code := runCLI(t, srv, "cancel", queue, reduce.ID)
	if code != 0 || !strings.Contains(out, "is of pipeline") || !strings.Contains(out, "cancelled pipeline") {
		t.Fatalf("redmap cancel of a pipeline's batch: exit %d %q %q", code, out, errs)
	}
	if err := <-ch; !errors.Is(err, redmap.ErrCancelled) || !strings.Contains(err.Error(), reduce.Call.Pipeline) ||
		!strings.Contains(err.Error(), "2 elements, 0 done, 0 failed, 2 cancelled") {
		t.Fatalf("Collect of the cancelled pipeline: %v; want ErrCancelled, naming it and counting its reduce's 2 partitions cancelled", err)
	}
	out, _, code = runCLI(t, srv, "batches", "-all", "-queue", queue)
	t.Logf("redmap batches -all:\n%s", out)
	if red := stageLine(out, "1-2 reduce"); code != 0 || len(red) < 1 || red[0] != "cancelled" {
		t.Fatalf("redmap batches -all (exit %d): the reduce stage %q; want it cancelled:\n%s", code, red, out)
	}
	if strings.Contains(out, reduce.ID) {
		t.Fatalf("redmap batches -all lists the pipeline's batch %s in the history of batches:\n%s", reduce.ID, out)
	}
	if _, _, code := runCLI(t, srv, "cancel", queue, "nopipe"); code == 0 {
		t.Fatal("redmap cancel of a name nothing has: exit 0")
	}
}
