// Package dashboard serves redmap's live web dashboard: queues with their
// depth, workers and throughput over the last 15 minutes, every worker's
// state and counters, a progress bar per batch, and failures grouped by
// function and error. It reads Redis only (what the redmap CLI reads, plus
// the managers' throughput counters), so one dashboard sees every manager
// and worker of every queue on that Redis.
//
// A Dashboard is an http.Handler: `redmap dashboard` serves one, and a
// program can mount one in its own server (see the example). The page polls
// GET <mount>/api/state once a second; the JSON it gets is State.
//
// Actions (drain a worker, cancel a batch, purge a queue) are off unless
// Options.Actions is set; then they are POSTs that must carry the header
// X-Redmap-Action and, if the browser sends an Origin, come from the
// dashboard's own origin, which a page of another site cannot do.
package dashboard

import (
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/config"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/rdb"
)

// Options configure a Dashboard. The zero value of each field means its
// default.
type Options struct {
	// Prefix of redmap's keys. Default "redmap".
	Prefix string
	// Queue shows one queue only; "" shows every queue.
	Queue string
	// Actions allows operators to drain workers, cancel batches and purge
	// queues from the page. Default off: the page then only reads.
	Actions bool
	// Keep is how long a finished batch and a dead worker stay on the page.
	// Default 10 minutes.
	Keep time.Duration
	// Logger receives the dashboard's logs. Default: none.
	Logger *slog.Logger
}

// Dashboard is the dashboard's http.Handler.
type Dashboard struct {
	admin *rdb.Admin
	opts  Options
	mux   *http.ServeMux

	mu      sync.Mutex
	queues  []string          // the queues found by the last scan
	scanned time.Time         // when
	workers map[string]Worker // "queue/id" -> the worker as last seen
	batches map[string]Batch  // "queue/manager/id" -> the batch as last seen

	// The last state read, shared by every page polling within stateTTL:
	// Redis answers one read a second however many operators look.
	stateMu sync.Mutex
	last    State
	lastAt  time.Time
}

// stateTTL is how long a state read serves every page that polls.
const stateTTL = 900 * time.Millisecond

// assets holds the page: index.html, app.js and app.css.
//
//go:embed assets
var assets embed.FS

// New returns a dashboard of the queues on client. It sends no command.
func New(client redis.UniversalClient, opts Options) (*Dashboard, error) {
	if client == nil {
		return nil, errors.New("dashboard: nil Redis client")
	}
	if opts.Queue != "" {
		s := config.Shared{Queue: opts.Queue}
		if err := s.Resolve("dashboard"); err != nil {
			return nil, err
		}
	}
	config.Or(&opts.Prefix, config.DefaultPrefix)
	config.Or(&opts.Keep, 10*time.Minute)
	config.Or(&opts.Logger, slog.New(slog.DiscardHandler))
	d := &Dashboard{admin: rdb.NewAdmin(client, opts.Prefix), opts: opts, mux: http.NewServeMux(),
		workers: map[string]Worker{}, batches: map[string]Batch{}}
	static, _ := fs.Sub(assets, "assets") // embedded: cannot fail
	d.mux.Handle("GET /", http.FileServerFS(static))
	d.mux.HandleFunc("GET /api/state", d.serveState)
	d.mux.HandleFunc("POST /api/drain", d.action(d.drain))
	d.mux.HandleFunc("POST /api/cancel", d.action(d.cancel))
	d.mux.HandleFunc("POST /api/purge", d.action(d.purge))
	return d, nil
}

// ServeHTTP serves the page, its assets, the state and the actions.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Frame-Options", "DENY")
	d.mux.ServeHTTP(w, r)
}

// State is what GET api/state returns: everything the page shows.
type State struct {
	Time     time.Time      `json:"time"`    // the Redis clock
	Actions  bool           `json:"actions"` // the actions are allowed
	Queues   []Queue        `json:"queues"`
	Workers  []Worker       `json:"workers"`
	Batches  []Batch        `json:"batches"`
	Failures []FailureGroup `json:"failures"`
}

// Queue is one queue.
type Queue struct {
	Name    string `json:"name"`
	Depth   int64  `json:"depth"`   // task ids waiting in its public lists, all shards
	Workers int    `json:"workers"` // live workers
	Batches int    `json:"batches"` // running batches
	// Rate is elements ended per second over the last minute; Series the
	// same per Bucket seconds over the last 15 minutes, oldest first.
	Rate   float64   `json:"rate"`
	Series []float64 `json:"series"`
	Bucket int       `json:"bucket"`
}

