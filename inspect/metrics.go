package inspect

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/buildinfo"
)

// Metrics is what a queue's records in Redis say, as an autoscaler or a
// Prometheus server reads it. Every field exists with no worker running:
// it comes from the records managers and workers wrote, not from a live
// process.
type Metrics struct {
	Queue string `json:"queue"`
	// WaitingTasks and WaitingElements wait in the queue's public lanes;
	// OldestWaiting is how long ago the longest-waiting of them was
	// submitted (0 if none waits), by the Redis clock.
	WaitingTasks    int64         `json:"waiting_tasks"`
	WaitingElements int64         `json:"waiting_elements"`
	OldestWaiting   time.Duration `json:"oldest_waiting"`
	// RunningTasks run on live workers, by their last heartbeats.
	RunningTasks int64 `json:"running_tasks"`
	// Paused: an operator paused the queue (redmap pause); its workers
	// take nothing until it is resumed.
	Paused bool `json:"paused"`
	// Workers counts the queue's workers by state (see Worker.State),
	// the stopped and dead ones of the last GoneFor included.
	Workers map[string]int `json:"workers"`
	// RunningBatches are the batches whose managers publish progress (and
	// the durable ones no manager holds); Durable counts the durable ones
	// by state: running, orphaned, done or cancelled.
	RunningBatches int            `json:"running_batches"`
	Durable        map[string]int `json:"durable"`
	// Backlog is every element of the running batches without a result:
	// waiting in Redis, running, or still in a manager's window, by their
	// managers' last published progress (a pipeline's reduce stage counts
	// its partitions, inspect.Stage.Unit).
	Backlog int64 `json:"backlog_elements"`
	// Ended counts the batches that ended, by outcome, and FailedElements
	// their failed elements, by kind, since the queue's keys were made:
	// a pipeline's keys that failed after a by-key step's fold among them
	// (a reduce stage's FailedKeys, as its record's FailedBy counts them).
	Ended          map[string]int64 `json:"ended"`
	FailedElements map[string]int64 `json:"failed_elements"`
	// Backups counts the backup tasks of ended batches (manager.Backups):
	// started, won (a copy's result came first) and wasted.
	Backups map[string]int64 `json:"backups"`
	// Limits are the queue's functions' fleet-wide limits (Limits), each
	// with its tasks waiting, its slots held and its refused takes.
	Limits []Limit `json:"limits"`
}

// WorkerStates are the states Metrics.Workers always reports, with a zero
// where no worker is in one.
var WorkerStates = []string{"running", "alone", "idle", "late", "draining", "stopped", "dead"}

// DurableStates are the states Metrics.Durable always reports.
var DurableStates = []string{"running", "orphaned", "done", "cancelled"}

// Metrics reads queue's metrics. Its cost is bounded per queue, not per
// task, and does not grow with the rest of the database: a script call per
// shard over the queue's lanes, the workers in one pipeline, the published
// batches in two (the queue's managers, then their progress), and a few
// reads more (docs/operations.md measures it).
func (i *Inspector) Metrics(ctx context.Context, queue string) (Metrics, error) {
	m := Metrics{Queue: queue, Workers: map[string]int{}, Durable: map[string]int{}}
	b, err := i.admin.Backlog(ctx, &broker.QueueParams{Queue: queue})
	if err != nil {
		return m, err
	}
	m.WaitingTasks, m.WaitingElements = b.Tasks, b.Elements
	p, err := i.admin.Paused(ctx, &broker.QueueParams{Queue: queue})
	if err != nil {
		return m, err
	}
	m.Paused = p != nil
	if !b.Oldest.IsZero() {
		m.OldestWaiting = max(b.Now.Sub(b.Oldest), 0)
	}
	ws, err := i.Workers(ctx, queue, b.Now)
	if err != nil {
		return m, err
	}
	for _, s := range WorkerStates {
		m.Workers[s] = 0
	}
	for _, w := range ws {
		m.Workers[w.State]++
		if w.Live {
			m.RunningTasks += w.Running
		}
	}
	bs, err := i.batches(ctx, queue, ws)
	if err != nil {
		return m, err
	}
	for _, s := range DurableStates {
		m.Durable[s] = 0
	}
	for _, b := range bs {
		if b.Call.Pipeline != "" && b.Call.Stage == "" {
			continue // a durable pipeline's own row (its claim), no batch
		}
		m.RunningBatches++
		m.Backlog += int64(max(b.Total-b.Done-b.Failed, 0))
		if b.Durable != "" {
			m.Durable[b.Outcome]++
		}
	}
	ended, err := i.admin.Ended(ctx, &broker.QueueParams{Queue: queue})
	if err != nil {
		return m, err
	}
	m.Ended, m.FailedElements = ended.Outcomes, ended.Kinds
	for _, o := range []string{wire.OutcomeDone, wire.OutcomeFailed, wire.OutcomeCancelled, wire.OutcomeClosed,
		wire.OutcomeManagerLost, wire.OutcomeExpired} {
		m.Ended[o] += 0 // every outcome is reported, none yet or not
	}
	for _, k := range wire.FailureCauses() {
		m.FailedElements[k] += 0 // and every cause
	}
	m.Backups = ended.Backups
	if m.Backups == nil {
		m.Backups = map[string]int64{}
	}
	for _, k := range []string{"started", "won", "wasted"} {
		m.Backups[k] += 0
	}
	if m.Limits, err = i.Limits(ctx, queue); err != nil {
		return m, err
	}
	return m, nil
}

