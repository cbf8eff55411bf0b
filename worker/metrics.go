package worker

import (
	"context"
	"os"
	"regexp"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/buildinfo"
)

// Collector returns the worker's Prometheus metrics, labelled with its queue
// and its stable name (Options.Name, label "worker"; redmap_worker_info
// gives its id, host and version): tasks taken, succeeded and failed, the
// duration of tasks (a histogram) and the elements run and failed, these
// by function as well (label "function": a registered name, or "(other)"
// for a task of a function the worker does not serve, so the series are
// bounded by what it registered); elements retried, tasks re-queued,
// suspects run alone (in all, and whether one runs now), calls
// abandoned (in all, and still running), the running tasks, the depth of the public queue
// (read from Redis at each scrape), and the constant cache's hits, misses,
// bytes fetched and decodes. Register it with a prometheus.Registry.
func (w *Worker) Collector() prometheus.Collector {
	labels := prometheus.Labels{"queue": w.opts.Queue, "worker": w.opts.Name}
	host, _ := os.Hostname()
	info := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "redmap_worker_info",
		Help:        "1, labelled with the worker's id (random at each start unless set), host and version: what maps its stable name to the worker redmap workers lists.",
		ConstLabels: prometheus.Labels{"queue": w.opts.Queue, "worker": w.opts.Name, "id": w.opts.ID, "host": host, "version": buildinfo.Version()},
	}, func() float64 { return 1 })
	counter := func(name, help string, f func() int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "redmap_worker_" + name, Help: help, ConstLabels: labels},
			func() float64 { return float64(f()) })
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "redmap_worker_" + name, Help: help, ConstLabels: labels}, f)
	}
	c := &w.counters
	return collectors{
		counter("tasks_taken_total", "Tasks taken from the queue.", c.taken.Load),
		counter("element_retries_total", "Element runs retried (timeouts, retryable errors).", c.retried.Load),
		counter("tasks_requeued_total", "Tasks of dead workers this worker put back in the queue.", c.requeued.Load),
		counter("tasks_given_back_total", "Held tasks put back (never received, or prefetched at stop).", c.givenBack.Load),
		counter("results_discarded_total", "Results dropped as stale or duplicate.", c.discarded.Load),
		counter("cache_hits_total", "Constant lookups served from memory.", func() int64 { return w.memo.Stats().Hits }),
		counter("cache_misses_total", "Constant lookups that waited for a fetch.", func() int64 { return w.memo.Stats().Misses }),
		counter("cache_fetched_bytes_total", "Bytes of constants fetched from Redis.", func() int64 { return w.memo.Stats().BytesFetched }),
		counter("cache_decodes_total", "Constants decoded.", func() int64 { return w.memo.Stats().Decodes }),
		counter("calls_abandoned_total", "Calls of functions that ignored their context past their timeout or cancellation, abandoned running.", w.abandoned.total.Load),
		counter("retry_after_waits_total", "Waits element runs made because their function answered redmap.RetryAfter.", c.throttled.Load),
		counter("suspects_total", "Suspects run alone: tasks lost twice with their workers, maybe poison pills.", c.suspects.Load),
		gauge("tasks_running", "Tasks running now.", func() float64 { return float64(w.runningCount()) }),
		gauge("suspect_running", "1 while a suspect runs alone on the worker (its other slots idle), else 0.", func() float64 {
			if c.alone.Load() != nil {
				return 1
			}
			return 0
		}),
		gauge("calls_abandoned_running", "Abandoned calls that have not returned yet (at Options.MaxAbandoned the worker exits).", func() float64 {
			return float64(w.abandoned.running.Load())
		}),
		gauge("calls_outrun_running", "Calls that lost a backup's race and ignored their context, left to finish (not abandoned: never counted toward Options.MaxAbandoned).", func() float64 {
			return float64(w.abandoned.outrun.Load())
		}),
		gauge("queue_depth", "Task ids waiting in the public queue, all shards (-1 if Redis did not answer).", func() float64 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			n, err := w.source.depth(ctx)
			if err != nil {
				return -1
			}
			return float64(n)
		}),
		info,
		prometheus.WrapCollectorWith(labels, w.perFunc.tasks),
		prometheus.WrapCollectorWith(labels, w.perFunc.failed),
		prometheus.WrapCollectorWith(labels, w.perFunc.elements),
		prometheus.WrapCollectorWith(labels, w.perFunc.elementsFailed),
		prometheus.WrapCollectorWith(labels, w.perFunc.duration),
	}
}

