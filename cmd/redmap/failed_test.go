package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/inspect"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/manager"
)

// redmap failures -batch lists exactly a batch's failed elements, in index
// order, with their kind, error, attempts and the worker process that
// failed them, once the batch has ended; in text and in JSON, with or
// without -queue.
func TestFailuresOfABatch(t *testing.T) {
	e := harness.Setup(t)
	srv, queue := e.Srv, e.Queue
	startWorker(t, srv, queue)
	m := e.Manager(t, manager.Options{})
	xs := make([]int, 20)
	for i := range xs {
		xs[i] = i
	}
	b, err := manager.Submit(context.Background(), m, flaky, xs, manager.ChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Wait(context.Background())
	var be *redmap.BatchError
	if !errors.As(err, &be) || len(be.Failed) != 10 {
		t.Fatalf("flaky: %v; want the 10 odd elements failed", err)
	}
	var ws []inspect.Worker
	cliJSON(t, srv, &ws, "workers", "-queue", queue)
	if len(ws) != 1 {
		t.Fatalf("workers %+v, want the one started", ws)
	}
	var got inspect.FailedElements
	cliJSON(t, srv, &got, "failures", "-batch", b.ID())
	if got.Queue != queue || got.Batch != b.ID() || !got.InRecord || got.Omitted != 0 || len(got.Elements) != 10 {
		t.Fatalf("failures -batch: %+v; want the 10 odd elements of the batch of queue %s", got, queue)
	}
	for j, f := range got.Elements {
		want := be.Failed[j]
		kind, msg := "error", "odd input"
		if f.Index == 7 {
			kind, msg = "panic", "seven"
		}
		if f.Index != 2*j+1 || f.Index != want.Index || f.Kind != kind || !strings.Contains(f.Error, msg) ||
			f.Attempts != want.Attempt+1 || f.Attempts < 1 || f.Worker != ws[0].ID || want.Worker != ws[0].ID {
			t.Fatalf("failed element %d: %+v; want index %d, kind %s, %q, attempts %d, worker %s (Map's: %+v)",
				j, f, 2*j+1, kind, msg, want.Attempt+1, ws[0].ID, want)
		}
	}
	if got.Elements[0].Attempts != 1 {
		t.Fatalf("an odd element's attempts: %d; want 1 (its task ran once)", got.Elements[0].Attempts)
	}
	out, errs, code := runCLI(t, srv, "failures", "-queue", queue, "-batch", b.ID())
	if code != 0 || !strings.Contains(out, "10 failed elements listed") || !strings.Contains(out, "INDEX  KIND") ||
		!strings.Contains(out, ws[0].ID) || strings.Count(out, "odd input") != 9 {
		t.Fatalf("failures -batch: exit %d\n%s%s", code, out, errs)
	}
	t.Logf("redmap failures -batch:\n%s", out)
	// A batch with no failure is listed empty; one unknown is an error.
	ok, err := manager.Submit(context.Background(), m, square, []int{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ok.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	var none inspect.FailedElements
	cliJSON(t, srv, &none, "failures", "-batch", ok.ID())
	if !none.InRecord || len(none.Elements) != 0 {
		t.Fatalf("failures -batch of a batch without failures: %+v", none)
	}
	if _, errs, code := runCLI(t, srv, "failures", "-batch", "no-such:1"); code != 1 || !strings.Contains(errs, "no ended batch") {
		t.Fatalf("failures -batch of an unknown batch: exit %d, %s", code, errs)
	}
}
