package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/inspect"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/redisbroker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/config"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
)

// foreignKeys is how many keys of another application the tests below put
// beside redmap's.
const foreignKeys = 1_000_000

// withForeignKeys starts a server of the test's own holding foreignKeys
// string keys that are none of redmap's ("app:<n>").
func withForeignKeys(t *testing.T) (*redistest.Server, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t, "--enable-debug-command", "yes")
	c := srv.Client(t)
	ctx := context.Background()
	// A million keys take Redis about a second alone, and more than
	// go-redis's 3 s read timeout on a machine running another make test.
	slow := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: redistest.WaitLimit(t)})
	defer slow.Close()
	if err := slow.Do(ctx, "DEBUG", "POPULATE", foreignKeys, "app").Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := c.DBSize(ctx).Result(); err != nil || n != foreignKeys {
		t.Fatalf("DBSIZE = %d, %v; want %d", n, err, foreignKeys)
	}
	return srv, c
}

// calls returns how many times Redis ran each command since its last
// CONFIG RESETSTAT, by INFO commandstats ("scan": 3).
func calls(t *testing.T, c *redis.Client) map[string]int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, l := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(l), ":")
		name, found := strings.CutPrefix(name, "cmdstat_")
		if !ok || !found {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				out[name], _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return out
}

// resetStats zeroes the server's command counters.
func resetStats(t *testing.T, c *redis.Client) {
	t.Helper()
	if err := c.ConfigResetStat(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
}

// noKeyspaceWalk fails t if Redis ran a command that walks the keyspace
// since the counters were reset.
func noKeyspaceWalk(t *testing.T, c *redis.Client, what string) {
	t.Helper()
	got := calls(t, c)
	for _, cmd := range []string{"scan", "keys"} {
		if got[cmd] > 0 {
			t.Errorf("%s: Redis ran %s %d times: the read walks the keyspace, %d foreign keys included", what, strings.ToUpper(cmd), got[cmd], foreignKeys)
		}
	}
}

// scrapeAll reads url's Prometheus metrics, each sample by queue, then by
// name and labels as scrape has them; and the HTTP status.
func scrapeAll(t *testing.T, url string) (int, map[string]map[string]float64) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]map[string]float64{}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, out
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: not Prometheus text: %v", url, err)
	}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			var q string
			var labels []string
			for _, l := range m.GetLabel() {
				if l.GetName() == "queue" {
					q = l.GetValue()
					continue
				}
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			key := name
			if len(labels) > 0 {
				key += "{" + strings.Join(labels, ",") + "}"
			}
			if out[q] == nil {
				out[q] = map[string]float64{}
			}
			out[q][key] = value(m)
		}
	}
	return resp.StatusCode, out
}

// With a million keys of another application beside them, the operators'
// reads of ten queues (redmap metrics' /metrics, redmap status) cost what
// the queues hold: Redis runs no SCAN or KEYS for them.
func TestOperatorReadsIgnoreForeignKeys(t *testing.T) {
	redistest.Slow(t) // before the million keys: it runs redmap metrics as a process
	srv, c := withForeignKeys(t)
	ctx := context.Background()
	base := redistest.Queue(t)
	var queues []string
	for i := range 10 {
		e := harness.On(t, srv)
		e.Queue = fmt.Sprintf("%s-%d", base, i)
		queues = append(queues, e.Queue)
		m := e.Manager(t, manager.Options{NoWorkerTimeout: -1})
		if _, err := manager.Submit(ctx, m, square, make([]int, 20), manager.ChunkSize(5)); err != nil {
			t.Fatal(err)
		}
	}
	url := metricsServer(t, srv.URL())
	redistest.Eventually(t, "every queue's batch in /metrics", func() bool {
		code, got := scrapeAll(t, url)
		if code != http.StatusOK {
			return false
		}
		for _, q := range queues {
			if got[q]["redmap_queue_running_batches"] != 1 || got[q]["redmap_queue_waiting_tasks"] != 4 {
				return false
			}
		}
		return true
	})

	resetStats(t, c)
	start := time.Now()
	code, got := scrapeAll(t, url)
	took := time.Since(start)
	t.Logf("GET /metrics of %d queues beside %d foreign keys: %d in %v", len(queues), foreignKeys, code, took)
	noKeyspaceWalk(t, c, "GET /metrics")
	if code != http.StatusOK || len(got) < len(queues) {
		t.Fatalf("GET /metrics: %d, %d queues", code, len(got))
	}
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if _, ok := got[""][name]; !ok {
			t.Errorf("no %s in redmap metrics' scrape: the Go and process collectors", name)
		}
	}
	if !slices.ContainsFunc(slices.Collect(maps.Keys(got[""])), func(k string) bool { return strings.HasPrefix(k, "redmap_build_info{") }) {
		t.Errorf("no redmap_build_info in redmap metrics' scrape: %v", slices.Collect(maps.Keys(got[""])))
	}

	resetStats(t, c)
	start = time.Now()
	var status []struct {
		inspect.Queue
		RunningBatches []inspect.Batch `json:"running_batches"`
	}
	cliJSON(t, srv, &status, "status")
	took = time.Since(start)
	noKeyspaceWalk(t, c, "redmap status")
	if len(status) != len(queues) {
		t.Fatalf("redmap status: %d queues, want %d", len(status), len(queues))
	}
	for i, s := range status {
		if s.Name != queues[i] || len(s.RunningBatches) != 1 || s.Depth != 4 {
			t.Errorf("redmap status: queue %d: %s, %d batches, depth %d; want %s, 1, 4", i, s.Name, len(s.RunningBatches), s.Depth, queues[i])
		}
	}
	t.Logf("redmap status of %d queues beside %d foreign keys: %v (the process, its start included)", len(queues), foreignKeys, took)
}

