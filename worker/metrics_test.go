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
	w := e.Worker(t, worker.Options{}, thirds, other)
	reg := prometheus.NewRegistry()
	reg.MustRegister(w.Collector())
	m := e.Manager(t, manager.Options{})
	if _, err := manager.Map(context.Background(), m, thirds, ints(30), manager.ChunkSize(5)); err == nil {
		t.Fatal("want 10 elements failed")
	}
	host, _ := os.Hostname()
	labels := `{function="thirds",queue="` + e.Queue + `",worker="` + host + `"}`
	other0 := `{function="other",queue="` + e.Queue + `",worker="` + host + `"}`
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
		`redmap_worker_info{host="` + host + `",id="` + w.ID() + `",queue="` + e.Queue + `",version="`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("no %q in the scrape:\n%s", strings.TrimSpace(want), body)
		}
	}
	if n := strings.Count(string(body), w.ID()); n != 1 {
		t.Errorf("the worker's id in %d series; want it in redmap_worker_info alone", n)
	}
}
