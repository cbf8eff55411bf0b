package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/dashboard"
	"github.com/redmap/redmap/inspect"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
)

// Two steps of a pipeline that fail some elements, as a program run by a
// user without the rights to some files does: pread before the by-key
// step (pkey, psum) fails the inputs x with x%10 == 3, pwrite after it the
// keys k with k%10 == 5.
var (
	pread = redmap.Func("pread", func(_ context.Context, x int) (int, error) {
		if x%10 == 3 {
			return 0, fmt.Errorf("open /data/in/%d.csv: permission denied", x)
		}
		return x, nil
	})
	pwrite = redmap.Func("pwrite", func(_ context.Context, kv redmap.KV[int, int]) (int, error) {
		if kv.Key%10 == 5 {
			return 0, fmt.Errorf("open /data/out/%d.csv: permission denied", kv.Key)
		}
		return kv.Key, nil
	})
)

// Every element a pipeline's step fails, before its by-key step and after
// it, is counted and browsable as a Map's is: in its stage's batch record
// (redmap batches -all), its failed elements (redmap failures -batch), the
// failure groups (redmap failures), the worker's FAILED count and its
// metrics, under the function of the step that failed it. Each stage's row
// counts in one unit: the map stage its elements, the reduce stage its
// partitions (its one partition done, none failed whole), with the keys
// that failed after its fold apart, in the record, redmap batches, -json,
// the dashboard and the metrics alike: no FAILED above its TOTAL.
func TestPipelineFailuresCounted(t *testing.T) {
	e := harness.Setup(t)
	srv, queue := e.Srv, e.Queue
	w := startWorker(t, srv, queue, "-name", "pod-9")
	m := e.Manager(t, manager.Options{})
	xs := make([]int, 100)
	for i := range xs {
		xs[i] = i
	}
	p := manager.Then(manager.ByKey(manager.Then(manager.From(xs), pread), pkey, psum), pwrite)
	got, err := manager.Collect(context.Background(), m, p, manager.ChunkSize(10), manager.Partitions(1))
	var be *redmap.BatchError
	if !errors.As(err, &be) || len(be.Failed) != 20 || len(got) != 80 {
		t.Fatalf("Collect: %d outputs, %v; want 80 and 20 elements failed", len(got), err)
	}

	// The history: each stage's batch counts its failed elements.
	var bs []inspect.Batch
	cliJSON(t, srv, &bs, "batches", "-all", "-queue", queue)
	stages := map[string]inspect.Batch{}
	for _, b := range bs {
		stages[b.Call.Stage] = b
	}
	head, reduce := stages["1-2 map"], stages["2-3 reduce"]
	if len(bs) != 2 || head.Total != 100 || head.Done != 90 || head.Failed != 10 || head.FailedKeys != 0 || head.FailedBy["error"] != 10 || head.Outcome != "failed" ||
		reduce.Total != 1 || reduce.Done != 1 || reduce.Failed != 0 || reduce.FailedKeys != 10 || reduce.FailedBy["error"] != 10 || reduce.Outcome != "failed" {
		t.Fatalf("history %+v; want the map stage's batch with 10 of its 100 elements failed, the reduce stage's with its one partition done and 10 keys failed", bs)
	}
	out, _, _ := runCLI(t, srv, "batches", "-all", "-queue", queue)
	t.Logf("redmap batches -all:\n%s", out)
	// STATE FUNC BATCHES DONE FAILED RUNNING TOTAL UNIT KEYS-FAILED
	for stage, want := range map[string][]string{
		"1-2 map":    {"failed", "pkey", "1", "90", "10", "0", "100", "elements", "-"},
		"2-3 reduce": {"failed", "pkey", "1", "1", "0", "0", "1", "partitions", "10"},
	} {
		if f := stageLine(out, stage); len(f) < len(want) || !slices.Equal(f[:len(want)], want) {
			t.Fatalf("redmap batches -all: stage %s's line %q, want %q:\n%s", stage, f, want, out)
		}
	}
	// The same rows for the dashboard, and for the metrics the failures
	// by kind: the 10 elements and the 10 keys.
	d, err := dashboard.New(e.Client, dashboard.Options{Queue: queue})
	if err != nil {
		t.Fatal(err)
	}
	st, err := d.State(context.Background())
	ps := st.Pipelines
	if err != nil || len(ps) != 1 || len(ps[0].Stages) != 2 {
		t.Fatalf("the dashboard's pipelines: %+v, %v; want the one", ps, err)
	}
	in, err := inspect.New(e.Client, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ps[0].Stages {
		if s.Failed > s.Total || s.Done+s.Failed > s.Total {
			t.Errorf("stage %+v: more done and failed than its total", s)
		}
	}
	if s := ps[0].Stages[1]; s.Stage != "2-3 reduce" || s.Unit != "partitions" || s.Total != 1 || s.Done != 1 || s.Failed != 0 || s.FailedKeys != 10 {
		t.Fatalf("the reduce stage %+v; want its one partition done, 10 keys failed", s)
	}
	if m, err := in.Metrics(context.Background(), queue); err != nil || m.FailedElements["error"] != 20 {
		t.Fatalf("the metrics' failed elements %v, %v; want the 10 elements and the 10 keys", m.FailedElements, err)
	}

	// Its failed elements: by index in the input, or by key, and step.
	var fe inspect.FailedElements
	cliJSON(t, srv, &fe, "failures", "-batch", head.ID, "-queue", queue)
	var idx []int
	for _, f := range fe.Elements {
		if f.Stage != 1 || f.Kind != "error" || f.Worker != w.ID || !strings.Contains(f.Error, "permission denied") {
			t.Fatalf("failed element %+v of the map stage", f)
		}
		idx = append(idx, f.Index)
	}
	if want := []int{3, 13, 23, 33, 43, 53, 63, 73, 83, 93}; !slices.Equal(idx, want) {
		t.Fatalf("the map stage's failed elements %v, want %v", idx, want)
	}
	cliJSON(t, srv, &fe, "failures", "-batch", reduce.ID, "-queue", queue)
	var ks []string
	for _, f := range fe.Elements {
		if f.Stage != 3 || f.Index != -1 || f.Worker != w.ID || !strings.Contains(f.Error, "permission denied") {
			t.Fatalf("failed element %+v of the reduce stage", f)
		}
		ks = append(ks, f.Key)
	}
	if want := []string{"15", "25", "35", "45", "5", "55", "65", "75", "85", "95"}; !slices.Equal(ks, want) {
		t.Fatalf("the reduce stage's failed keys %v, want %v", ks, want)
	}
	out, _, _ = runCLI(t, srv, "failures", "-batch", reduce.ID, "-queue", queue)
	if !strings.Contains(out, "key 15 (step 3)") {
		t.Fatalf("redmap failures -batch %s does not name key 15 and its step:\n%s", reduce.ID, out)
	}

	// The failure groups, and the worker's count of tasks with failures:
	// the 10 map tasks and the one reduce task.
	var groups []inspect.FailureGroup
	redistest.Eventually(t, "the failures grouped", func() bool {
		cliJSON(t, srv, &groups, "failures", "-queue", queue)
		var n int64
		for _, g := range groups {
			n += g.Count
		}
		return n == 20
	})
	byFunc := map[string]int64{}
	for _, g := range groups {
		if g.Kind != "error" || g.Group != "open <path>: permission denied" {
			t.Fatalf("failure group %+v", g)
		}
		byFunc[g.Func] += g.Count
	}
	if len(byFunc) != 2 || byFunc["pread"] != 10 || byFunc["pwrite"] != 10 {
		t.Fatalf("failure groups %+v; want 10 of pread and 10 of pwrite", groups)
	}
	redistest.Eventually(t, "the worker's failed tasks counted", func() bool {
		var ws []inspect.Worker
		cliJSON(t, srv, &ws, "workers", "-queue", queue)
		return len(ws) == 1 && ws[0].Failed == 11
	})

	// The metrics, by the function of the step that failed and its stage.
	resp, err := http.Get("http://" + w.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, line := range []string{
		`redmap_worker_elements_failed_total{function="pread",queue="` + queue + `",stage="1-2 map",worker="pod-9"} 10`,
		`redmap_worker_elements_failed_total{function="pwrite",queue="` + queue + `",stage="2-3 reduce",worker="pod-9"} 10`,
		`redmap_worker_tasks_failed_total{function="pkey",queue="` + queue + `",stage="1-2 map",worker="pod-9"} 10`,
	} {
		if !strings.Contains(string(body), line) {
			t.Errorf("no %s in the scrape:\n%s", line, body)
		}
	}
	if strings.Contains(string(body), `redmap_worker_elements_failed_total{function="pkey",queue="`+queue+`",stage="1-2 map"`) {
		t.Errorf("pread's failures counted under pkey, the by-key step's emitter:\n%s", body)
	}

	// A pipeline of no by-key step: its one stage's batch counts them too.
	got, err = manager.Collect(context.Background(), m, manager.Then(manager.From(xs), pread), manager.ChunkSize(10))
	if !errors.As(err, &be) || len(be.Failed) != 10 || len(got) != 90 {
		t.Fatalf("Collect: %d outputs, %v; want 90 and 10 elements failed", len(got), err)
	}
	cliJSON(t, srv, &bs, "batches", "-all", "-queue", queue)
	chain := slices.IndexFunc(bs, func(b inspect.Batch) bool { return b.Call.Stage == "1 map" })
	if chain < 0 || bs[chain].Failed != 10 || bs[chain].FailedBy["error"] != 10 || bs[chain].Outcome != "failed" {
		t.Fatalf("history %+v; want the stage 1 map's batch with 10 elements failed", bs)
	}
}