// A thousand queues, each with a running batch and a worker, beside a
// million foreign keys: /metrics reports every one of them, with no SCAN.
// Written by the writers' own calls (a manager's publish, a worker's
// heartbeat), as a thousand managers and workers would.
func TestMetricsOfAThousandQueues(t *testing.T) {
	redistest.Slow(t) // before the million keys: it runs redmap metrics as a process
	srv, c := withForeignKeys(t)
	ctx := context.Background()
	base := redistest.Queue(t)
	const n = 1000
	for i := range n {
		q := fmt.Sprintf("%s-%d", base, i)
		r := redisbroker.New(c, config.DefaultPrefix, q)
		p := wire.BatchProgress{Func: "square", Total: 10, Started: time.Now()}
		if _, err := r.PublishBatches(ctx, &broker.PublishBatchesParams{Manager: "m1", Batches: map[string]wire.BatchProgress{"m1-1": p}, TTL: time.Hour, Due: time.Hour}); err != nil {
			t.Fatal(err)
		}
		info := wire.WorkerInfo{Host: "h", PID: i + 1, Concurrency: 1, Lease: time.Hour, Every: time.Minute, Functions: []string{"square"}}
		if _, err := r.Heartbeat(ctx, &broker.HeartbeatParams{Worker: "w1", Lease: time.Hour, Info: &info}); err != nil {
			t.Fatal(err)
		}
	}
	url := metricsServer(t, srv.URL())
	resetStats(t, c)
	start := time.Now()
	code, got := scrapeAll(t, url)
	took := time.Since(start)
	ran := calls(t, c)
	t.Logf("GET /metrics of %d queues beside %d foreign keys: %d in %v; Redis ran %v", n, foreignKeys, code, took, ran)
	noKeyspaceWalk(t, c, "GET /metrics")
	// Nothing else talks to this Redis: every command is the scrape's (and
	// the metrics server's connections' HELLO).
	var total int64
	for cmd, k := range ran {
		if cmd != "config|resetstat" && cmd != "hello" {
			total += k
		}
	}
	const perQueue = 40
	if total > perQueue*n {
		t.Errorf("one scrape of %d queues ran %d commands, more than %d a queue", n, total, perQueue)
	}
	if code != http.StatusOK {
		t.Fatalf("GET /metrics of %d queues: %d", n, code)
	}
	for i := range n {
		q := fmt.Sprintf("%s-%d", base, i)
		if got[q]["redmap_queue_running_batches"] != 1 || got[q]["redmap_queue_workers{state=idle}"] != 1 {
			t.Fatalf("queue %s: %v", q, got[q])
		}
	}

	start = time.Now()
	out, errs, code := runCLI(t, srv, "status")
	if code != 0 {
		t.Fatalf("redmap status: exit %d: %s", code, errs)
	}
	if rows := strings.Count(out, base+"-"); rows < n {
		t.Fatalf("redmap status lists %d queues, want %d", rows, n)
	}
	t.Logf("redmap status of %d queues beside %d foreign keys: %v (the process, its start included)", n, foreignKeys, time.Since(start))
}

