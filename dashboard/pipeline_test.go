package dashboard_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/dashboard"
	"github.com/redmap/redmap/inspect"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// A pipeline's steps: pkey emits (x mod 100, 1), psum adds, and phold runs
// until its batch is cancelled, so that the reduce stage runs as long as
// the test needs.
var (
	pkey = redmap.Emit("pkey", func(_ context.Context, x int, emit func(int, int)) error {
		emit(x%100, 1)
		return nil
	})
	psum  = redmap.Reduce("psum", func(_ context.Context, a, b int) (int, error) { return a + b, nil })
	phold = redmap.Func("phold", func(ctx context.Context, _ redmap.KV[int, int]) (int, error) { <-ctx.Done(); return 0, ctx.Err() })
)

// stageOf returns stage name of p, or false.
func stageOf(p inspect.Pipeline, name string) (inspect.Stage, bool) {
	for _, s := range p.Stages {
		if s.Stage == name {
			return s, true
		}
	}
	return inspect.Stage{}, false
}

// The state shows a running pipeline as one job with its stages (the
// head's, ended, and the reduce's, running), not as batches; the page's
// cancel of it ends the whole pipeline, whose call returns ErrCancelled,
// and the state then shows it cancelled.
func TestStateShowsAPipelineByStage(t *testing.T) {
	e := harness.Setup(t)
	e.Worker(t, worker.Options{Concurrency: 4}, pkey, psum, phold)
	m := e.Manager(t, manager.Options{Poll: 100 * time.Millisecond})
	d, err := dashboard.New(e.Client, dashboard.Options{Queue: e.Queue, Actions: true, Token: operatorToken})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	defer srv.Close()
	ch := make(chan error, 1)
	go func() {
		p := manager.Then(manager.ByKey(manager.From(ints(200)), pkey, psum), phold)
		_, err := manager.Collect(context.Background(), m, p, manager.Partitions(2), manager.ChunkSize(10), manager.Label("nightly"))
		ch <- err
	}()
	var st dashboard.State
	redistest.Eventually(t, "the pipeline shown, its reduce stage running", func() bool {
		st = getState(t, srv.URL)
		if len(st.Pipelines) != 1 {
			return false
		}
		s, ok := stageOf(st.Pipelines[0], "1-2 reduce")
		return ok && s.Running == 2
	})
	p := st.Pipelines[0]
	if len(st.Batches) != 0 {
		t.Fatalf("the state lists the pipeline's batches as batches: %+v", st.Batches)
	}
	head, ok := stageOf(p, "1 map")
	if p.Outcome != "running" || p.Label != "nightly" || len(p.Stages) != 2 || p.Batch == "" || !ok ||
		head.Outcome != "done" || head.Done != 200 || head.Total != 200 || head.Running != 0 {
		t.Fatalf("the pipeline %+v; want it running, labelled, its head stage done with its 200 elements", p)
	}
	cancel := fmt.Sprintf(`{"queue":%q,"manager":%q,"batch":%q}`, p.Queue, p.Manager, p.Batch)
	if code, body := post(t, srv.URL, "/api/cancel", cancel, map[string]string{"X-Redmap-Action": "1", "Authorization": "Bearer " + operatorToken}); code != http.StatusOK {
		t.Fatalf("cancel: %d %s", code, body)
	}
	if err := <-ch; !errors.Is(err, redmap.ErrCancelled) {
		t.Fatalf("Collect of the pipeline cancelled on the page: %v; want ErrCancelled", err)
	}
	redistest.Eventually(t, "the pipeline shown cancelled", func() bool {
		st = getState(t, srv.URL)
		return len(st.Pipelines) == 1 && st.Pipelines[0].Outcome == "cancelled"
	})
	if s, ok := stageOf(st.Pipelines[0], "1-2 reduce"); !ok || s.Outcome != "cancelled" || s.Running != 0 {
		t.Fatalf("the cancelled pipeline's reduce stage %+v; want it cancelled, nothing running", s)
	}
}
