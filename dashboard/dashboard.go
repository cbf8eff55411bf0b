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
// Actions (drain a worker, cancel a batch, pause, resume or purge a queue)
// are off unless
// Options.Actions is set, which needs Options.Token, the operator's secret:
// an action is a POST that must carry it (X-Redmap-Token, or Authorization:
// Bearer from a script),
// compared in constant time, as well as the header X-Redmap-Action and, if
// the browser sends an Origin, the dashboard's own origin. The page asks the
// operator for the token once and keeps it in the tab's session storage,
// never in a cookie or a URL. Options.Private requires the token to read the
// state too.
package dashboard

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/inspect"
	"github.com/redmap/redmap/internal/config"
	"github.com/redmap/redmap/internal/keys"
)

// Options configure a Dashboard. The zero value of each field means its
// default.
type Options struct {
	// Prefix of redmap's keys. Default "redmap".
	Prefix string
	// Queue shows one queue only; "" shows every queue.
	Queue string
	// Actions allows operators to drain workers, cancel batches and purge
	// queues from the page. Default off: the page then only reads. It needs
	// Token.
	Actions bool
	// Token is the operators' secret: an action must carry it, and with
	// Private so must a read of the state. Keep it out of command lines
	// (ps shows them): redmap dashboard reads REDMAP_DASHBOARD_TOKEN or a
	// file (-token-file).
	Token string
	// Private requires the token to read the state (api/state) as well;
	// the page's own files, which hold no data, are served to anyone. Use
	// it when the network that reaches the dashboard should not see hosts,
	// pids, function names and failure messages; or keep the dashboard on
	// 127.0.0.1 behind a reverse proxy with your own login.
	Private bool
	// Keep is how long an ended batch (from the queues' history in Redis)
	// stays on the page. Default 10 minutes. (Workers that stopped or died
	// stay for inspect.GoneFor, as Redis keeps them.)
	Keep time.Duration
	// Hosts are the names (without port) the dashboard answers to besides
	// IP addresses and localhost: the name operators reach it by, through
	// DNS or a reverse proxy that passes the Host on. A request for any
	// other name is refused (421), so that a web page whose name was made
	// to resolve to the dashboard's address (DNS rebinding) reads nothing.
	Hosts []string
	// ReadTimeout bounds one read of what a page asks for (api/state, a
	// batch's failures): a queue not read within it is left out and named
	// in State.Unreadable. Default 5 s; raise it for a Redis behind a slow
	// link or with thousands of queues.
	ReadTimeout time.Duration
	// Logger receives the dashboard's logs. Default: none.
	Logger *slog.Logger
}

// Dashboard is the dashboard's http.Handler.
type Dashboard struct {
	in    *inspect.Inspector
	opts  Options
	mux   *http.ServeMux
	token [sha256.Size]byte // of Options.Token: compared at a fixed length

	mu      sync.Mutex
	queues  []string  // the queues found by the last scan
	scanned time.Time // when

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
	switch {
	case opts.Actions && opts.Token == "":
		return nil, errors.New("dashboard: Options.Actions needs Options.Token: without the operator's secret anyone who can reach the page could drain workers and purge queues")
	case opts.Private && opts.Token == "":
		return nil, errors.New("dashboard: Options.Private needs Options.Token")
	}
	config.Or(&opts.Prefix, config.DefaultPrefix)
	config.Or(&opts.Keep, 10*time.Minute)
	config.Or(&opts.ReadTimeout, 5*time.Second)
	config.Or(&opts.Logger, slog.New(slog.DiscardHandler))
	in, err := inspect.New(client, opts.Prefix)
	if err != nil {
		return nil, err
	}
	in = in.WithLogger(opts.Logger)
	d := &Dashboard{in: in, opts: opts, mux: http.NewServeMux(), token: sha256.Sum256([]byte(opts.Token))}
	static, _ := fs.Sub(assets, "assets") // embedded: cannot fail
	d.mux.Handle("GET /", http.FileServerFS(static))
	d.mux.HandleFunc("GET /api/state", d.serveState)
	d.mux.HandleFunc("GET /api/failure", d.serveFailure)
	d.mux.HandleFunc("GET /api/failed", d.serveFailed)
	d.mux.HandleFunc("POST /api/drain", d.action(d.drain))
	d.mux.HandleFunc("POST /api/cancel", d.action(d.cancel))
	d.mux.HandleFunc("POST /api/purge", d.action(d.purge))
	d.mux.HandleFunc("POST /api/pause", d.action(d.pause))
	d.mux.HandleFunc("POST /api/resume", d.action(d.resume))
	metrics := in.MetricsHandler(d.queueNames)
	d.mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		if d.opts.Private && !d.authorized(r) {
			unauthorized(w, r, "reading the metrics")
			return
		}
		metrics.ServeHTTP(w, r)
	})
	return d, nil
}

