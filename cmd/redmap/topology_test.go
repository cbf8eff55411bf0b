package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redmap/redmap/connect"
	"github.com/redmap/redmap/inspect"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
)

// The set-ups users run, each reached the way users reach it: one URL given
// to worker processes (worker.Main), to a manager (connect.URL) and to the
// CLI.

func ints(n int) []int {
	xs := make([]int, n)
	for i := range xs {
		xs[i] = i
	}
	return xs
}

// managerAt returns a manager of queue on the Redis of url.
func managerAt(t *testing.T, url, queue string) *manager.Manager {
	t.Helper()
	c, err := connect.URL(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	m, err := manager.New(c, manager.Options{Queue: queue})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// exact fails t unless ys are the squares of 0..len(ys)-1.
func exact(t *testing.T, ys []int, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	for i, y := range ys {
		if y != i*i {
			t.Fatalf("element %d: %d, want %d", i, y, i*i)
		}
	}
}

// fleetThrough runs, all through url: two worker processes, a manager with a
// Map of 2,000 squares checked element by element, and the CLI's workers and
// status, which must list both workers. It returns the queue and the workers.
func fleetThrough(t *testing.T, url string) (string, []*proc) {
	t.Helper()
	queue := redistest.Queue(t)
	w1 := startWorkerAt(t, url, queue, "-concurrency", "2")
	w2 := startWorkerAt(t, url, queue, "-concurrency", "2")
	m := managerAt(t, url, queue)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ys, err := manager.Map(ctx, m, square, ints(2000), manager.ChunkSize(10))
	exact(t, ys, err)
	var workers []inspect.Worker
	cliJSONAt(t, url, &workers, "workers", "-queue", queue)
	var ids []string
	for _, w := range workers {
		ids = append(ids, w.ID)
	}
	if slices.Sort(ids); !slices.Equal(ids, sorted(w1.ID, w2.ID)) {
		t.Fatalf("redmap workers: %v, want %s and %s", ids, w1.ID, w2.ID)
	}
	out, errs, code := runCLIAt(t, url, "status")
	for _, want := range []string{queue, w1.ID, w2.ID} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("redmap status (exit %d) lacks %q:\n%s%s", code, want, out, errs)
		}
	}
	t.Logf("2,000 squares exact through %s; redmap status:\n%s", connect.Redact(url), out)
	return queue, []*proc{w1, w2}
}

func TestThroughTLS(t *testing.T) {
	t.Parallel()
	for _, mutual := range []bool{false, true} {
		t.Run(fmt.Sprintf("mutual=%v", mutual), func(t *testing.T) {
			t.Parallel()
			s := redistest.StartTLS(t, mutual)
			fleetThrough(t, s.URL())
		})
	}
}