// Collector returns a Prometheus collector of the metrics of the queues
// queues names at each scrape (Metrics, up to 8 queues at once). A queue
// whose records cannot be read (a key of it holding another type, say) is
// reported as redmap_queue_up 0 with none of its other metrics, rather
// than zeros an autoscaler would act on, and its error is logged
// (WithLogger); the other queues are reported as usual. If no queue can be
// read, or the queues cannot be listed, the errors are collected as
// invalid metrics, which fail the scrape.
//
// Its counters (the *_total metrics) never go down, though the records
// they come from may: a batch first recorded "manager lost" and then by
// its returning manager is taken back from the first outcome, and a
// record that expires, is reset by an operator or is lost with Redis
// (FLUSHALL, a failover to a replica that had not caught up) starts again
// from zero. Prometheus takes any decrease of a counter for a restart of
// its process and counts the whole new value as an increase, so such a
// drop would show as a burst of batches that never ended. The collector
// keeps, per series, the last value it read and the value it exported, and
// adds only increases: a drop adds nothing (what was counted stays
// counted), and what the record counts from there is added as it grows.
// A series gone from Redis for an hour is forgotten. The collector's
// process is the counters' process: a new one starts from the records.
func (i *Inspector) Collector(queues func(ctx context.Context) ([]string, error)) prometheus.Collector {
	return &collector{i: i, queues: queues, counters: map[counterKey]*counterSeries{}}
}

// MetricsHandler serves Collector's metrics in Prometheus's text format
// (GET /metrics of redmap metrics and of the dashboard), with the Go
// runtime's and the process's (go_*, process_*). A queue that
// cannot be read is logged (WithLogger) and left out, its
// redmap_queue_up 0; a scrape that cannot read Redis at all answers 500,
// saying why.
func (i *Inspector) MetricsHandler(queues func(ctx context.Context) ([]string, error)) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(i.Collector(queues), buildinfo.Collector(), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError})
}

// collector is Inspector.Collector's.
type collector struct {
	i      *Inspector
	queues func(ctx context.Context) ([]string, error)

	mu       sync.Mutex
	counters map[counterKey]*counterSeries // see Collector: counters that never go down
}

// counterKey names one series of a counter: its metric, queue and label.
type counterKey struct {
	desc         *prometheus.Desc
	queue, label string
}

// counterSeries is a counter's series as the collector last read and
// exported it.
type counterSeries struct {
	read, exported float64
	seen           time.Time
}

// forgetAfter is how long a counter's series may be missing from Redis
// before the collector forgets it: longer than Prometheus's staleness (5
// minutes), after which the series starts anew anyway.
const forgetAfter = time.Hour

// counter returns the value to export for series k of a counter that reads
// v from Redis now: the exported value so far plus what v grew by since
// the last read; nothing added if v went down (see Collector).
func (c *collector) counter(k counterKey, v float64, now time.Time) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.counters[k]
	switch {
	case s == nil:
		s = &counterSeries{exported: v}
		c.counters[k] = s
	case v > s.read:
		s.exported += v - s.read
	}
	s.read, s.seen = v, now
	return s.exported
}

// forget drops the series not read since before.
func (c *collector) forget(before time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, s := range c.counters {
		if s.seen.Before(before) {
			delete(c.counters, k)
		}
	}
}

// scrapeBudget bounds one scrape's reads of Redis.
const scrapeBudget = 10 * time.Second

