package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/dashboard"
	"github.com/redmap/redmap/inspect"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// many sets up 200 queues on a Redis of their own (issue 60: with 170 the
// page showed 170 cards, idle first, and api/state weighed 214 KB): three
// busy, with 2, 6 and 4 tasks waiting; 197 idle, as the index of queues
// names them, 10 of them with a live idle worker; and the partitions of a
// map/reduce by key on the first busy one, which are no queue. It returns
// the Env of the first busy queue and the busy queues' names.
func many(t *testing.T) (*harness.Env, []string) {
	t.Helper()
	srv := redistest.Start(t)
	ctx := context.Background()
	var busy []string
	envs := harness.Busy(t, srv, slow, 2, 6, 4)
	for _, e := range envs {
		busy = append(busy, e.Queue)
	}
	first := envs[0]
	harness.IndexIdle(t, first.Client, 197)
	for j := range 10 {
		e := harness.On(t, srv)
		e.Queue = fmt.Sprintf("idle-%03d", j*19)
		e.Worker(t, worker.Options{Concurrency: 1}, slow)
	}
	if err := first.Client.HSet(ctx, keys.Partition("redmap", first.Queue, "job", 3, 0), "0:1", "x").Err(); err != nil {
		t.Fatal(err)
	}
	in, err := inspect.New(first.Client, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.ScanQueues(ctx); err != nil { // indexes what it finds: the partition must not be taken for a queue
		t.Fatal(err)
	}
	redistest.Eventually(t, "10 idle workers registered", func() bool {
		n := 0
		for j := range 10 {
			ws, err := in.Workers(ctx, fmt.Sprintf("idle-%03d", j*19), time.Now())
			if err != nil {
				t.Fatal(err)
			}
			n += len(ws)
		}
		return n == 10
	})
	return first, busy
}

// rawState returns api/state's body.
func rawState(t *testing.T, base string) []byte {
	t.Helper()
	resp, err := http.Get(base + "/api/state")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET api/state: %s %v", resp.Status, err)
	}
	return body
}