// The least-privilege user README gives serves workers and managers, and
// with README's additions for operators, the CLI.
func TestThroughACLUser(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	readme, err := os.ReadFile("../../docs/connecting.md")
	if err != nil {
		t.Fatal(err)
	}
	var rule, extra []any
	for line := range strings.Lines(string(readme)) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "ACL SETUSER redmap "); ok {
			for _, f := range strings.Fields(strings.ReplaceAll(rest, ">PASSWORD", ">pw")) {
				rule = append(rule, f)
			}
		}
		if _, rest, ok := strings.Cut(line, "The `redmap` CLI and dashboard read more: add `"); ok {
			add, _, _ := strings.Cut(rest, "`")
			for _, f := range strings.Fields(add) {
				extra = append(extra, f)
			}
		}
	}
	if len(rule) == 0 || len(extra) == 0 {
		t.Fatal("README has no line beginning with ACL SETUSER redmap, or no additions for the CLI")
	}
	admin := srv.Client(t)
	for user, r := range map[string][]any{"redmap": rule, "operator": append(slices.Clone(rule), extra...)} {
		if err := admin.Do(context.Background(), append([]any{"ACL", "SETUSER", user, "reset"}, r...)...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	queue := redistest.Queue(t)
	url := "redis://redmap:pw@" + srv.Addr() + "/0"
	operator := "redis://operator:pw@" + srv.Addr() + "/0"
	w1, w2 := startWorkerAt(t, url, queue), startWorkerAt(t, url, queue)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ys, err := manager.Map(ctx, managerAt(t, url, queue), square, ints(2000), manager.ChunkSize(10))
	exact(t, ys, err)
	for _, cmd := range [][]string{{"status"}, {"workers"}, {"batches"}, {"failures"}, {"drain", w1.ID}, {"purge", "-yes", queue}} {
		out, errs, code := runCLIAt(t, operator, cmd...)
		if code != 0 || cmd[0] == "status" && !strings.Contains(out, w2.ID) {
			t.Fatalf("redmap %v as README's operator: exit %d: %s%s", cmd, code, out, errs)
		}
	}
	select {
	case <-w1.Exited():
	case <-ctx.Done():
		t.Fatal("the drained worker did not exit")
	}
}

// A queue on each master of a Cluster: workers and managers serve all three
// at once, and the CLI sees, drains and purges every one of them.
func TestThroughCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	url := cl.URL()
	// Three queues whose slots are on three different masters.
	queues := map[*redistest.Server]string{}
	for i := 0; len(queues) < 3; i++ {
		q := fmt.Sprintf("%s.%d", redistest.Queue(t), i)
		if n := cl.NodeOf(t, keys.Workers("redmap", q)); queues[n] == "" {
			queues[n] = q
		}
	}
	type fleet struct {
		queue string
		ws    []*proc
		m     *manager.Manager
	}
	var fleets []fleet
	for _, q := range queues {
		fleets = append(fleets, fleet{q, []*proc{startWorkerAt(t, url, q), startWorkerAt(t, url, q)}, managerAt(t, url, q)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	errs := make(chan error, len(fleets))
	for _, f := range fleets {
		go func() {
			ys, err := manager.Map(ctx, f.m, square, ints(20_000), manager.ChunkSize(50))
			for i, y := range ys {
				if err == nil && y != i*i {
					err = fmt.Errorf("queue %s, element %d: %d", f.queue, i, y)
				}
			}
			errs <- err
		}()
	}
	for range fleets {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	out, stderr, code := runCLIAt(t, url, "status")
	for _, f := range fleets {
		for _, want := range []string{f.queue, f.ws[0].ID, f.ws[1].ID} {
			if code != 0 || !strings.Contains(out, want) {
				t.Fatalf("redmap status (exit %d) lacks %q:\n%s%s", code, want, out, stderr)
			}
		}
	}
	t.Logf("3 queues on 3 masters, 20,000 squares each, exact; redmap status:\n%s", out)

	// A batch left queued on each (no worker takes it: they drain first).
	for _, f := range fleets {
		if out, stderr, code := runCLIAt(t, url, "drain", f.ws[0].ID); code != 0 {
			t.Fatalf("redmap drain %s: exit %d: %s%s", f.ws[0].ID, code, out, stderr)
		}
		if out, stderr, code := runCLIAt(t, url, "drain", f.ws[1].ID); code != 0 {
			t.Fatalf("redmap drain %s: exit %d: %s%s", f.ws[1].ID, code, out, stderr)
		}
		for _, w := range f.ws {
			select {
			case <-w.Exited():
			case <-ctx.Done():
				t.Fatalf("worker %s did not exit after its drain", w.ID)
			}
		}
	}
	for _, f := range fleets {
		if _, err := manager.Submit(ctx, f.m, square, ints(100), manager.ChunkSize(10)); err != nil {
			t.Fatal(err)
		}
	}
	var batches []inspect.Batch
	redistest.Eventually(t, "every queue's batch listed", func() bool {
		cliJSONAt(t, url, &batches, "batches")
		return len(batches) == 3
	})
	c := cl.Client(t)
	for _, f := range fleets {
		if out, stderr, code := runCLIAt(t, url, "purge", "-yes", f.queue); code != 0 || !strings.Contains(out, "10") {
			t.Fatalf("redmap purge %s: exit %d: %s%s", f.queue, code, out, stderr)
		}
		if n := len(harness.Queued(t, c, f.queue)); n != 0 {
			t.Fatalf("queue %s still holds %d tasks after purge", f.queue, n)
		}
	}
}

// Through Sentinel, a batch run by worker processes ends exact across a
// kill -9 of the primary and across a planned failover.
func TestThroughSentinel(t *testing.T) {
	t.Parallel()
	st := redistest.StartSentinel(t)
	url := "redis-sentinel://" + strings.Join(st.Addrs(), ",") + "/0?master=" + redistest.MasterName
	queue, _ := fleetThrough(t, url)
	m := managerAt(t, url, queue)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// The planned failover first: after the kill the set-up has no replica
	// left to fail over to.
	for _, fault := range []string{"SENTINEL FAILOVER", "kill -9 of the primary"} {
		batch, err := manager.Submit(ctx, m, slow, ints(3000), manager.ChunkSize(1))
		if err != nil {
			t.Fatal(err)
		}
		seen := 0
		for r := range batch.Results() {
			if r.Err != nil {
				t.Fatalf("%s: element %d: %v", fault, r.Index, r.Err)
			}
			if r.Value != r.Index {
				t.Fatalf("%s: element %d: %d", fault, r.Index, r.Value)
			}
			if seen++; seen == 500 {
				if fault == "SENTINEL FAILOVER" {
					st.Failover(t)
				} else {
					st.KillPrimary(t)
				}
			}
		}
		if _, err := batch.Wait(ctx); err != nil || seen != 3000 {
			t.Fatalf("%s: %d results, %v", fault, seen, err)
		}
		t.Logf("%s after 500 results: all 3,000 exact", fault)
	}
}

// A worker process that cannot verify the server's certificate, or lacks
// the client certificate a server requires, exits with one line saying so
// instead of retrying for ever, having never served.
func TestWorkerMainTLSFailure(t *testing.T) {
	t.Parallel()
	s := redistest.StartTLS(t, true)
	for _, c := range []struct{ url, want string }{
		{"rediss://" + s.Addr() + "/0", "certificate signed by unknown authority"},
		{"rediss://" + s.Addr() + "/0?tls_ca_file=" + s.CA, "certificate required"},
	} {
		p := harness.Start(t, harness.Child("worker", []string{"REDIS_URL=" + c.url}, "-queue", redistest.Queue(t)))
		select {
		case <-p.Exited():
		case <-time.After(redistest.WaitLimit(t)):
			t.Fatalf("worker on %s still running after %v", c.url, redistest.WaitLimit(t))
		}
		if p.Err() == nil || !strings.Contains(p.Tail(), c.want) {
			t.Fatalf("worker on %s: exit %v, stderr:\n%s\nwant an error naming %q", c.url, p.Err(), p.Tail(), c.want)
		}
		t.Logf("%s: %s", c.url, p.Tail())
	}
}

// A Cluster that is down when a worker process and a manager start (as in
// its first seconds, while its nodes do not yet agree, or while a master's
// replica is promoted): both wait for it, within their start budgets, and
// serve once it is up; they do not exit at its CLUSTERDOWN.
func TestThroughClusterDownAtStart(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	url := cl.URL()
	queue := redistest.Queue(t)
	up := cl.Down(t)
	w := harness.Start(t, harness.Child("worker", []string{"REDIS_URL=" + url}, "-queue", queue))
	w.WaitLog(t, "CLUSTERDOWN")
	c, err := connect.URL(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	waiting := &signalLog{match: "CLUSTERDOWN", seen: make(chan struct{})}
	m, err := manager.New(c, manager.Options{Queue: queue, Logger: slog.New(waiting)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	ys := make(chan error, 1)
	go func() {
		got, err := manager.Map(context.Background(), m, square, ints(1000), manager.ChunkSize(10))
		for i, y := range got {
			if err == nil && y != i*i {
				err = fmt.Errorf("element %d: %d", i, y)
			}
		}
		ys <- err
	}()
	<-waiting.seen // the manager's first submit met the Cluster down
	up()
	w.Expect(t, "worker ")
	if err := <-ys; err != nil {
		t.Fatalf("a manager started while the Cluster was down: %v", err)
	}
	t.Logf("a worker process and a manager started while every node said CLUSTERDOWN; once up, 1,000 squares exact")
}

// signalLog is a slog.Handler that closes seen at the first record whose
// text (message and attributes) contains match.
type signalLog struct {
	match string
	seen  chan struct{}
	once  sync.Once
}

func (l *signalLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *signalLog) Handle(_ context.Context, r slog.Record) error {
	s := r.Message
	r.Attrs(func(a slog.Attr) bool { s += " " + a.String(); return true })
	if strings.Contains(s, l.match) {
		l.once.Do(func() { close(l.seen) })
	}
	return nil
}
func (l *signalLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *signalLog) WithGroup(string) slog.Handler      { return l }