// csp is the page's Content-Security-Policy: its own script, style and
// requests only; no inline script or style, no frame, no form elsewhere.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// ServeHTTP serves the page, its assets, the state and the actions, to
// requests whose Host is one the dashboard answers to (see Options.Hosts).
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", csp)
	w.Header().Set("Referrer-Policy", "no-referrer")
	if !d.hostAllowed(r.Host) {
		// A page on another site whose name was made to resolve to this
		// address (DNS rebinding) reads nothing.
		http.Error(w, "dashboard: unknown host "+strconv.Quote(r.Host)+" (redmap dashboard -host names it)", http.StatusMisdirectedRequest)
		return
	}
	d.mux.ServeHTTP(w, r)
}

// hostAllowed reports whether host (a request's Host, with or without a
// port) names the dashboard: an IP address (a rebinding attack needs a
// name), localhost, or one of Options.Hosts.
func (d *Dashboard) hostAllowed(host string) bool {
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	name = strings.TrimSuffix(strings.Trim(name, "[]"), ".")
	if name == "" || net.ParseIP(name) != nil || strings.EqualFold(name, "localhost") {
		return name != ""
	}
	for _, h := range d.opts.Hosts {
		if strings.EqualFold(name, h) {
			return true
		}
	}
	return false
}

// State is what GET api/state returns: everything the page shows, read
// through the inspector (package inspect) from the records their writers
// keep in Redis; nothing comes from what the dashboard saw before.
type State struct {
	Time    time.Time `json:"time"`    // the Redis clock
	Actions bool      `json:"actions"` // the actions are allowed (with the operator token)
	// Queues are the busy queues (see Idle), busiest first: by depth, then
	// tasks running, then elements ended a second, then name.
	Queues []inspect.Queue `json:"queues"`
	// Idle names, sorted, the queues with nothing queued, running or ended
	// within the last 15 minutes (inspect.Queue.Idle: a flat chart), and no
	// batch ended within Options.Keep: the page folds them into
	// one line, so that 200 queues neither bury the busy ones nor weigh
	// 200 cards. Their live idle workers are counted in IdleWorkers, not
	// listed in Workers; their limits and failure groups are left out (the
	// failure groups are not even read: redmap failures lists them); their
	// workers in any other state (late, draining, dead, stopped) are kept.
	Idle        []string         `json:"idle"`
	IdleWorkers int              `json:"idle_workers"`
	Workers     []inspect.Worker `json:"workers"`
	Batches     []inspect.Batch  `json:"batches"`
	// Pipelines are the pipelines (manager.From) listed (running, or a
	// durable one orphaned or being cancelled), or ended within
	// Options.Keep, each one job with its stages (Inspector.Pipelines:
	// each counted over every batch of it that ended), the listed ones
	// first; their batches are not in Batches.
	Pipelines []inspect.Pipeline `json:"pipelines"`
	// Failures are the failure groups, most recently seen first, at most
	// FailuresShown of them (FailuresLeft says how many more there are:
	// redmap failures lists them all), each without its stack and with its
	// last message cut to 512 bytes: GET api/failure gives one group whole.
	Failures     []inspect.FailureGroup `json:"failures"`
	FailuresLeft int                    `json:"failures_left,omitempty"`
	// EndedLeft counts the ended batches beyond the EndedShown newest,
	// GoneLeft the workers that stopped or died beyond the GoneShown
	// newest: left out (redmap batches -all and redmap workers list them),
	// so that a burst across 200 queues does not make every poll of the
	// page hundreds of kilobytes.
	EndedLeft int             `json:"ended_left,omitempty"`
	GoneLeft  int             `json:"gone_left,omitempty"`
	Limits    []inspect.Limit `json:"limits"` // the functions' fleet-wide limits
	// Unreadable says, for each queue whose records could not be read (a
	// key of it holding another type, say), why; the others are shown.
	Unreadable map[string]string `json:"unreadable,omitempty"`
}

// tokenHeader carries the operator token from the page: a header of its
// own, so that a reverse proxy's login (basic auth in Authorization) and
// the token go together. Scripts may send Authorization: Bearer instead.
const tokenHeader = "X-Redmap-Token"