// otherFunc is the function label of a task whose function the worker
// does not serve: the manager names it, so it could be anything.
const otherFunc = "(other)"

// metricName returns fn as the function label of a metric: itself if the
// worker registered it, else otherFunc.
func (w *Worker) metricName(fn string) string {
	w.mu.RLock()
	_, ok := w.runtimes[fn]
	w.mu.RUnlock()
	if !ok {
		return otherFunc
	}
	return fn
}

// perFunc counts the tasks and elements a worker ran, by function, and
// by stage for a pipeline's tasks (codec.CallInfo.Stage: "" for others).
type perFunc struct {
	tasks, failed            *prometheus.CounterVec // tasks with every element successful; with one failed at least
	elements, elementsFailed *prometheus.CounterVec
	duration                 *prometheus.HistogramVec // seconds per task run
}

func newPerFunc() perFunc {
	vec := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "redmap_worker_" + name, Help: help}, []string{"function", "stage"})
	}
	return perFunc{
		tasks:          vec("tasks_succeeded_total", "Tasks run with every element successful."),
		failed:         vec("tasks_failed_total", "Tasks run with at least one element failed."),
		elements:       vec("elements_total", "Elements run, of the tasks counted in tasks_succeeded_total and tasks_failed_total."),
		elementsFailed: vec("elements_failed_total", "Elements that failed (after their retries), of the tasks counted in tasks_failed_total."),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "redmap_worker_task_duration_seconds", Help: "Time spent running one task (all its elements).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"function", "stage"}),
	}
}

// init makes fn's series, at zero: a function that never failed has its
// failed series all the same, for rate() and alerts to find.
func (p perFunc) init(fn string) {
	for _, v := range []*prometheus.CounterVec{p.tasks, p.failed, p.elements, p.elementsFailed} {
		v.WithLabelValues(fn, "")
	}
	p.duration.WithLabelValues(fn, "")
}

// stagePattern is a pipeline task's stage as managers name it
// (pipeJob.callOf): its steps, and its side.
var stagePattern = regexp.MustCompile(`^[0-9]{1,2}(-[0-9]{1,2})? (map|reduce)$`)

// stageLabel is stage as a metric label: "" for a task of no pipeline,
// "(other)" for one no manager of this version names so (the series stay
// bounded by a pipeline's steps, whatever a task says).
func stageLabel(stage string) string {
	if stage == "" || stagePattern.MatchString(stage) {
		return stage
	}
	return otherFunc
}

// ran counts a task of function fn (a metric label, see metricName) of n
// elements, ok if none of them failed.
func (p perFunc) ran(fn, stage string, n int, ok bool) {
	p.elements.WithLabelValues(fn, stage).Add(float64(n))
	if ok {
		p.tasks.WithLabelValues(fn, stage).Inc()
		return
	}
	p.failed.WithLabelValues(fn, stage).Inc()
}

// failedIn counts the elements that fails, failures of function fn in a
// task of n elements, stand for: fn is the task's function, or for a
// pipeline the step an element failed in (past a by-key step, a failure
// is of one key, and a task of n partitions may fail more than n).
func (p perFunc) failedIn(fn, stage string, n int, fails []codec.Failure) {
	failed := 0
	for _, f := range fails {
		if f.Index < 0 { // the whole task
			failed = n
			break
		}
		failed += f.Last() - f.Index + 1
	}
	if failed > 0 {
		p.elementsFailed.WithLabelValues(fn, stage).Add(float64(failed))
	}
}

// collectors is a set of collectors that registers as one.
type collectors []prometheus.Collector

// Describe describes every collector's metrics.
func (cs collectors) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range cs {
		c.Describe(ch)
	}
}

// Collect collects every collector's metrics.
func (cs collectors) Collect(ch chan<- prometheus.Metric) {
	for _, c := range cs {
		c.Collect(ch)
	}
}
