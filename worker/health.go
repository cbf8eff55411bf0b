package worker

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// beat records a heartbeat of the maintainer, and whether Redis took it.
func (w *Worker) beat(ok bool) {
	now := time.Now().UnixNano()
	w.ticked.Store(now)
	if ok {
		w.renewed.Store(now)
	}
}

// Healthy reports whether the worker's loops are alive: nil before Run
// (the worker is starting) and while its maintainer ticks; an error once
// it missed its ticks for over max(10 heartbeats, 30 s), or Run returned.
// A Redis that does not answer does not make a worker unhealthy (a
// restart would not help): see Ready. worker.Main serves it at /healthz.
func (w *Worker) Healthy() error {
	switch last := w.ticked.Load(); {
	case w.ended.Load():
		return errors.New("worker: stopped")
	case last == 0:
		return nil
	case time.Since(time.Unix(0, last)) > max(10*w.opts.Heartbeat, 30*time.Second):
		return fmt.Errorf("worker: its upkeep loop last ran %v ago", time.Since(time.Unix(0, last)).Round(time.Second))
	}
	return nil
}

// Ready reports whether the worker takes tasks: Run runs, it is registered
// (Redis took a heartbeat within the lease) and it is not stopping or
// draining. worker.Main serves it at /readyz.
func (w *Worker) Ready() error {
	last := w.renewed.Load()
	switch {
	case w.ended.Load():
		return errors.New("worker: stopped")
	case !w.running.Load() || last == 0:
		return errors.New("worker: not registered yet")
	case w.draining.Load():
		return errors.New("worker: stopping: it takes no more tasks")
	case time.Since(time.Unix(0, last)) > w.opts.Lease:
		return fmt.Errorf("worker: Redis took no heartbeat for %v (its lease is %v): %s",
			time.Since(time.Unix(0, last)).Round(time.Second), w.opts.Lease, w.problem.get())
	}
	return nil
}

// probe serves a probe: 200 "ok", or 503 with why not.
func probe(check func() error) http.HandlerFunc {
	return func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Cache-Control", "no-store")
		if err := check(); err != nil {
			http.Error(rw, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(rw, "ok")
	}
}
