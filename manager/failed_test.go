package manager_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/inspect"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// A batch's failed elements are listed for operators by the time Map
// returns, with the worker that failed them: a batch of many tasks, whose
// manager writes its record, and one of a single task, whose worker does
// (the manager then writes only the list).
func TestFailedElementsListed(t *testing.T) {
	b := setup(t)
	w := b.Worker(t, worker.Options{Concurrency: 2}, stuckSquare)
	m := b.Manager(t, manager.Options{})
	in, err := inspect.New(b.Client, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		opts []manager.CallOption
	}{{"many tasks", []manager.CallOption{manager.ChunkSize(1)}}, {"one task", []manager.CallOption{manager.ChunkSize(4)}}} {
		xs := []int{5, 4, 10, 11}
		bt, err := manager.Submit(testCtx(t), m, stuckSquare, xs, c.opts...)
		if err != nil {
			t.Fatal(err)
		}
		var be *redmap.BatchError
		if _, err := bt.Wait(context.Background()); !errors.As(err, &be) || len(be.Failed) != 2 {
			t.Fatalf("%s: %v; want elements 0 and 2 failed", c.name, err)
		}
		fs, err := in.FailedElements(context.Background(), b.Queue, bt.ID())
		if err != nil || !fs.InRecord || len(fs.Elements) != 2 || fs.Elements[0].Index != 0 || fs.Elements[1].Index != 2 ||
			fs.Elements[0].Worker != w.ID() || fs.Elements[1].Error != "10: service down" {
			t.Fatalf("%s: failed elements %+v, %v; want 0 and 2, of worker %s", c.name, fs, err, w.ID())
		}
	}
}
