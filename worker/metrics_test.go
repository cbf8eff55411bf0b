package worker_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// A worker's metrics count tasks and elements by function, under its
// stable name (the host name by default), its id only in
// redmap_worker_info.
func TestMetricsByFunction(t *testing.T) {
	e := harness.Setup(t)
	thirds := redmap.Func("thirds", func(_ context.Context, x int) (int, error) {
		if x%3 == 0 {
			return 0, errors.New("a third")
		}
		return x, nil
	})
	other := redmap.Func("other", func(_ context.Context, x int) (int, error) { return x, nil })
	// A pipeline's tasks count under their stage too: split fails on
	// "bad", in the map phase of its by-key step (steps 1-2); its failed
	// elements count under split, the tasks under one.
	split := redmap.FlatMap("split", func(_ context.Context, doc string, emit func(string)) error {
		if doc == "bad" {
			return errors.New("a bad document")
		}
		for _, w := range strings.Fields(doc) {
			emit(w)
		}
		return nil
	})
	one := redmap.Emit("one", func(_ context.Context, w string, emit func(string, int)) error {
		emit(w, 1)
		return nil
	})
	sum := redmap.Reduce("sum", func(_ context.Context, a, b int) (int, error) { return a + b, nil })
	w := e.Worker(t, worker.Options{}, thirds, other, split, one, sum)
	reg := prometheus.NewRegistry()
	reg.MustRegister(w.Collector())
	m := e.Manager(t, manager.Options{})
	if _, err := manager.Map(context.Background(), m, thirds, ints(30), manager.ChunkSize(5)); err == nil {
		t.Fatal("want 10 elements failed")
	}
	docs := []string{"a b", "bad", "b c", "bad", "c"}
	counts, err := manager.Collect(context.Background(), m, manager.ByKey(manager.FlatThen(manager.From(docs), split), one, sum), manager.ChunkSize(1))
	if len(counts) != 3 || !errors.As(err, new(*redmap.BatchError)) {
		t.Fatalf("pipeline: %v, %v; want 3 counts and 2 documents failed", counts, err)
	}
	host, _ := os.Hostname()
	mapStage := `{function="one",queue="` + e.Queue + `",stage="1-2 map",worker="` + host + `"}`
	// Its failed elements count under the step that failed them.
	splitStage := `{function="split",queue="` + e.Queue + `",stage="1-2 map",worker="` + host + `"}`
	labels := `{function="thirds",queue="` + e.Queue + `",stage="",worker="` + host + `"}`
	other0 := `{function="other",queue="` + e.Queue + `",stage="",worker="` + host + `"}`
	web := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer web.Close()
	resp, err := http.Get(web.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		"\nredmap_worker_elements_total" + labels + " 30\n",
		"\nredmap_worker_elements_failed_total" + labels + " 10\n",
		"\nredmap_worker_tasks_failed_total" + labels + " 6\n",
		"\nredmap_worker_tasks_succeeded_total" + labels + " 0\n",
		"\nredmap_worker_task_duration_seconds_count" + labels + " 6\n",
		"\nredmap_worker_tasks_failed_total" + other0 + " 0\n", // registered, never run: there, at zero
		"\nredmap_worker_elements_total" + mapStage + " 5\n",
		"\nredmap_worker_elements_failed_total" + splitStage + " 2\n",
		"\nredmap_worker_tasks_failed_total" + mapStage + " 2\n",
		"\nredmap_worker_tasks_succeeded_total" + mapStage + " 3\n",
		`redmap_worker_info{host="` + host + `",id="` + w.ID() + `",queue="` + e.Queue + `",version="`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("no %q in the scrape:\n%s", strings.TrimSpace(want), body)
		}
	}
	if strings.Contains(string(body), "\nredmap_worker_elements_failed_total"+mapStage) {
		t.Errorf("split's failures counted under one, the by-key step's emitter:\n%s", body)
	}
	if n := strings.Count(string(body), w.ID()); n != 1 {
		t.Errorf("the worker's id in %d series; want it in redmap_worker_info alone", n)
	}
}
