package main

import (
	"context"
	"math"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/redmap/redmap/inspect"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
)

// metricsServer starts redmap metrics on a free port against url and
// returns its /metrics URL.
func metricsServer(t *testing.T, url string, args ...string) string {
	t.Helper()
	cmd := exec.Command(harness.Build(t, "github.com/redmap/redmap/cmd/redmap"),
		append([]string{"metrics", "-addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), "REDIS_URL="+url)
	p := harness.Start(t, cmd)
	return p.Expect(t, "metrics ")
}

// scrape reads Prometheus metrics from url: each sample by its name and
// labels ("name{k=v,...}", labels sorted, queue left out), for one queue.
func scrape(t *testing.T, url, queue string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: not Prometheus text: %v", url, err)
	}
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			var labels []string
			mine := false
			for _, l := range m.GetLabel() {
				if l.GetName() == "queue" {
					mine = l.GetValue() == queue
					continue
				}
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			if !mine {
				continue
			}
			slices.Sort(labels)
			key := name
			if len(labels) > 0 {
				key += "{" + strings.Join(labels, ",") + "}"
			}
			out[key] = value(m)
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	}
	return math.NaN()
}

// The backlog exists with no worker: a batch submitted to a queue no
// worker serves is counted, task by task and element by element, by
// redmap metrics (and the dashboard's /metrics) and redmap backlog; once a
// worker ran it, the history's totals count it, and the backlog is empty.
func TestMetricsWithNoWorker(t *testing.T) {
	e := harness.Setup(t)
	m := e.Manager(t, manager.Options{NoWorkerTimeout: -1})
	xs := make([]int, 1000)
	for i := range xs {
		xs[i] = i
	}
	b, err := manager.Submit(context.Background(), m, square, xs, manager.ChunkSize(8))
	if err != nil {
		t.Fatal(err)
	}
	url := metricsServer(t, e.URL, "-queue", e.Queue)
	var got map[string]float64
	redistest.Eventually(t, "the batch counted", func() bool {
		got = scrape(t, url, e.Queue)
		return got["redmap_queue_running_batches"] == 1
	})
	for name, want := range map[string]float64{
		"redmap_queue_waiting_tasks":               125, // 1,000 elements in 8s
		"redmap_queue_waiting_elements":            1000,
		"redmap_queue_backlog_elements":            1000,
		"redmap_queue_running_tasks":               0,
		"redmap_queue_workers{state=running}":      0,
		"redmap_queue_workers{state=idle}":         0,
		"redmap_batches_ended_total{outcome=done}": 0,
		// Every cause of failure is there from the start, at 0.
		"redmap_elements_failed_total{kind=timeout}":    0,
		"redmap_elements_failed_total{kind=no worker}":  0,
		"redmap_elements_failed_total{kind=redis full}": 0,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (reported: %v), want %v", name, v, ok, want)
		}
	}
	if got["redmap_queue_oldest_waiting_seconds"] < 0 {
		t.Errorf("oldest waiting %v s", got["redmap_queue_oldest_waiting_seconds"])
	}
	out, errs, code := runCLIAt(t, e.URL, "backlog", "-queue", e.Queue)
	if code != 0 || strings.TrimSpace(out) != "125" {
		t.Fatalf("redmap backlog: exit %d, %q %s; want 125", code, out, errs)
	}
	var ms []inspect.Metrics
	cliJSONAt(t, e.URL, &ms, "backlog", "-queue", e.Queue)
	if len(ms) != 1 || ms[0].WaitingElements != 1000 || ms[0].Backlog != 1000 {
		t.Fatalf("redmap backlog -json: %+v", ms)
	}

	w := startWorkerAt(t, e.URL, e.Queue)
	outs, err := b.Wait(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range outs {
		if v != i*i {
			t.Fatalf("element %d = %d", i, v)
		}
	}
	redistest.Eventually(t, "the ended batch counted", func() bool {
		got = scrape(t, url, e.Queue)
		return got["redmap_batches_ended_total{outcome=done}"] == 1
	})
	for name, want := range map[string]float64{
		"redmap_queue_waiting_tasks":       0,
		"redmap_queue_waiting_elements":    0,
		"redmap_queue_backlog_elements":    0,
		"redmap_queue_running_batches":     0,
		"redmap_queue_workers{state=idle}": 1,
	} {
		if v := got[name]; v != want {
			t.Errorf("after the batch: %s = %v, want %v", name, v, want)
		}
	}
	// The worker's own port has the probes.
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get("http://" + w.metrics + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("worker %s: %s", path, resp.Status)
		}
	}
}

// A worker told to stop (SIGTERM) with -grace 1s while it runs 5 s tasks
// gives them back at the bound, not after a lease: another worker runs
// them, and the batch is exact, none of it run by the stopped worker.
func TestGraceGivesBackRunningTasks(t *testing.T) {
	e := harness.Setup(t)
	m := e.Manager(t, manager.Options{})
	in, err := inspect.New(e.Client, "redmap")
	if err != nil {
		t.Fatal(err)
	}
	running := func(wid string) int64 {
		ws, err := in.Workers(context.Background(), e.Queue, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range ws {
			if w.ID == wid {
				return w.Running
			}
		}
		return -1
	}
	a := startWorkerAt(t, e.URL, e.Queue, "-id", "a", "-concurrency", "2", "-prefetch", "-1", "-grace", "1s")
	b, err := manager.Submit(context.Background(), m, five, []int{1, 2, 3, 4}, manager.ChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, "worker a runs two tasks", func() bool { return running("a") == 2 })
	startWorkerAt(t, e.URL, e.Queue, "-id", "b", "-concurrency", "2", "-prefetch", "-1")
	redistest.Eventually(t, "worker b runs the other two", func() bool { return running("b") == 2 })

	termAt := time.Now()
	if err := a.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	a.WaitLog(t, "given_back=2")
	<-a.Exited()
	if err := a.Err(); err != nil {
		t.Fatalf("worker a exited with %v, want 0", err)
	}
	exited := time.Since(termAt)
	startWorkerAt(t, e.URL, e.Queue, "-id", "c", "-concurrency", "2", "-prefetch", "-1")
	outs, err := b.Wait(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range outs {
		x, pid := v/10_000_000, v%10_000_000
		if x != i+1 {
			t.Fatalf("element %d = %d: its input was %d", i, v, x)
		}
		if pid == a.Cmd.Process.Pid {
			t.Fatalf("element %d was delivered by the stopped worker a", i)
		}
	}
	t.Logf("worker a exited %v after SIGTERM (tasks of 5 s, -grace 1s); the batch ended exact %v after it", exited.Round(10*time.Millisecond), time.Since(termAt).Round(10*time.Millisecond))
	ws, err := in.Workers(context.Background(), e.Queue, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if w.ID == "a" && w.State != "stopped" {
			t.Fatalf("worker a is %s, want stopped (it retired, not died)", w.State)
		}
	}
}

// The autoscaling loop KEDA runs, played by the test without Kubernetes:
// every second it scrapes redmap metrics, sets replicas to
// ceil((waiting+running)/target) (activation: waiting > 0; scale-in after a
// cooldown), and starts or SIGTERMs worker processes to match. A batch
// submitted to a queue with no worker gets workers, ends exact, and the
// fleet returns to zero, with nothing lost, duplicated or failed through
// every scale-in.
func TestAutoscaleFromZero(t *testing.T) {
	e := harness.Setup(t)
	m := e.Manager(t, manager.Options{NoWorkerTimeout: 5 * time.Minute})
	url := metricsServer(t, e.URL, "-queue", e.Queue)
	const (
		target   = 4 // tasks per replica
		most     = 4 // replicas
		cooldown = 3 * time.Second
	)
	xs := make([]int, 400)
	for i := range xs {
		xs[i] = i
	}
	start := time.Now()
	b, err := manager.Submit(context.Background(), m, paced, xs, manager.ChunkSize(5)) // 80 tasks of 200 ms
	if err != nil {
		t.Fatal(err)
	}
	firstResult := make(chan time.Duration, 1)
	go func() {
		for range b.Results() {
			firstResult <- time.Since(start)
			return
		}
	}()

	var fleet []*replica
	var peak, scaleIns int
	var firstUp time.Duration
	lastActive := time.Now()
	live := func() []*replica {
		var out []*replica
		for _, r := range fleet {
			select {
			case <-r.p.Exited():
				if err := r.p.Err(); err != nil {
					t.Errorf("a replica exited with %v, want 0", err)
				}
			default:
				if !r.term {
					out = append(out, r)
				}
			}
		}
		return out
	}
	done := false
	tick := time.NewTicker(time.Second) // the autoscaler's polling interval, not a wait for an event
	defer tick.Stop()
	deadline := time.Now().Add(3 * time.Minute)
	for ; ; <-tick.C {
		if time.Now().After(deadline) {
			t.Fatalf("the fleet did not return to zero (replicas %d, batch done %v)", len(live()), done)
		}
		got := scrape(t, url, e.Queue)
		waiting, run := got["redmap_queue_waiting_tasks"], got["redmap_queue_running_tasks"]
		want := int(math.Ceil((waiting + run) / target))
		want = min(want, most)
		if waiting > 0 || run > 0 {
			lastActive = time.Now()
		}
		reps := live()
		switch {
		case len(reps) == 0 && waiting == 0: // activation: nothing to wake for
			want = 0
		case want < len(reps) && time.Since(lastActive) < cooldown && want == 0:
			want = len(reps) // the cooldown holds the last replicas
		}
		for len(reps) < want {
			r := &replica{p: startWorkerAt(t, e.URL, e.Queue, "-concurrency", "2", "-prefetch", "-1", "-grace", "2s")}
			if firstUp == 0 {
				firstUp = time.Since(start)
			}
			fleet = append(fleet, r)
			reps = append(reps, r)
		}
		for len(reps) > want {
			r := reps[len(reps)-1]
			if err := r.p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			r.term = true
			reps = reps[:len(reps)-1]
			scaleIns++
		}
		peak = max(peak, len(reps))
		select {
		case <-b.Done():
			done = true
		default:
		}
		if done && len(live()) == 0 && allExited(fleet) {
			break
		}
	}
	outs, err := b.Wait(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range outs {
		if v != i*i {
			t.Fatalf("element %d = %d, want %d", i, v, i*i)
		}
	}
	got := scrape(t, url, e.Queue)
	if got["redmap_elements_failed_total{kind=lost}"] != 0 || got["redmap_batches_ended_total{outcome=done}"] != 1 {
		t.Fatalf("after the batch: %v", got)
	}
	if peak < 2 || scaleIns == 0 {
		t.Fatalf("peak %d replicas, %d scale-ins: the loop did not scale", peak, scaleIns)
	}
	t.Logf("timeline: batch of %d elements submitted at 0 workers; first replica started %v; first result %v; peak %d replicas; %d scale-ins; back to 0 replicas %v",
		len(xs), firstUp.Round(10*time.Millisecond), (<-firstResult).Round(10*time.Millisecond), peak, scaleIns, time.Since(start).Round(10*time.Millisecond))
}

// replica is a worker process of the autoscaled fleet; term, whether it
// was told to stop.
type replica struct {
	p    *proc
	term bool
}

// allExited reports whether every replica's process has exited.
func allExited(rs []*replica) bool {
	for _, r := range rs {
		select {
		case <-r.p.Exited():
		default:
			return false
		}
	}
	return true
}
