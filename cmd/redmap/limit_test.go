package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/inspect"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
)

// geo declares a limit of 1 element an hour with bursts of 2: of a batch,
// two run, and the rest wait on it until an operator raises it.
var geo = redmap.Func("geo", func(_ context.Context, x int) (int, error) { return x + 1, nil },
	redmap.Limit{Rate: 1, Per: time.Hour, Burst: 2})

// redmap limit lists the code's limit with the tasks waiting on it, an
// operator's raises it (the batch then ends), -clear brings the code's
// back; status, -json and the metrics say the same.
func TestLimitCommand(t *testing.T) {
	e := harness.Setup(t)
	srv, queue := e.Srv, e.Queue
	startWorker(t, srv, queue, "-concurrency", "2")
	m := e.Manager(t, manager.Options{})
	ctx := context.Background()
	batch, err := manager.Submit(ctx, m, geo, make([]int, 10), manager.ChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}
	var ls []inspect.Limit
	// A take refused by the limit is counted when the worker next tries,
	// which may come after the 8 are seen waiting: wait for both.
	redistest.Eventually(t, "8 tasks waiting on geo's limit, and a take refused", func() bool {
		cliJSON(t, srv, &ls, "limit", queue)
		return len(ls) == 1 && ls[0].Waiting == 8 && ls[0].Refused > 0
	})
	if l := ls[0]; l.Func != "geo" || l.Source != "code" || l.Rate != 1 || l.Per != 3600 || l.Burst != 2 || !declarer(l.By) || l.Refused == 0 {
		t.Fatalf("listed %+v", l)
	}
	out, _, code := runCLI(t, srv, "limit", queue)
	for _, want := range []string{"FUNC", "geo", "1/1h0m0s burst 2", "code (" + ls[0].By, "8"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("redmap limit (exit %d) lacks %q:\n%s", code, want, out)
		}
	}
	t.Logf("redmap limit %s:\n%s", queue, out)
	out, _, code = runCLI(t, srv, "status", "-queue", queue)
	if code != 0 || !strings.Contains(out, "LIMIT") || !strings.Contains(out, "1/1h0m0s burst 2") {
		t.Fatalf("redmap status (exit %d) lacks the limit:\n%s", code, out)
	}
	// The metrics export it.
	in, err := inspect.New(e.Client, "")
	if err != nil {
		t.Fatal(err)
	}
	web := httptest.NewServer(in.MetricsHandler(func(context.Context) ([]string, error) { return []string{queue}, nil }))
	defer web.Close()
	resp, err := http.Get(web.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`redmap_limit_waiting_tasks{func="geo",queue="` + queue + `"} 8`, `redmap_limit_rate_per_second{func="geo"`, `redmap_limit_throttled_total{func="geo"`} {
		if !strings.Contains(string(body), want) {
			t.Fatalf("metrics lack %q:\n%s", want, body)
		}
	}

	// An operator raises it: the batch ends.
	out, errs, code := runCLI(t, srv, "limit", queue, "geo", "-rate", "100/s", "-burst", "5")
	if code != 0 || !strings.Contains(out, "geo on queue "+queue+": 100/1s burst 5 (set by an operator)") {
		t.Fatalf("redmap limit geo -rate 100/s: exit %d: %s%s", code, out, errs)
	}
	ys, err := batch.Wait(ctx)
	if err != nil || len(ys) != 10 || ys[9] != 1 {
		t.Fatalf("batch: %v, %v", ys, err)
	}
	cliJSON(t, srv, &ls, "limit", queue)
	if l := ls[0]; l.Source != "operator" || l.Rate != 100 || l.Burst != 5 || l.Code != "1/1h0m0s burst 2" || !strings.HasPrefix(l.By, "operator on ") {
		t.Fatalf("after the operator's: %+v", l)
	}
	out, _, code = runCLI(t, srv, "limit", queue, "geo", "-clear")
	if code != 0 || !strings.Contains(out, "1/1h0m0s burst 2 (declared with its handle)") {
		t.Fatalf("redmap limit -clear: exit %d: %s", code, out)
	}
	// A change sets the fields given and keeps the others of the limit in
	// force: the code's burst stays through a new rate, a cap through both.
	for _, step := range []struct {
		args []string
		want string
	}{
		{[]string{"-concurrency", "3"}, "1/1h0m0s burst 2, 3 at once"},
		{[]string{"-rate", "20/s"}, "20/1s burst 2, 3 at once"},
		{[]string{"-burst", "4"}, "20/1s burst 4, 3 at once"},
		{[]string{"-concurrency", "0"}, "20/1s burst 4"},
		{[]string{"-rate", "0", "-concurrency", "5"}, "5 at once"},
	} {
		out, errs, code := runCLI(t, srv, append([]string{"limit", queue, "geo"}, step.args...)...)
		if code != 0 || !strings.Contains(out, ": "+step.want+" (set by an operator)") {
			t.Fatalf("redmap limit geo %v: exit %d: %s%s; want %q", step.args, code, out, errs, step.want)
		}
	}
	if _, _, code := runCLI(t, srv, "limit", queue, "geo", "-clear"); code != 0 {
		t.Fatalf("redmap limit -clear: exit %d", code)
	}

	for _, args := range [][]string{
		{"limit", queue, "geo"},                              // nothing to set
		{"limit", queue, "geo", "-rate", "fast"},             // not a rate
		{"limit", queue, "geo", "-rate", "5/fortnight"},      // not an interval
		{"limit", queue, "geo", "-clear", "-rate", "5"},      // both
		{"limit", queue, "-rate", "5"},                       // no function
		{"limit", queue, "geo", "-burst", "3", "-rate", "0"}, // a burst without a rate
		{"limit", queue, "geo", "x"},                         // too many operands
		{"limit"},                                            // too few
	} {
		if _, errs, code := runCLI(t, srv, args...); code != 2 || errs == "" {
			t.Errorf("redmap %v: exit %d, %q; want usage (2)", args, code, errs)
		}
	}
	if _, errs, code := runCLI(t, srv, "limit", queue, "geo", "-rate", "-3"); code != 2 {
		t.Errorf("a negative rate: exit %d, %q", code, errs)
	}
}

// declarer reports whether by names one of the processes that declare a
// handle's limit: the worker at its start or the manager at its Poll,
// whichever wrote first.
func declarer(by string) bool {
	return strings.HasPrefix(by, "worker ") || strings.HasPrefix(by, "manager ")
}