// Worker is one worker, live or dead.
type Worker struct {
	Queue        string   `json:"queue"`
	ID           string   `json:"id"`
	State        string   `json:"state"` // running, draining or dead
	Host         string   `json:"host"`
	PID          int      `json:"pid"`
	HeartbeatAge float64  `json:"heartbeat_age"` // seconds, by the Redis clock
	Busy         int64    `json:"busy"`          // slots running a task
	Slots        int      `json:"slots"`
	Held         int64    `json:"held"`
	Taken        int64    `json:"taken"`
	Delivered    int64    `json:"delivered"`
	Failed       int64    `json:"failed"`
	Functions    []string `json:"functions"`
	CacheHits    int64    `json:"cache_hits"`
	CacheBytes   int64    `json:"cache_bytes"`
	Error        string   `json:"error,omitempty"`
	seen         time.Time
}

// Batch is one batch, running or finished.
type Batch struct {
	Queue    string  `json:"queue"`
	Manager  string  `json:"manager"`
	ID       string  `json:"id"`
	Func     string  `json:"func"`
	Priority int     `json:"priority"`
	Total    int     `json:"total"`
	Done     int     `json:"done"` // failed ones included
	Failed   int     `json:"failed"`
	Rate     float64 `json:"rate"` // elements a second
	ETA      float64 `json:"eta"`  // seconds; 0 when unknown or done
	Worker   string  `json:"worker,omitempty"`
	Waiting  string  `json:"waiting,omitempty"`
	// Outcome is "running", or, once its manager no longer publishes it,
	// "done" (every element ended, none failed), "failed" (every element
	// ended, some failed) or "ended" (it stopped before: cancelled, or its
	// manager closed or died).
	Outcome string    `json:"outcome"`
	Ended   time.Time `json:"ended,omitzero"`
}

// FailureGroup is the failures of one function with one error message
// (its first line; retries of an element count with it).
type FailureGroup struct {
	Queue string    `json:"queue"`
	Func  string    `json:"func"`
	Kind  string    `json:"kind"`
	Error string    `json:"error"`
	Count int       `json:"count"`
	Last  time.Time `json:"last"`
	Stack string    `json:"stack,omitempty"` // a sample
}

