package dashboard_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/dashboard"
	"github.com/redmap/redmap/inspect"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

var thirds = redmap.Func("thirds", func(_ context.Context, x int) (int, error) {
	if x%3 == 0 {
		return 0, fmt.Errorf("%d is a multiple of 3", x)
	}
	return x, nil
})

// GET api/failed lists an ended batch's failed elements with the worker
// that failed each; an unknown batch is 404, a request without one 400.
func TestFailedAPI(t *testing.T) {
	e := harness.Setup(t)
	w := e.Worker(t, worker.Options{Concurrency: 2}, thirds)
	m := e.Manager(t, manager.Options{})
	d, err := dashboard.New(e.Client, dashboard.Options{Queue: e.Queue})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	defer srv.Close()
	b, err := manager.Submit(context.Background(), m, thirds, ints(10), manager.ChunkSize(2))
	if err != nil {
		t.Fatal(err)
	}
	var be *redmap.BatchError
	if _, err := b.Wait(context.Background()); !errors.As(err, &be) {
		t.Fatalf("thirds: %v; want failures", err)
	}
	get := func(query string) (*http.Response, inspect.FailedElements) {
		t.Helper()
		resp, err := http.Get(srv.URL + "/api/failed?" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var fs inspect.FailedElements
		if resp.StatusCode == http.StatusOK {
			if err := json.NewDecoder(resp.Body).Decode(&fs); err != nil {
				t.Fatal(err)
			}
		}
		return resp, fs
	}
	resp, fs := get(url.Values{"queue": {e.Queue}, "batch": {b.ID()}}.Encode())
	if resp.StatusCode != http.StatusOK || len(fs.Elements) != len(be.Failed) || len(fs.Elements) == 0 {
		t.Fatalf("GET api/failed: %s, %+v; want the %d failed elements", resp.Status, fs, len(be.Failed))
	}
	for j, f := range fs.Elements {
		if f.Index != be.Failed[j].Index || f.Kind != "error" || f.Worker != w.ID() || f.Attempts != 1 {
			t.Fatalf("failed element %+v; want index %d, an error of worker %s", f, be.Failed[j].Index, w.ID())
		}
	}
	if resp, _ := get(url.Values{"queue": {e.Queue}, "batch": {"nope:1"}}.Encode()); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("an unknown batch: %s, want 404", resp.Status)
	}
	if resp, _ := get("queue=" + e.Queue); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("no batch: %s, want 400", resp.Status)
	}
}