// authorized reports whether r carries the operator token, compared in
// constant time; never when no token is set. Only the headers count: a
// token in the URL (which logs and the Referer keep) or a cookie is ignored.
func (d *Dashboard) authorized(r *http.Request) bool {
	got := r.Header.Get(tokenHeader)
	if got == "" {
		got, _ = strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	}
	if got == "" || d.opts.Token == "" {
		return false
	}
	sum := sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(sum[:], d.token[:]) == 1
}

// unauthorized answers a request without the right token: 401 when it
// carries none, 403 when it carries another.
func unauthorized(w http.ResponseWriter, r *http.Request, what string) {
	_, bearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if r.Header.Get(tokenHeader) == "" && !bearer {
		w.Header().Set("WWW-Authenticate", `Bearer realm="redmap dashboard"`)
		http.Error(w, "dashboard: "+what+" needs the operator token", http.StatusUnauthorized)
		return
	}
	http.Error(w, "dashboard: wrong operator token", http.StatusForbidden)
}

func (d *Dashboard) serveState(w http.ResponseWriter, r *http.Request) {
	if d.opts.Private && !d.authorized(r) {
		unauthorized(w, r, "reading the state")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), d.opts.ReadTimeout)
	defer cancel()
	st, err := d.shared(ctx)
	if err != nil && r.Context().Err() != nil { // the client went away: no one to answer, nothing wrong
		d.opts.Logger.Debug("a page left before its state was read", "err", err)
		return
	}
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

// State reads what the page shows from Redis: the queues, their workers
// (those that stopped or died within inspect.GoneFor included), their
// running batches and those that ended within Options.Keep (the queues'
// history), their failure groups, and their functions' limits; of an idle
// queue, only what State.Idle says. A queue
// whose records cannot be read is left out and named in Unreadable (and
// logged); if none can be, State fails.
func (d *Dashboard) State(ctx context.Context) (State, error) {
	now, err := d.in.Now(ctx)
	if err != nil {
		return State{}, err
	}
	queues, err := d.queueNames(ctx)
	if err != nil {
		return State{}, err
	}
	st := State{Time: now, Actions: d.opts.Actions, Queues: []inspect.Queue{}, Idle: []string{}, Workers: []inspect.Worker{},
		Batches: []inspect.Batch{}, Pipelines: []inspect.Pipeline{}, Failures: []inspect.FailureGroup{}, Limits: []inspect.Limit{}}
	snaps, errs := d.in.Busy(ctx, queues) // an idle queue's failure groups are not read
	for j, q := range queues {
		snap, err := snaps[j], errs[j]
		if err != nil && errors.Is(ctx.Err(), context.Canceled) { // the reader left: no queue is at fault
			return State{}, ctx.Err()
		}
		if err != nil {
			if len(st.Unreadable)+1 == len(queues) { // none readable: Redis is, or its queues are
				return State{}, fmt.Errorf("queue %s: %w", q, err)
			}
			d.opts.Logger.Warn("a queue's records could not be read; the others are shown", "queue", q, "err", err)
			if st.Unreadable == nil {
				st.Unreadable = map[string]string{}
			}
			st.Unreadable[q] = err.Error()
			continue
		}
		var ended []inspect.Batch
		for _, b := range snap.History {
			if now.Sub(b.Ended) <= d.opts.Keep {
				ended = append(ended, b)
			}
		}
		// A batch that ended with no element counted (its manager lost
		// before any ended, say) keeps its queue in view as long as it is.
		idle := snap.Queue.Idle() && len(ended) == 0
		if idle {
			st.Idle = append(st.Idle, q)
		} else {
			st.Queues = append(st.Queues, snap.Queue)
			st.Limits = append(st.Limits, snap.Limits...)
		}
		for _, w := range snap.Workers {
			if idle && w.Live && w.State == "idle" {
				st.IdleWorkers++
				continue
			}
			st.Workers = append(st.Workers, w)
		}
		ps, _, err := d.in.Pipelines(ctx, append(slices.Clone(snap.Batches), snap.History...))
		if err != nil {
			return State{}, fmt.Errorf("queue %s: %w", q, err)
		}
		for _, p := range ps {
			if p.Ended.IsZero() || now.Sub(p.Ended) <= d.opts.Keep {
				st.Pipelines = append(st.Pipelines, p)
			}
		}
		piped := func(b inspect.Batch) bool { return b.Call.Pipeline != "" }
		st.Batches = append(st.Batches, slices.DeleteFunc(slices.Clone(snap.Batches), piped)...)
		st.Batches = append(st.Batches, slices.DeleteFunc(ended, piped)...)
		st.Failures = append(st.Failures, snap.Failures...)
	}
	order(&st)
	trim(&st)
	if len(st.Failures) > FailuresShown {
		st.Failures, st.FailuresLeft = st.Failures[:FailuresShown], len(st.Failures)-FailuresShown
	}
	for j := range st.Failures {
		// A stack is up to 16 KiB: 50 of them in every poll would be most
		// of the state. The page asks for one when an operator opens it.
		f := &st.Failures[j]
		f.SampleStack = ""
		if len(f.Error) > errorShown {
			f.Error = strings.ToValidUTF8(f.Error[:errorShown], "") + "…"
		}
	}
	return st, nil
}