func (d *Dashboard) serveState(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	st, err := d.shared(ctx)
	if err != nil {
		d.opts.Logger.Warn("reading Redis failed", "err", err)
		http.Error(w, "dashboard: reading Redis: "+err.Error(), http.StatusBadGateway)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(st)
}

// shared returns the last state if it is fresh, else reads a new one.
func (d *Dashboard) shared(ctx context.Context) (State, error) {
	d.stateMu.Lock()
	defer d.stateMu.Unlock()
	if time.Since(d.lastAt) < stateTTL {
		return d.last, nil
	}
	st, err := d.State(ctx)
	if err != nil {
		return State{}, err
	}
	d.last, d.lastAt = st, time.Now()
	return st, nil
}

// State reads what the page shows from Redis, and adds the batches and
// workers seen before that are gone (within Options.Keep).
func (d *Dashboard) State(ctx context.Context) (State, error) {
	nowMs, err := d.admin.Now(ctx)
	if err != nil {
		return State{}, err
	}
	now := time.UnixMilli(nowMs)
	queues, err := d.queueNames(ctx)
	if err != nil {
		return State{}, err
	}
	st := State{Time: now, Actions: d.opts.Actions, Queues: []Queue{}, Workers: []Worker{}, Batches: []Batch{}, Failures: []FailureGroup{}}
	for _, q := range queues {
		qs, ws, bs, fs, err := d.queue(ctx, q, nowMs)
		if err != nil {
			return State{}, fmt.Errorf("queue %s: %w", q, err)
		}
		st.Queues = append(st.Queues, qs)
		st.Workers = append(st.Workers, ws...)
		st.Batches = append(st.Batches, bs...)
		st.Failures = append(st.Failures, fs...)
	}
	d.remember(&st, now)
	return st, nil
}

// queueNames returns the queues to show, scanning Redis at most every 5 s.
func (d *Dashboard) queueNames(ctx context.Context) ([]string, error) {
	if d.opts.Queue != "" {
		return []string{d.opts.Queue}, nil
	}
	d.mu.Lock()
	qs, at := d.queues, d.scanned
	d.mu.Unlock()
	if time.Since(at) < 5*time.Second {
		return qs, nil
	}
	qs, err := d.admin.Queues(ctx)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.queues, d.scanned = qs, time.Now()
	d.mu.Unlock()
	return qs, nil
}

// queue reads one queue.
func (d *Dashboard) queue(ctx context.Context, q string, nowMs int64) (Queue, []Worker, []Batch, []FailureGroup, error) {
	qs := Queue{Name: q, Bucket: int(keys.ThroughputBucket / time.Second)}
	var err error
	if qs.Depth, err = d.admin.Depth(ctx, q); err != nil {
		return qs, nil, nil, nil, err
	}
	tp, err := d.admin.Throughput(ctx, q, time.UnixMilli(nowMs), 15*time.Minute)
	if err != nil {
		return qs, nil, nil, nil, err
	}
	qs.Series = make([]float64, len(tp))
	for i, n := range tp {
		qs.Series[i] = float64(n) / float64(qs.Bucket)
	}
	qs.Rate = recentRate(tp, nowMs)
	regs, err := d.admin.Workers(ctx, q)
	if err != nil {
		return qs, nil, nil, nil, err
	}
	var ws []Worker
	for _, r := range regs {
		w := Worker{Queue: q, ID: r.ID, State: cmp.Or(r.Info.State, "running"), Host: r.Info.Host, PID: r.Info.PID,
			Busy: r.Info.Running, Slots: r.Info.Concurrency, Held: r.Held, Taken: r.Info.Taken,
			Delivered: r.Info.Delivered, Failed: r.Info.Failed, Functions: r.Info.Functions,
			CacheHits: r.Info.CacheHits, CacheBytes: r.Info.CacheBytes, Error: r.Info.Error}
		if w.Functions == nil {
			w.Functions = []string{}
		}
		// The lease began at the last heartbeat, by the Redis clock.
		w.HeartbeatAge = float64(nowMs-(r.Deadline-r.Info.Lease.Milliseconds())) / 1000
		if r.Deadline < nowMs {
			w.State = "dead"
		} else {
			qs.Workers++
		}
		ws = append(ws, w)
	}
	pbs, err := d.admin.Batches(ctx, q)
	if err != nil {
		return qs, nil, nil, nil, err
	}
	var bs []Batch
	for _, b := range pbs {
		p := b.Progress
		bs = append(bs, Batch{Queue: q, Manager: b.Manager, ID: b.ID, Func: p.Func, Priority: cmp.Or(p.Priority, keys.DefaultPriority),
			Total: p.Total, Done: p.Done, Failed: p.Failed, Rate: p.Rate, ETA: p.ETA.Seconds(), Worker: p.Worker,
			Waiting: p.Waiting, Outcome: "running"})
	}
	qs.Batches = len(bs)
	recs, _, err := d.admin.Failures(ctx, q)
	if err != nil {
		return qs, nil, nil, nil, err
	}
	return qs, ws, bs, groupFailures(q, recs), nil
}

// recentRate returns elements per second over the last minute of the
// counters tp (the last one is the current bucket, nowMs into it), or over
// the part of it since the first element ended, if that is shorter: a
// queue that began 5 s ago shows its rate, not a twelfth of it.
func recentRate(tp []int64, nowMs int64) float64 {
	per := int(time.Minute / keys.ThroughputBucket)
	bucketMs := keys.ThroughputBucket.Milliseconds()
	recent := tp[max(0, len(tp)-per):]
	first := slices.IndexFunc(recent, func(n int64) bool { return n > 0 })
	if first < 0 {
		return 0
	}
	var sum int64
	for _, n := range recent[first:] {
		sum += n
	}
	// Whole buckets before the current one, and the current one so far.
	ms := int64(len(recent)-1-first)*bucketMs + nowMs%bucketMs + 1
	return float64(sum) / (float64(max(ms, 1000)) / 1000)
}

// groupFailures groups a queue's failure records (see rdb.GroupFailures).
func groupFailures(q string, recs []rdb.FailureRecord) []FailureGroup {
	gs := rdb.GroupFailures(recs)
	out := make([]FailureGroup, len(gs))
	for i, g := range gs {
		out[i] = FailureGroup{Queue: q, Func: g.Func, Kind: g.Kind, Error: g.Error, Count: g.Count, Last: g.Last, Stack: g.Stack}
	}
	return out
}

// remember records what st shows, and adds to it the workers and batches
// seen before that Redis no longer has: a worker reaped or expired shows
// dead, a batch its manager no longer publishes shows its outcome, for
// Options.Keep.
func (d *Dashboard) remember(st *State, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	present := map[string]bool{}
	for i, w := range st.Workers {
		k := w.Queue + "/" + w.ID
		present[k] = true
		st.Workers[i].seen = now
		d.workers[k] = st.Workers[i]
	}
	for k, w := range d.workers {
		switch {
		case present[k]:
		case now.Sub(w.seen) > d.opts.Keep:
			delete(d.workers, k)
		default:
			w.State = "dead"
			w.Busy = 0
			w.HeartbeatAge = now.Sub(w.seen).Seconds() + w.HeartbeatAge
			st.Workers = append(st.Workers, w)
		}
	}
	present = map[string]bool{}
	for _, b := range st.Batches {
		k := b.Queue + "/" + b.Manager + "/" + b.ID
		present[k] = true
		d.batches[k] = b
	}
	for k, b := range d.batches {
		switch {
		case present[k]:
		case b.Outcome != "running" && now.Sub(b.Ended) > d.opts.Keep:
			delete(d.batches, k)
		default:
			if b.Outcome == "running" {
				b.Outcome = "ended"
				if b.Done == b.Total {
					b.Outcome = "done"
					if b.Failed > 0 {
						b.Outcome = "failed"
					}
				}
				b.Ended, b.ETA, b.Waiting = now, 0, ""
				d.batches[k] = b
			}
			st.Batches = append(st.Batches, b)
		}
	}
	slices.SortFunc(st.Workers, func(a, b Worker) int {
		return cmp.Or(cmp.Compare(a.Queue, b.Queue), cmp.Compare(rank(a.State == "dead"), rank(b.State == "dead")), cmp.Compare(a.ID, b.ID))
	})
	slices.SortFunc(st.Batches, func(a, b Batch) int {
		return cmp.Or(cmp.Compare(rank(a.Outcome != "running"), rank(b.Outcome != "running")), cmp.Compare(a.Queue, b.Queue),
			cmp.Compare(a.Manager, b.Manager), cmp.Compare(a.ID, b.ID))
	})
}

// rank orders false before true.
func rank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// action wraps an action's handler: refused unless Options.Actions, and
// unless the request carries X-Redmap-Action and comes from the page's own
// origin (a cross-site form or fetch cannot: the header makes a browser
// ask first, and nothing here says yes).
func (d *Dashboard) action(f func(ctx context.Context, req actionRequest) (string, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !d.opts.Actions {
			http.Error(w, "dashboard: actions are off (start it with -actions)", http.StatusForbidden)
			return
		}
		if r.Header.Get("X-Redmap-Action") == "" {
			http.Error(w, "dashboard: an action needs the X-Redmap-Action header", http.StatusForbidden)
			return
		}
		if o := r.Header.Get("Origin"); o != "" {
			u, err := url.Parse(o)
			if err != nil || u.Host != r.Host {
				http.Error(w, "dashboard: cross-origin action refused", http.StatusForbidden)
				return
			}
		}
		var req actionRequest
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&req); err != nil {
			http.Error(w, "dashboard: bad request: "+err.Error(), http.StatusBadRequest)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		msg, err := f(ctx, req)
		if err != nil {
			http.Error(w, "dashboard: "+err.Error(), http.StatusBadRequest)
			return
		}
		d.opts.Logger.Info("operator action", "path", r.URL.Path, "queue", req.Queue, "result", msg)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"result": msg})
	}
}