// With 200 queues, api/state stays under 50 KB: the busy queues come
// first, busiest first; the idle ones are named only, their idle workers
// counted, not listed; a partition of a map/reduce by key is no queue.
func TestStateOf200Queues(t *testing.T) {
	e, busy := many(t)
	// And a queue whose batch ended, its 60 elements panicking each its own
	// way: 60 failure groups, each with a stack.
	f := harness.On(t, e.Srv)
	f.Queue += "-failing"
	panics := redmap.Func("panics", func(_ context.Context, x int) (int, error) {
		panic("no " + string(rune('a'+x/26)) + string(rune('a'+x%26)) + " here")
	})
	f.Worker(t, worker.Options{}, panics)
	if _, err := manager.Map(context.Background(), f.Manager(t, manager.Options{Logger: slog.New(slog.DiscardHandler)}), panics, ints(60)); err == nil {
		t.Fatal("want 60 elements failed")
	}
	busy = append(busy, f.Queue)
	in, err := inspect.New(e.Client, "")
	if err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, "the 60 failures recorded (at the worker's heartbeat)", func() bool {
		gs, _, err := in.Failures(context.Background(), f.Queue)
		return err == nil && len(gs) == 60
	})
	d, err := dashboard.New(e.Client, dashboard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	web := httptest.NewServer(d)
	defer web.Close()
	body := rawState(t, web.URL)
	t.Logf("api/state with 200 queues: %d bytes", len(body))
	var st dashboard.State
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	if len(body) > 50<<10 {
		t.Errorf("api/state is %d bytes with 200 queues; want at most 50 KB", len(body))
	}
	var shown []string
	for _, q := range st.Queues {
		shown = append(shown, q.Name)
	}
	if want := []string{busy[1], busy[2], busy[0], busy[3]}; !slices.Equal(shown, want) {
		t.Errorf("queues shown as cards: %v; want the busy ones, the deepest first: %v", shown, want)
	}
	stacks := 0
	for _, g := range st.Failures {
		stacks += len(g.SampleStack)
	}
	if len(st.Failures) != dashboard.FailuresShown || st.FailuresLeft != 10 || stacks != 0 {
		t.Errorf("%d failure groups shown, %d left, with %d bytes of stacks; want %d, 10 and none (api/failure gives them)",
			len(st.Failures), st.FailuresLeft, stacks, dashboard.FailuresShown)
	}
	if len(st.Idle) != 197 || !slices.IsSorted(st.Idle) || st.Idle[0] != "idle-000" {
		t.Errorf("%d idle queues folded (first %q); want the 197, by name", len(st.Idle), st.Idle[:min(1, len(st.Idle))])
	}
	for _, q := range append(shown, st.Idle...) {
		if strings.Contains(q, keys.PartitionSep) {
			t.Errorf("queue %q shown: a partition of a map/reduce by key is no queue", q)
		}
	}
	if len(st.Workers) != 1 || st.Workers[0].Queue != f.Queue || st.IdleWorkers != 10 {
		t.Errorf("%d workers listed, %d idle ones counted; want the failing queue's listed, the idle queues' 10 counted", len(st.Workers), st.IdleWorkers)
	}

	// 15 minutes later, as far as the failing queue's records say (its
	// throughput counters and history gone), it is idle: folded, its
	// failure groups no longer read.
	ctx := context.Background()
	gone := []string{keys.History("redmap", f.Queue), keys.HistoryIndex("redmap", f.Queue)}
	step := int64(keys.ThroughputBucket / time.Second)
	for b := time.Now().Unix()/step - 200; b <= time.Now().Unix()/step+1; b++ {
		gone = append(gone, keys.Throughput("redmap", f.Queue, b))
	}
	if err := e.Client.Del(ctx, gone...).Err(); err != nil {
		t.Fatal(err)
	}
	if st, err = d.State(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(st.Idle, f.Queue) || len(st.Failures) != 0 || st.FailuresLeft != 0 || st.IdleWorkers != 11 {
		t.Errorf("the failing queue, idle: folded %v, %d failure groups shown (%d left), %d idle workers; want folded, none, 11",
			slices.Contains(st.Idle, f.Queue), len(st.Failures), st.FailuresLeft, st.IdleWorkers)
	}
}

// The page of 200 queues: the three busy ones as cards, the busiest
// first; the 197 idle ones folded into one line that unfolds into their
// names; the filter box narrows both to the names that hold what it says.
func TestDashboard200QueuesInBrowser(t *testing.T) {
	ctx := browser(t, 1280, 900)
	e, busy := many(t)
	d, err := dashboard.New(e.Client, dashboard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	web := httptest.NewServer(d)
	defer web.Close()
	if _, err := chromedp.Run(ctx, chromedp.Navigate(web.URL+"/")); err != nil {
		t.Fatal(err)
	}
	cards := `[...document.querySelectorAll('#queues .card')].map((c) => c.dataset.queue).join(' ')`
	waitFor(t, ctx, "the busy queues, deepest first, and 197 idle ones folded", fmt.Sprintf(`%s === %q &&
		document.querySelector('details.idle summary').textContent.startsWith('197 idle queues · their 10 idle workers') &&
		!document.querySelector('details.idle').open`, cards, strings.Join([]string{busy[1], busy[2], busy[0]}, " ")))
	click(t, ctx, "details.idle summary")
	waitFor(t, ctx, "the idle queues' names", `document.querySelector('details.idle').open && document.querySelectorAll('[data-idle]').length === 197`)
	if _, err := chromedp.Run(ctx, chromedp.SendKeys("#filter", "IDLE-01")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "only idle-010 to idle-019, no card", `document.querySelectorAll('[data-idle]').length === 10 &&
		document.querySelectorAll('#queues .card').length === 0 && document.querySelector('#queues .empty') !== null`)
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => { const f = document.getElementById('filter'); f.value = '';
		f.dispatchEvent(new Event('input')); return true })()`)); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.SendKeys("#filter", busy[2][len(busy[2])-6:])); err != nil { // "-busy2"
		t.Fatal(err)
	}
	waitFor(t, ctx, "one card, the filtered queue's, and no idle queue", fmt.Sprintf(`%s === %q && document.querySelector('details.idle') === null`,
		cards, busy[2]))
}

// 170 queues that each ran a batch a moment ago, on a worker that then
// stopped: none is idle (each ended a batch within 15 minutes), so each
// has a card, and api/state still stays under 50 KB: charts for the
// ChartsShown busiest, the EndedShown newest ended batches and the
// GoneShown newest gone workers, the rest counted.
func TestStateOfManyRecentQueues(t *testing.T) {
	redistest.Slow(t) // 170 workers started and stopped
	srv := redistest.Start(t)
	ctx := context.Background()
	const n = 170
	var first *harness.Env
	for j := range n {
		e := harness.On(t, srv)
		e.Queue = fmt.Sprintf("recent-%03d", j)
		if first == nil {
			first = e
		}
		_, stop, ran := e.StartWorker(t, worker.Options{Concurrency: 1}, slow)
		m := e.Manager(t, manager.Options{Logger: slog.New(slog.DiscardHandler)})
		if _, err := manager.Map(ctx, m, slow, ints(3)); err != nil {
			t.Fatal(err)
		}
		stop()
		if err := <-ran; err != nil {
			t.Fatal(err)
		}
	}
	// A minute, not the default 5 s, to read them: a machine running two
	// make tests at once read 134 of 170 in 5 s (the rest Unreadable).
	d, err := dashboard.New(first.Client, dashboard.Options{ReadTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	web := httptest.NewServer(d)
	defer web.Close()
	body := rawState(t, web.URL)
	var st dashboard.State
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	t.Logf("api/state with %d recent queues: %d bytes; %d cards, %d ended batches shown (%d more), %d workers shown (%d more), %d queues unreadable",
		n, len(body), len(st.Queues), len(st.Batches), st.EndedLeft, len(st.Workers), st.GoneLeft, len(st.Unreadable))
	if len(body) > 50<<10 {
		t.Errorf("api/state is %d bytes with %d recently busy queues; want at most 50 KB", len(body), n)
	}
	charts := 0
	for _, q := range st.Queues {
		if q.Series != nil {
			charts++
		}
	}
	if len(st.Queues) != n || charts != dashboard.ChartsShown || len(st.Batches) != dashboard.EndedShown || st.EndedLeft != n-dashboard.EndedShown ||
		len(st.Workers) < dashboard.GoneShown || len(st.Workers)+st.GoneLeft != n {
		t.Errorf("%d cards (%d charts), %d batches (+%d), %d workers (+%d); want %d cards, %d charts, %d batches (+%d), the %d newest gone workers of %d",
			len(st.Queues), charts, len(st.Batches), st.EndedLeft, len(st.Workers), st.GoneLeft, n, dashboard.ChartsShown, dashboard.EndedShown, n-dashboard.EndedShown, dashboard.GoneShown, n)
	}
}
