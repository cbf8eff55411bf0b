package worker

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector returns the worker's Prometheus metrics, labelled with its queue
// and id: tasks taken, succeeded, failed, retried and re-queued, suspects
// run alone (in all, and whether one runs now), calls
// abandoned (in all, and still running), the duration of tasks (a
// histogram), the running tasks, the depth of the public queue
// (read from Redis at each scrape), and the constant cache's hits, misses,
// bytes fetched and decodes. Register it with a prometheus.Registry.
func (w *Worker) Collector() prometheus.Collector {
	labels := prometheus.Labels{"queue": w.opts.Queue, "worker": w.opts.ID}
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
		counter("tasks_succeeded_total", "Tasks run with every element successful.", c.succeeded.Load),
		counter("tasks_failed_total", "Tasks run with at least one element failed.", c.failed.Load),
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
		gauge("queue_depth", "Task ids waiting in the public queue, all shards (-1 if Redis did not answer).", func() float64 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			n, err := w.source.depth(ctx)
			if err != nil {
				return -1
			}
			return float64(n)
		}),
		w.durationWithLabels(labels),
	}
}

// durationWithLabels wraps the duration histogram with the worker's labels.
func (w *Worker) durationWithLabels(labels prometheus.Labels) prometheus.Collector {
	return prometheus.WrapCollectorWith(labels, w.duration)
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