// ChartsShown, EndedShown and GoneShown cap what State carries beyond
// the busy queues' numbers: the 15-minute charts of the busiest queues
// (the others' Series are left out: their cards show their numbers), the
// newest ended batches, and the newest workers that stopped or died.
const (
	ChartsShown = 20
	EndedShown  = 20
	GoneShown   = 20
)

// trim applies ChartsShown, EndedShown and GoneShown to st, in its order.
func trim(st *State) {
	for j := range st.Queues {
		if j >= ChartsShown {
			st.Queues[j].Series = nil
		}
	}
	ended := 0
	st.Batches = slices.DeleteFunc(st.Batches, func(b inspect.Batch) bool {
		if b.Ended.IsZero() {
			return false
		}
		ended++
		return ended > EndedShown
	})
	st.EndedLeft = max(ended-EndedShown, 0)
	ended = 0
	st.Pipelines = slices.DeleteFunc(st.Pipelines, func(p inspect.Pipeline) bool {
		if p.Ended.IsZero() {
			return false
		}
		ended++
		return ended > EndedShown
	})
	var gone []float64 // heartbeat ages: the newest are the smallest
	for _, w := range st.Workers {
		if !w.Live {
			gone = append(gone, w.HeartbeatAge)
		}
	}
	if len(gone) <= GoneShown {
		return
	}
	slices.Sort(gone)
	oldest := gone[GoneShown-1] // the newest GoneShown are kept (ties: all of them)
	st.Workers = slices.DeleteFunc(st.Workers, func(w inspect.Worker) bool {
		if !w.Live && w.HeartbeatAge > oldest {
			st.GoneLeft++
			return true
		}
		return false
	})
}

// FailuresShown caps the failure groups State returns: each queue keeps
// up to a thousand for a week, each with a message and a stack, which
// across 200 queues would make every poll of the page megabytes.
const FailuresShown = 50

// errorShown caps the message of a failure group in State.
const errorShown = 512