// actionRequest is the body of an action.
type actionRequest struct {
	Queue   string `json:"queue"`
	Worker  string `json:"worker,omitempty"`
	Manager string `json:"manager,omitempty"`
	Batch   string `json:"batch,omitempty"`
	Confirm string `json:"confirm,omitempty"` // purge: the queue's name again
}

func (d *Dashboard) drain(ctx context.Context, req actionRequest) (string, error) {
	if req.Queue == "" || req.Worker == "" || strings.ContainsAny(req.Queue+req.Worker, "{}*?[") {
		return "", errors.New("drain needs a queue and a worker")
	}
	if err := d.admin.Drain(ctx, req.Queue, req.Worker); err != nil {
		return "", err
	}
	return "draining worker " + req.Worker, nil
}

func (d *Dashboard) cancel(ctx context.Context, req actionRequest) (string, error) {
	if req.Queue == "" || req.Manager == "" || req.Batch == "" || strings.ContainsAny(req.Queue+req.Manager, "{}*?[") {
		return "", errors.New("cancel needs a queue, a manager and a batch")
	}
	if err := d.admin.CancelBatch(ctx, req.Queue, req.Manager, req.Batch); err != nil {
		return "", err
	}
	return "cancelling batch " + req.Batch + " at its manager's next poll", nil
}

func (d *Dashboard) purge(ctx context.Context, req actionRequest) (string, error) {
	if req.Queue == "" || strings.ContainsAny(req.Queue, "{}*?[") {
		return "", errors.New("purge needs a queue")
	}
	if req.Confirm != req.Queue {
		return "", errors.New("purge needs the queue's name again, in confirm")
	}
	purged, dropped, err := d.admin.Purge(ctx, req.Queue)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("dropped %d queued task id(s) from queue %s: %d task(s) failed in their batches", dropped, req.Queue, purged), nil
}