var (
	descUp              = queueDesc("redmap_queue_up", "1 if the queue's records were read; 0 if they could not be (its other metrics are then left out, and the error logged).")
	descWaitingTasks    = queueDesc("redmap_queue_waiting_tasks", "Tasks waiting in the queue's public lanes.")
	descWaitingElements = queueDesc("redmap_queue_waiting_elements", "Elements of the tasks waiting in the queue's public lanes.")
	descOldest          = queueDesc("redmap_queue_oldest_waiting_seconds", "How long ago the longest-waiting task was submitted, by the Redis clock; 0 if none waits.")
	descRunningTasks    = queueDesc("redmap_queue_running_tasks", "Tasks running on live workers, by their last heartbeats.")
	descPaused          = queueDesc("redmap_queue_paused", "1 while an operator has paused the queue (redmap pause): its workers take nothing; else 0.")
	descWorkers         = queueDesc("redmap_queue_workers", "Workers by state (stopped and dead: of the last minutes).", "state")
	descRunningBatches  = queueDesc("redmap_queue_running_batches", "Batches running: published by their managers, or durable and held by none.")
	descDurable         = queueDesc("redmap_queue_durable_batches", "Durable batches by state.", "state")
	descBacklog         = queueDesc("redmap_queue_backlog_elements", "Elements of the running batches without a result: waiting, running, or in a manager's window.")
	descEnded           = queueDesc("redmap_batches_ended_total", "Batches ended, by outcome, as the queue's history recorded them.", "outcome")
	descFailed          = queueDesc("redmap_elements_failed_total", "Failed elements of ended batches, by kind; with a pipeline's keys that failed after a by-key step's fold.", "kind")
	descBackups         = queueDesc("redmap_backup_tasks_total", "Backup tasks of ended batches (copies of tasks held far longer than their batch's typical task), by outcome: started, won (the copy's result came first), wasted.", "outcome")
	descLimitRate       = queueDesc("redmap_limit_rate_per_second", "A limited function's rate in force, elements a second (0: none).", "func")
	descLimitConc       = queueDesc("redmap_limit_concurrency", "A limited function's concurrency cap in force (0: none).", "func")
	descLimitWaiting    = queueDesc("redmap_limit_waiting_tasks", "Tasks of a limited function waiting in the queue's public lanes.", "func")
	descLimitRunning    = queueDesc("redmap_limit_running_tasks", "Tasks of a limited function holding a slot of its concurrency cap.", "func")
	descLimitRefused    = queueDesc("redmap_limit_throttled_total", "Takes a limited function's limit refused one of its tasks (throttled waits, one a take).", "func")
	descLimitRetryAfter = queueDesc("redmap_limit_retry_after_waits_total", "Waits a limited function's elements made because it answered redmap.RetryAfter (its service refused and said when to come back).", "func")
)

func queueDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, append([]string{"queue"}, labels...), nil)
}

// Describe describes the metrics.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descUp, descWaitingTasks, descWaitingElements, descOldest, descRunningTasks,
		descPaused, descWorkers, descRunningBatches, descDurable, descBacklog, descEnded, descFailed, descBackups,
		descLimitRate, descLimitConc, descLimitWaiting, descLimitRunning, descLimitRefused, descLimitRetryAfter} {
		ch <- d
	}
}

// Collect reads every queue's metrics from Redis.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeBudget)
	defer cancel()
	qs, err := c.queues(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descWaitingTasks, fmt.Errorf("inspect: listing the queues: %w", err))
		return
	}
	now := time.Now()
	defer c.forget(now.Add(-forgetAfter))
	counter := func(d *prometheus.Desc, v float64, q, label string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, c.counter(counterKey{d, q, label}, v, now), q, label)
	}
	ms := make([]Metrics, len(qs))
	errs := make([]error, len(qs))
	eachQueue(qs, func(j int, q string) { ms[j], errs[j] = c.i.Metrics(ctx, q) })
	unread := 0
	for _, err := range errs {
		if err != nil {
			unread++
		}
	}
	for j, q := range qs {
		m, err := ms[j], errs[j]
		switch {
		case err != nil && unread == len(qs): // Redis, or every queue, is unreadable: the scrape fails
			ch <- prometheus.NewInvalidMetric(descUp, fmt.Errorf("inspect: queue %q: %w", q, err))
			continue
		case err != nil:
			c.i.log.Warn("metrics: a queue's records could not be read; the other queues are reported", "queue", q, "err", err)
			ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 0, q)
			continue
		}
		gauge := func(d *prometheus.Desc, v float64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{q}, labels...)...)
		}
		gauge(descUp, 1)
		gauge(descWaitingTasks, float64(m.WaitingTasks))
		gauge(descWaitingElements, float64(m.WaitingElements))
		gauge(descOldest, m.OldestWaiting.Seconds())
		gauge(descRunningTasks, float64(m.RunningTasks))
		gauge(descPaused, map[bool]float64{true: 1}[m.Paused])
		for _, s := range sortedKeys(m.Workers) {
			gauge(descWorkers, float64(m.Workers[s]), s)
		}
		gauge(descRunningBatches, float64(m.RunningBatches))
		for _, s := range sortedKeys(m.Durable) {
			gauge(descDurable, float64(m.Durable[s]), s)
		}
		gauge(descBacklog, float64(m.Backlog))
		for _, o := range sortedKeys(m.Ended) {
			counter(descEnded, float64(m.Ended[o]), q, o)
		}
		for _, k := range sortedKeys(m.FailedElements) {
			counter(descFailed, float64(m.FailedElements[k]), q, k)
		}
		for _, k := range sortedKeys(m.Backups) {
			counter(descBackups, float64(m.Backups[k]), q, k)
		}
		for _, l := range m.Limits {
			rate := 0.0
			if l.InForce.Rate > 0 && l.InForce.Per > 0 {
				rate = l.InForce.Rate / l.InForce.Per.Seconds()
			}
			gauge(descLimitRate, rate, l.Func)
			gauge(descLimitConc, float64(l.InForce.Concurrency), l.Func)
			gauge(descLimitWaiting, float64(l.Waiting), l.Func)
			gauge(descLimitRunning, float64(l.Running), l.Func)
			counter(descLimitRefused, float64(l.Refused), q, l.Func)
			counter(descLimitRetryAfter, float64(l.RetryAfter), q, l.Func)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
