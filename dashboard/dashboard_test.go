package dashboard_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/connect"
	"github.com/redmap/redmap/dashboard"
	"github.com/redmap/redmap/inspect"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// slow takes 20 ms per element: a batch of a few thousand runs long enough
// to be watched.
var slow = redmap.Func("slow", func(ctx context.Context, x int) (int, error) {
	select {
	case <-time.After(20 * time.Millisecond):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	if x%100 == 99 {
		return 0, fmt.Errorf("element %d: no such thing", x)
	}
	return x * x, nil
})

func TestMain(m *testing.M) {
	// As a child, the test binary is a worker program made with worker.Main.
	switch os.Getenv(harness.ChildEnv) {
	case "worker":
		if err := worker.Main(harness.ChildArgs(), slow); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	case "manager":
		if err := childManager(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	code := redistest.Run(m)
	harness.Cleanup()
	os.Exit(code)
}

// childManager submits a long batch of slow, prints "submitted <its
// id>", and waits to be killed.
func childManager() error {
	c, err := connect.URL(os.Getenv("REDIS_URL"))
	if err != nil {
		return err
	}
	m, err := manager.New(c, manager.Options{Queue: os.Getenv("REDMAP_QUEUE"), KeyTTL: 3 * time.Second, Poll: 100 * time.Millisecond})
	if err != nil {
		return err
	}
	if _, err := manager.Submit(context.Background(), m, slow, ints(5000), manager.ChunkSize(2)); err != nil {
		return err
	}
	fmt.Println("submitted", m.ID())
	select {}
}

func ints(n int) []int {
	xs := make([]int, n)
	for i := range xs {
		xs[i] = i
	}
	return xs
}

// operatorToken is the tests' operator token.
const operatorToken = "4f1c2b9e8d7a6c5b4a39281706f5e4d3"

// getState reads the dashboard's state from its API.
func getState(t *testing.T, base string) dashboard.State {
	t.Helper()
	resp, err := http.Get(base + "/api/state")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET api/state: %s", resp.Status)
	}
	var st dashboard.State
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// post sends an action as the page does, with extra headers.
func post(t *testing.T, base, path, body string, headers map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The state API shows the queue, its worker with its counters, a running
// batch with its progress and priority, the queue's throughput, and the
// failures grouped; a batch that ends stays, with its outcome.
func TestStateAPI(t *testing.T) {
	e := harness.Setup(t)
	w := e.Worker(t, worker.Options{Concurrency: 4}, slow)
	m := e.Manager(t, manager.Options{Poll: 200 * time.Millisecond})
	d, err := dashboard.New(e.Client, dashboard.Options{Queue: e.Queue})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	defer srv.Close()

	b, err := manager.Submit(context.Background(), m, slow, ints(400), manager.ChunkSize(4), manager.Priority(4))
	if err != nil {
		t.Fatal(err)
	}
	var st dashboard.State
	redistest.Eventually(t, "the batch shown with progress", func() bool {
		st = getState(t, srv.URL)
		return len(st.Batches) == 1 && st.Batches[0].Done > 0 && st.Batches[0].Outcome == "running"
	})
	if got := st.Batches[0]; got.Func != "slow" || got.Priority != 4 || got.Total != 400 || got.Manager != m.ID() {
		t.Fatalf("batch %+v", got)
	}
	if len(st.Queues) != 1 || st.Queues[0].Name != e.Queue || st.Queues[0].Workers != 1 || len(st.Queues[0].Series) != 180 {
		t.Fatalf("queues %+v", st.Queues)
	}
	if len(st.Workers) != 1 || st.Workers[0].ID != w.ID() || st.Workers[0].State != "running" || st.Workers[0].Concurrency != 4 ||
		st.Workers[0].Functions[0] != "slow" || st.Workers[0].HeartbeatAge < 0 || st.Workers[0].HeartbeatAge > 10 {
		t.Fatalf("workers %+v", st.Workers)
	}
	if _, err := b.Wait(context.Background()); err == nil {
		t.Fatal("want 4 elements failed")
	}
	redistest.Eventually(t, "the batch shown failed, the throughput counted, the failures grouped", func() bool {
		st = getState(t, srv.URL)
		var counted float64
		for _, v := range st.Queues[0].Series {
			counted += v * float64(st.Queues[0].Bucket)
		}
		return len(st.Batches) == 1 && st.Batches[0].Outcome == "failed" && st.Batches[0].Failed == 4 &&
			counted == 400 && len(st.Failures) == 1 && st.Failures[0].Count == 4
	})
	// "element 99: no such thing", "element 199: ...": one group.
	if f := st.Failures[0]; f.Func != "slow" || f.Group != "element <n>: no such thing" || !strings.Contains(f.Error, "no such thing") {
		t.Fatalf("failure group %+v", f)
	}
	if b := st.Batches[0]; b.FailedBy["error"] != 4 || b.Ended.IsZero() {
		t.Fatalf("the ended batch %+v; want its 4 failures by cause and when it ended", b)
	}
	// The page reads one group whole when an operator opens it.
	f := st.Failures[0]
	q := url.Values{"queue": {f.Queue}, "func": {f.Func}, "kind": {f.Kind}, "group": {f.Group}}
	resp, err := http.Get(srv.URL + "/api/failure?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	var whole inspect.FailureGroup
	err = json.NewDecoder(resp.Body).Decode(&whole)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || whole.Count != 4 || whole.Group != f.Group || !strings.Contains(whole.Error, "no such thing") || whole.SampleTask == "" {
		t.Fatalf("api/failure: %s %v %+v", resp.Status, err, whole)
	}
	q.Set("group", "no such group")
	resp, err = http.Get(srv.URL + "/api/failure?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("api/failure of no group: %s; want 404", resp.Status)
	}
}

// Actions are refused unless turned on, without the page's header, from
// another origin, and (purge) without the queue's name again; allowed, a
// cancel ends the batch at its manager and a purge empties the queue.
func TestActionsGuarded(t *testing.T) {
	e := harness.Setup(t)
	m := e.Manager(t, manager.Options{Poll: 200 * time.Millisecond})
	ro, err := dashboard.New(e.Client, dashboard.Options{Queue: e.Queue})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dashboard.New(e.Client, dashboard.Options{Queue: e.Queue, Actions: true}); err == nil || !strings.Contains(err.Error(), "Options.Token") {
		t.Fatalf("actions without a token: %v, want an error naming Options.Token", err)
	}
	rw, err := dashboard.New(e.Client, dashboard.Options{Queue: e.Queue, Actions: true, Token: operatorToken})
	if err != nil {
		t.Fatal(err)
	}
	roSrv, rwSrv := httptest.NewServer(ro), httptest.NewServer(rw)
	defer roSrv.Close()
	defer rwSrv.Close()

	// No worker: the batch stays queued.
	b, err := manager.Submit(context.Background(), m, slow, ints(100), manager.ChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}
	var bid string
	redistest.Eventually(t, "the batch published", func() bool {
		st := getState(t, rwSrv.URL)
		if len(st.Batches) == 1 {
			bid = st.Batches[0].ID
		}
		return bid != ""
	})
	ok := map[string]string{"X-Redmap-Action": "1", "Authorization": "Bearer " + operatorToken}
	with := func(h map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range ok {
			out[k] = v
		}
		for k, v := range h {
			if v == "" {
				delete(out, k)
			} else {
				out[k] = v
			}
		}
		return out
	}
	cancel := fmt.Sprintf(`{"queue":%q,"manager":%q,"batch":%q}`, e.Queue, m.ID(), bid)
	for _, tc := range []struct {
		what             string
		base, path, body string
		headers          map[string]string
		want             int
	}{
		{"actions off", roSrv.URL, "/api/cancel", cancel, ok, http.StatusForbidden},
		{"no token", rwSrv.URL, "/api/cancel", cancel, with(map[string]string{"Authorization": ""}), http.StatusUnauthorized},
		{"a wrong token", rwSrv.URL, "/api/cancel", cancel, with(map[string]string{"Authorization": "Bearer guess"}), http.StatusForbidden},
		{"a token of the right length, wrong", rwSrv.URL, "/api/cancel", cancel, with(map[string]string{"Authorization": "Bearer " + strings.Repeat("x", len(operatorToken))}), http.StatusForbidden},
		{"the page's header, a wrong token", rwSrv.URL, "/api/cancel", cancel, with(map[string]string{"Authorization": "", "X-Redmap-Token": "guess"}), http.StatusForbidden},
		{"the token as basic auth", rwSrv.URL, "/api/cancel", cancel, with(map[string]string{"Authorization": "Basic " + operatorToken}), http.StatusUnauthorized},
		{"a forged origin, no token", rwSrv.URL, "/api/cancel", cancel, with(map[string]string{"Authorization": "", "Origin": rwSrv.URL}), http.StatusUnauthorized},
		{"the token in the query string", rwSrv.URL, "/api/cancel?token=" + operatorToken, cancel, with(map[string]string{"Authorization": ""}), http.StatusUnauthorized},
		{"no action header", rwSrv.URL, "/api/cancel", cancel, with(map[string]string{"X-Redmap-Action": ""}), http.StatusForbidden},
		{"another origin", rwSrv.URL, "/api/cancel", cancel, with(map[string]string{"Origin": "https://evil.example"}), http.StatusForbidden},
		{"a purge unconfirmed", rwSrv.URL, "/api/purge", fmt.Sprintf(`{"queue":%q}`, e.Queue), ok, http.StatusBadRequest},
		{"a drain of nothing", rwSrv.URL, "/api/drain", `{"queue":""}`, ok, http.StatusBadRequest},
	} {
		if code, body := post(t, tc.base, tc.path, tc.body, tc.headers); code != tc.want {
			t.Fatalf("%s: POST %s %s with %v: %d %s, want %d", tc.what, tc.path, tc.body, tc.headers, code, body, tc.want)
		}
	}
	if d := getState(t, rwSrv.URL).Queues[0].Depth; d != 100 {
		t.Fatalf("depth %d after refused actions, want 100", d)
	}
	// As the page sends it, behind a proxy whose own login holds
	// Authorization.
	if code, body := post(t, rwSrv.URL, "/api/cancel", cancel, with(map[string]string{"Origin": rwSrv.URL,
		"Authorization": "Basic b3BlcmF0b3I6cHJveHk=", "X-Redmap-Token": operatorToken})); code != http.StatusOK {
		t.Fatalf("cancel: %d %s", code, body)
	}
	if _, err := b.Wait(context.Background()); !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled batch: %v, want context.Canceled", err)
	}

	// A purge with its confirmation fails the queued tasks of a batch.
	b2, err := manager.Submit(context.Background(), m, slow, ints(10), manager.ChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}
	if code, body := post(t, rwSrv.URL, "/api/purge", fmt.Sprintf(`{"queue":%q,"confirm":%q}`, e.Queue, e.Queue), ok); code != http.StatusOK || !strings.Contains(body, "10 task(s) failed") {
		t.Fatalf("purge: %d %s", code, body)
	}
	if _, err := b2.Wait(context.Background()); !errors.Is(err, redmap.ErrLost) {
		t.Fatalf("the purged batch: %v, want ErrLost", err)
	}
}

// A batch that only workers of other types could run is shown waiting, with
// the reason its manager published.
func TestStateSaysWhyABatchWaits(t *testing.T) {
	e := harness.Setup(t)
	w := e.Worker(t, worker.Options{}, slow) // slow: int → int
	m := e.Manager(t, manager.Options{Poll: 100 * time.Millisecond})
	// Live first: a batch submitted before its first heartbeat is
	// rightly said to have no live worker at all.
	harness.WaitLive(t, m, w.ID())
	d, err := dashboard.New(e.Client, dashboard.Options{Queue: e.Queue})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	defer srv.Close()
	slowText := redmap.Func("slow", func(_ context.Context, s string) (int, error) { return len(s), nil })
	b, err := manager.Submit(context.Background(), m, slowText, []string{"x"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Cancel()
	var st dashboard.State
	redistest.Eventually(t, "the batch shown waiting", func() bool {
		st = getState(t, srv.URL)
		return len(st.Batches) == 1 && st.Batches[0].Waiting != ""
	})
	if w := st.Batches[0].Waiting; !strings.Contains(w, "other types") || !strings.Contains(w, "In is string on the manager") {
		t.Fatalf("the dashboard says %q; want only workers of other types live, naming the input", w)
	}
}

// The dashboard serves redmap metrics' Prometheus text at /metrics: a
// batch submitted with no worker is counted there, task by task.
func TestMetricsEndpoint(t *testing.T) {
	e := harness.Setup(t)
	m := e.Manager(t, manager.Options{NoWorkerTimeout: -1})
	d, err := dashboard.New(e.Client, dashboard.Options{Queue: e.Queue})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	defer srv.Close()
	b, err := manager.Submit(context.Background(), m, slow, []int{1, 2, 3, 4, 5, 6}, manager.ChunkSize(2))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Cancel()
	want := fmt.Sprintf("redmap_queue_waiting_elements{queue=%q} 6", e.Queue)
	var body string
	redistest.Eventually(t, "the dashboard's /metrics counts the batch", func() bool {
		resp, err := http.Get(srv.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == http.StatusOK && strings.Contains(body, want) &&
			strings.Contains(body, fmt.Sprintf("redmap_queue_backlog_elements{queue=%q} 6", e.Queue))
	})
	if !strings.Contains(body, fmt.Sprintf("redmap_queue_waiting_tasks{queue=%q} 3", e.Queue)) {
		t.Fatalf("/metrics:\n%s", body)
	}
}

// With Private, reading the state needs the token as well; the page's own
// files (no data) do not.
func TestPrivateState(t *testing.T) {
	e := harness.Setup(t)
	d, err := dashboard.New(e.Client, dashboard.Options{Queue: e.Queue, Private: true, Token: operatorToken})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	defer srv.Close()
	get := func(path, auth string) int {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		path, auth string
		want       int
	}{
		{"/api/state", "", http.StatusUnauthorized},
		{"/api/state", "Bearer wrong", http.StatusForbidden},
		{"/api/state?token=" + operatorToken, "", http.StatusUnauthorized},
		{"/api/state", "Bearer " + operatorToken, http.StatusOK},
		{"/api/failure?queue=" + e.Queue + "&func=f&kind=error&group=g", "", http.StatusUnauthorized},
		{"/api/failure?queue=" + e.Queue + "&func=f&kind=error&group=g", "Bearer " + operatorToken, http.StatusNotFound},
		{"/api/failure?queue=a%7Bb&func=f&kind=error&group=g", "Bearer " + operatorToken, http.StatusBadRequest},
		{"/metrics", "", http.StatusUnauthorized},
		{"/metrics", "Bearer " + operatorToken, http.StatusOK},
		{"/", "", http.StatusOK},
		{"/app.js", "", http.StatusOK},
	} {
		if got := get(c.path, c.auth); got != c.want {
			t.Errorf("GET %s with %q: %d, want %d", c.path, c.auth, got, c.want)
		}
	}
	if _, err := dashboard.New(e.Client, dashboard.Options{Private: true}); err == nil {
		t.Error("Private without a token: no error")
	}
}

// A request for a name the dashboard does not answer to reads nothing (issue
// 35: a page whose name was made to resolve to 127.0.0.1, by DNS rebinding,
// could read a dashboard started without -private); every answer carries a
// Content-Security-Policy.
func TestHostChecked(t *testing.T) {
	e := harness.Setup(t)
	d, err := dashboard.New(e.Client, dashboard.Options{Queue: e.Queue, Hosts: []string{"redmap.example"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	defer srv.Close()
	for _, c := range []struct {
		host string
		want int
	}{
		{"", http.StatusOK}, // the server's own address
		{"localhost:8080", http.StatusOK},
		{"127.0.0.1:9", http.StatusOK},
		{"[::1]:8080", http.StatusOK},
		{"redmap.example", http.StatusOK},
		{"REDMAP.example.:443", http.StatusOK},
		{"attacker.example:8080", http.StatusMisdirectedRequest},
		{"localhost.attacker.example", http.StatusMisdirectedRequest},
	} {
		for _, path := range []string{"/api/state", "/"} {
			req, _ := http.NewRequest("GET", srv.URL+path, nil)
			if c.host != "" {
				req.Host = c.host
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Errorf("GET %s with Host %q: %d, want %d", path, c.host, resp.StatusCode, c.want)
			}
			if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
				t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
			}
		}
	}
}

// The state lists each limited function's limit with the tasks waiting on
// it, as the queue's records in Redis say.
func TestStateShowsLimits(t *testing.T) {
	e := harness.Setup(t)
	capped := redmap.Func("capped-dash", func(ctx context.Context, x int) (int, error) {
		<-ctx.Done() // holds its slot until the test ends
		return x, ctx.Err()
	}, redmap.Limit{Concurrency: 1})
	e.Worker(t, worker.Options{Concurrency: 2, Grace: 200 * time.Millisecond}, capped)
	m := e.Manager(t, manager.Options{})
	d, err := dashboard.New(e.Client, dashboard.Options{Queue: e.Queue})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	defer srv.Close()
	b, err := manager.Submit(context.Background(), m, capped, ints(5), manager.ChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Cancel()
	var st dashboard.State
	redistest.Eventually(t, "the limit shown with 4 tasks waiting and 1 running", func() bool {
		st = getState(t, srv.URL)
		return len(st.Limits) == 1 && st.Limits[0].Waiting == 4 && st.Limits[0].Running == 1
	})
	if l := st.Limits[0]; l.Func != "capped-dash" || l.Text != "1 at once" || l.Source != "code" || l.Queue != e.Queue {
		t.Fatalf("limit %+v", l)
	}
}

// A queue whose records cannot be read (another type at one of its keys)
// is named in the state, and the other queues are shown.
func TestStateShowsTheOthersPastAnUnreadableQueue(t *testing.T) {
	srv := redistest.Start(t)
	good, bad := harness.On(t, srv), harness.On(t, srv)
	bad.Queue += "-bad"
	for _, e := range []*harness.Env{good, bad} {
		m := e.Manager(t, manager.Options{NoWorkerTimeout: -1})
		b, err := manager.Submit(context.Background(), m, slow, []int{1, 2}, manager.ChunkSize(1))
		if err != nil {
			t.Fatal(err)
		}
		defer b.Cancel()
	}
	if err := bad.Client.Set(context.Background(), keys.Workers("redmap", bad.Queue), "not a sorted set", 0).Err(); err != nil {
		t.Fatal(err)
	}
	d, err := dashboard.New(good.Client, dashboard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	web := httptest.NewServer(d)
	defer web.Close()
	st := getState(t, web.URL)
	if len(st.Queues) != 1 || st.Queues[0].Name != good.Queue || st.Queues[0].Depth != 2 {
		t.Errorf("queues shown: %+v; want %s alone, depth 2", st.Queues, good.Queue)
	}
	if why := st.Unreadable[bad.Queue]; !strings.Contains(why, "WRONGTYPE") || len(st.Unreadable) != 1 {
		t.Errorf("unreadable: %v; want %s's WRONGTYPE", st.Unreadable, bad.Queue)
	}
}

// A page that goes away before its state is read (a closed tab) is not a
// fault: the dashboard logs no warning for it, while a read that fails
// with the page still there is one.
func TestClientGoneIsNoWarning(t *testing.T) {
	t.Parallel()
	e := harness.On(t, redistest.Start(t)) // its own server, stopped below
	var logs strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(p)
	}), &slog.HandlerOptions{Level: slog.LevelInfo}))
	d, err := dashboard.New(e.Client, dashboard.Options{Queue: e.Queue, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "http://127.0.0.1/api/state", nil).WithContext(ctx))
	mu.Lock()
	got := logs.String()
	mu.Unlock()
	if strings.Contains(got, "WARN") {
		t.Fatalf("a page gone before its state was read logged:\n%s", got)
	}
	e.Srv.Kill(t)
	rec := httptest.NewRecorder()
	d.ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1/api/state", nil))
	if rec.Code != http.StatusBadGateway {
		t.Fatalf("GET api/state with Redis gone: %d, want 502", rec.Code)
	}
	mu.Lock()
	got = logs.String()
	mu.Unlock()
	if !strings.Contains(got, "WARN") {
		t.Fatalf("Redis gone with the page there logged no warning: %q", got)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