// A queue whose records cannot be read (a foreign type at one of its keys)
// is reported as such, and the other queues' metrics are served in the
// same scrape; redmap status shows the others too, and fails naming it.
func TestMetricsServeTheOthersPastAnUnreadableQueue(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	base := redistest.Queue(t)
	var queues []string
	for i := range 3 {
		q := fmt.Sprintf("%s-%d", base, i)
		queues = append(queues, q)
		r := redisbroker.New(c, config.DefaultPrefix, q)
		p := wire.BatchProgress{Func: "square", Total: 10, Started: time.Now()}
		if _, err := r.PublishBatches(ctx, &broker.PublishBatchesParams{Manager: "m1", Batches: map[string]wire.BatchProgress{"m1-1": p}, TTL: time.Hour, Due: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	// Another application wrote a string where queue 1 keeps its workers.
	if err := c.Set(ctx, keys.Workers(config.DefaultPrefix, queues[1]), "not a sorted set", 0).Err(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(harness.Build(t, "github.com/redmap/redmap/cmd/redmap"), "metrics", "-addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "REDIS_URL="+srv.URL())
	proc := harness.Start(t, cmd)
	url := proc.Expect(t, "metrics ")
	code, got := scrapeAll(t, url)
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d: one unreadable queue fails every queue's metrics", code)
	}
	proc.WaitLog(t, queues[1]) // why, for the operator
	for _, q := range []string{queues[0], queues[2]} {
		if got[q]["redmap_queue_running_batches"] != 1 || got[q]["redmap_queue_up"] != 1 {
			t.Errorf("queue %s: %v", q, got[q])
		}
	}
	bad := got[queues[1]]
	if v, ok := bad["redmap_queue_up"]; !ok || v != 0 {
		t.Errorf("the unreadable queue: redmap_queue_up = %v (reported: %v), want 0", v, ok)
	}
	if _, ok := bad["redmap_queue_waiting_tasks"]; ok || len(bad) != 1 {
		t.Errorf("the unreadable queue reports more than that it is unreadable: %v", bad)
	}

	var status []queueStatus
	out, errs, code := runCLI(t, srv, "status", "-json")
	if err := json.Unmarshal([]byte(out), &status); err != nil {
		t.Fatalf("redmap status -json: %v\n%s", err, out)
	}
	if code != 1 || len(status) != 2 || status[0].Name != queues[0] || status[1].Name != queues[2] || !strings.Contains(errs, queues[1]) {
		t.Errorf("redmap status: exit %d, %d queues shown, stderr %q; want 1, the two readable ones, the other named", code, len(status), errs)
	}

	// With no queue readable, the scrape fails rather than report nothing.
	for _, q := range queues {
		if err := c.Set(ctx, keys.Workers(config.DefaultPrefix, q), "not a sorted set", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if code, _ := scrapeAll(t, url); code != http.StatusInternalServerError {
		t.Errorf("GET /metrics with no queue readable: %d, want 500", code)
	}
}

// Queues an earlier build wrote, with no index of queues, are found by
// -scan, which indexes them: later commands list them without it.
func TestScanFindsQueuesOfAnEarlierBuild(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	queue := redistest.Queue(t)
	p := wire.BatchProgress{Func: "square", Total: 10, Started: time.Now()}
	if _, err := redisbroker.New(c, config.DefaultPrefix, queue).PublishBatches(ctx, &broker.PublishBatchesParams{Manager: "m1", Batches: map[string]wire.BatchProgress{"m1-1": p}, TTL: time.Hour, Due: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := c.Del(ctx, keys.QueueIndex(config.DefaultPrefix)).Err(); err != nil { // as an earlier build left it
		t.Fatal(err)
	}
	var status []queueStatus
	if cliJSON(t, srv, &status, "status"); len(status) != 0 {
		t.Fatalf("status lists %d queues with no index", len(status))
	}
	for _, args := range [][]string{{"status", "-scan"}, {"status"}} {
		if cliJSON(t, srv, &status, args...); len(status) != 1 || status[0].Name != queue || len(status[0].RunningBatches) != 1 {
			t.Fatalf("redmap %v: %+v; want %s with its batch", args, status, queue)
		}
	}
}