// serveFailure answers GET api/failure?queue=Q&func=F&kind=K&group=G with
// that failure group whole (inspect.FailureGroup: its last message in
// full, its stack), read from Redis: what the page shows when an operator
// opens a group; 404 if the queue has no such group (any more).
func (d *Dashboard) serveFailure(w http.ResponseWriter, r *http.Request) {
	if d.opts.Private && !d.authorized(r) {
		unauthorized(w, r, "reading a failure")
		return
	}
	q := r.URL.Query()
	queue := q.Get("queue")
	if err := keys.CheckQueue(queue); err != nil {
		http.Error(w, "dashboard: "+err.Error(), http.StatusBadRequest)
		return
	}
	if d.opts.Queue != "" && queue != d.opts.Queue {
		http.Error(w, "dashboard: no queue "+strconv.Quote(queue)+" here", http.StatusNotFound)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), d.opts.ReadTimeout)
	defer cancel()
	gs, _, err := d.in.Failures(ctx, queue)
	if err != nil {
		http.Error(w, "dashboard: reading Redis: "+err.Error(), http.StatusBadGateway)
		return
	}
	i := slices.IndexFunc(gs, func(g inspect.FailureGroup) bool {
		return g.Func == q.Get("func") && g.Kind == q.Get("kind") && g.Group == q.Get("group")
	})
	if i < 0 {
		http.Error(w, "dashboard: no such failure group in queue "+strconv.Quote(queue), http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(gs[i])
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
	qs, err := d.in.Queues(ctx)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.queues, d.scanned = qs, time.Now()
	d.mu.Unlock()
	return qs, nil
}

// order sorts what st shows: the busiest queues first (see State.Queues);
// per queue, live workers before gone ones; running batches (by queue)
// before ended ones, the newest ended first across queues; the failure
// groups seen last first.
func order(st *State) {
	slices.SortFunc(st.Queues, inspect.Busiest)
	slices.SortStableFunc(st.Failures, func(a, b inspect.FailureGroup) int { return b.Last.Compare(a.Last) })
	// Each queue's workers come from inspect live first, then by id: a
	// stable sort by queue keeps that.
	slices.SortStableFunc(st.Workers, func(a, b inspect.Worker) int { return cmp.Compare(a.Queue, b.Queue) })
	ended := func(b inspect.Batch) int {
		if b.Ended.IsZero() { // running, or a durable batch no manager holds
			return 0
		}
		return 1
	}
	slices.SortFunc(st.Pipelines, func(a, b inspect.Pipeline) int {
		ended := func(p inspect.Pipeline) int { return cmp.Compare(p.Ended.Unix(), time.Time{}.Unix()) } // 0 while running
		return cmp.Or(cmp.Compare(ended(a), ended(b)), b.Ended.Compare(a.Ended), cmp.Compare(a.Queue, b.Queue), a.Started.Compare(b.Started))
	})
	slices.SortFunc(st.Batches, func(a, b inspect.Batch) int {
		return cmp.Or(cmp.Compare(ended(a), ended(b)), b.Ended.Compare(a.Ended), cmp.Compare(a.Queue, b.Queue),
			cmp.Compare(a.Manager, b.Manager), cmp.Compare(a.ID, b.ID))
	})
}

// action wraps an action's handler: refused unless Options.Actions, unless
// the request carries the operator token, and unless it carries
// X-Redmap-Action and comes from the page's own origin (a cross-site form
// or fetch cannot: the header makes a browser ask first, and nothing here
// says yes).
func (d *Dashboard) action(f func(ctx context.Context, req actionRequest) (string, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !d.opts.Actions {
			http.Error(w, "dashboard: actions are off (start it with -actions)", http.StatusForbidden)
			return
		}
		if !d.authorized(r) {
			unauthorized(w, r, "an action")
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
	if req.Queue == "" || req.Worker == "" {
		return "", errors.New("drain needs a queue and a worker")
	}
	if err := d.in.Drain(ctx, req.Queue, req.Worker); err != nil {
		return "", err
	}
	return "draining worker " + req.Worker, nil
}

func (d *Dashboard) cancel(ctx context.Context, req actionRequest) (string, error) {
	if req.Queue == "" || req.Batch == "" {
		return "", errors.New("cancel needs a queue and a batch")
	}
	did, err := d.in.Cancel(ctx, req.Queue, req.Batch, false)
	switch {
	case err != nil:
		return "", err
	case did.Pipeline != nil:
		return "cancelling pipeline " + did.Pipeline.Pipeline + ": every stage ends", nil
	case did.Job != nil:
		for n, how := range did.Job.Batches {
			if how == "ended" {
				return "", fmt.Errorf("durable batch %q has ended: its results wait for the call that takes it over; redmap cancel -discard drops them", n)
			}
		}
		return "cancelled durable batch " + req.Batch + ": its tasks are withdrawn", nil
	}
	return "cancelling batch " + req.Batch + " at its manager's next poll", nil
}

func (d *Dashboard) pause(ctx context.Context, req actionRequest) (string, error) {
	if req.Queue == "" {
		return "", errors.New("pause needs a queue")
	}
	did, err := d.in.Pause(ctx, req.Queue, "the dashboard")
	if err != nil {
		return "", err
	}
	if !did {
		return "queue " + req.Queue + " was paused already", nil
	}
	return "paused queue " + req.Queue + ": its workers take nothing more until it is resumed", nil
}

func (d *Dashboard) resume(ctx context.Context, req actionRequest) (string, error) {
	if req.Queue == "" {
		return "", errors.New("resume needs a queue")
	}
	did, rung, err := d.in.Resume(ctx, req.Queue)
	if err != nil {
		return "", err
	}
	if !did {
		return "queue " + req.Queue + " was not paused", nil
	}
	return fmt.Sprintf("resumed queue %s: %d idle worker(s) woken", req.Queue, rung), nil
}

func (d *Dashboard) purge(ctx context.Context, req actionRequest) (string, error) {
	if req.Queue == "" {
		return "", errors.New("purge needs a queue")
	}
	if req.Confirm != req.Queue {
		return "", errors.New("purge needs the queue's name again, in confirm")
	}
	purged, dropped, err := d.in.Purge(ctx, req.Queue)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("dropped %d queued task id(s) from queue %s: %d task(s) failed in their batches", dropped, req.Queue, purged), nil
}
