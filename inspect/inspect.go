// Package inspect is redmap's read model for operators: the queues,
// workers, batches and failure groups under a key prefix, read from the
// records their writers keep in Redis (each worker's heartbeat, each
// manager's published progress, the workers' failure records), and the
// operators' actions on them (drain a worker, cancel a batch, purge a
// queue). The redmap CLI, the dashboard and an operator's own tools read
// through it; nothing it reports comes from what a viewer happened to see.
//
// An Inspector sends only reads, except for its actions. It lists the
// queues from their index (what managers and workers name as they publish
// and heartbeat), each queue's managers and workers from the queue's own
// records, and reads each queue in a few round trips: what it costs grows
// with what redmap keeps, never with the rest of the database. Only
// ScanQueues walks the keyspace (SCAN, never KEYS), when asked.
package inspect

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/redisbroker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/config"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/keys"
)

// Inspector reads the queues under one key prefix.
type Inspector struct {
	admin broker.Operator // what the tools ask of Redis
	log   *slog.Logger
}

// New returns an inspector of the queues under prefix on client; "" is
// redmap's default prefix. It sends no command.
func New(client redis.UniversalClient, prefix string) (*Inspector, error) {
	if client == nil {
		return nil, fmt.Errorf("inspect: nil Redis client")
	}
	return &Inspector{admin: redisbroker.NewAdmin(client, cmp.Or(prefix, config.DefaultPrefix)), log: slog.New(slog.DiscardHandler)}, nil
}

// WithLogger returns an inspector like i that logs to l what its readers
// skip: a queue whose records a scrape of MetricsHandler could not read.
// Without one, nothing is logged.
func (i *Inspector) WithLogger(l *slog.Logger) *Inspector {
	c := *i
	c.log = cmp.Or(l, i.log)
	return &c
}

// Queue is one queue.
type Queue struct {
	Name    string `json:"name"`
	Depth   int64  `json:"depth"`   // task ids waiting in its public lists, all shards
	Workers int    `json:"workers"` // live workers
	Running int64  `json:"running"` // tasks running on live workers
	Batches int    `json:"batches"` // running batches
	// Rate is elements ended per second over the last minute; Series the
	// same per Bucket seconds over the last 15 minutes, oldest first.
	Rate   float64   `json:"rate"`
	Series []float64 `json:"series"`
	Bucket int       `json:"bucket_seconds"`
	// Paused says since when an operator paused the queue (redmap pause):
	// its workers take nothing until it is resumed. Nil if it runs.
	Paused *Pause `json:"paused,omitempty"`
}

// Pause is an operator's pause of a queue.
type Pause struct {
	Since time.Time `json:"since"` // zero if its mark does not say
	By    string    `json:"by,omitempty"`
}

// Idle reports whether the queue has nothing to show but its name: not
// paused, no task queued or running, no batch running, and no element
// ended within the last 15 minutes (its Series is flat). The dashboard and redmap status
// fold such queues into one line.
func (q Queue) Idle() bool {
	return q.Paused == nil && q.Depth == 0 && q.Running == 0 && q.Batches == 0 && !slices.ContainsFunc(q.Series, func(v float64) bool { return v > 0 })
}

// Busiest orders queues the busiest first: by depth, then tasks running,
// then elements ended a second, then by name.
func Busiest(a, b Queue) int {
	return cmp.Or(cmp.Compare(b.Depth, a.Depth), cmp.Compare(b.Running, a.Running), cmp.Compare(b.Rate, a.Rate), strings.Compare(a.Name, b.Name))
}

// Worker is one worker, registered or gone lately, as its last heartbeat
// published it.
type Worker struct {
	Queue string `json:"queue"`
	ID    string `json:"id"`
	// State is one of:
	//   - "running": registered, its heartbeat on time, tasks in hand;
	//   - "idle": the same, holding no task;
	//   - "alone": the same, running a suspect alone (Alone says which and
	//     why), its other slots idle: a task lost twice with its workers,
	//     maybe a poison pill;
	//   - "draining": it takes no more tasks and exits once its own are
	//     reported (SIGTERM, redmap drain);
	//   - "late": registered, but its heartbeat is overdue (more than two
	//     heartbeats old): stopped, cut off, or dying; its lease has not
	//     lapsed yet;
	//   - "dead": its lease lapsed (by the Redis clock) without a clean
	//     stop: killed, or cut off for longer than its lease;
	//   - "stopped": it stopped cleanly (drained, or signalled) and retired.
	// A dead or stopped worker stays listed for GoneFor.
	State string `json:"state"`
	// Since is how long ago, in seconds, the worker entered its state,
	// where that is known: for "stopped" and "dead", since it retired or
	// its lease lapsed; for "late", since its heartbeat was due; for the
	// others, since its last heartbeat.
	Since        float64  `json:"since_seconds"`
	Live         bool     `json:"live"` // registered, lease not lapsed
	Host         string   `json:"host"`
	PID          int      `json:"pid"`
	HeartbeatAge float64  `json:"heartbeat_age_seconds"` // by the Redis clock
	Concurrency  int      `json:"concurrency"`
	Running      int64    `json:"running"` // tasks running
	Held         int64    `json:"held"`    // tasks held: running, prefetched or being reported
	Taken        int64    `json:"taken"`
	Delivered    int64    `json:"delivered"`
	Failed       int64    `json:"failed"`
	Functions    []string `json:"functions"`
	CacheHits    int64    `json:"cache_hits"`
	CacheBytes   int64    `json:"cache_bytes"`
	// Suspects counts the suspects it ran alone; Alone is the one it runs
	// alone now, and why ("" if none): of a dead worker, the one it ran
	// when it died, likely the poison pill that killed it.
	Suspects  int64  `json:"suspects"`
	Alone     string `json:"alone,omitempty"`
	AloneTask string `json:"alone_task,omitempty"` // that suspect's task id
	// Version is its program's build: an image build's stamp, the module's
	// version or its VCS revision ("" from a worker of an older build).
	Version string `json:"version,omitempty"`
	// Error is the worker's last failed Redis call, if it has not
	// recovered, or why its record could not be read.
	Error string `json:"error,omitempty"`
	// BackupRaces counts its tasks that got a backup task (a copy, run by
	// another worker, of a task it held far longer than its batch's
	// typical task), kept until a day passes with no race; Overtaken those whose backup's result
	// came first. Slow: it lost most of at least SlowRaces races, a worker
	// slower than its fleet (a noisy neighbour, a throttled machine).
	BackupRaces int64 `json:"backup_races,omitempty"`
	Overtaken   int64 `json:"overtaken,omitempty"`
	Slow        bool  `json:"slow,omitempty"`
}

// SlowRaces is how many backup races a worker must lose, and more than half
// of those it was in, to be named slow (Worker.Slow).
const SlowRaces = 2

// GoneFor is how long a worker that stopped or died stays listed.
const GoneFor = keys.GoneFor

// Batch is one batch: running, as its manager last published it, or ended,
// as the queue's history recorded it.
type Batch struct {
	Queue    string `json:"queue"`
	Manager  string `json:"manager"`
	ID       string `json:"id"`
	Func     string `json:"func"`
	Priority int    `json:"priority"`
	Total    int    `json:"total"`
	Done     int    `json:"done"`   // elements with a value: failed ones are not done
	Failed   int    `json:"failed"` // elements that failed; Total - Done - Failed have no outcome yet
	// FailedKeys are, in the batch of a pipeline's reduce stage, the keys
	// that failed in the steps after its fold. Such a batch's elements
	// are its partitions: Total, Done and Failed count them (a partition
	// failed: its reduce failed whole), its failed keys apart.
	FailedKeys int     `json:"failed_keys,omitempty"`
	Rate       float64 `json:"rate"`        // elements ended (done or failed) a second: recent, or over the whole batch once it ended
	ETA        float64 `json:"eta_seconds"` // 0 when unknown or done
	Worker     string  `json:"worker,omitempty"`
	// Waiting says why a running batch does not advance, as its manager
	// sees it (no live worker serves its function), or why its record could
	// not be read.
	Waiting string `json:"waiting,omitempty"`
	// Paused: the queue is paused (redmap pause), so the running batch
	// does not advance and has no ETA; Waiting says by whom, since when.
	Paused bool `json:"paused,omitempty"`
	// Outcome is "running", or how the batch ended, as its manager recorded
	// it: "done", "failed", "cancelled", "closed"; or "manager lost" when
	// its manager stopped publishing (killed, or cut off from Redis) and
	// someone noticed (a worker, the CLI, the dashboard): its counts are
	// then its last published progress. A durable batch (Durable) that no
	// manager holds is "orphaned" while some of its tasks are outstanding,
	// "done" once none is (its results wait in Redis for the call that
	// takes it over), its counts those its last holder published; one that
	// no manager took over within its DurableTTL ends "expired".
	Outcome string `json:"outcome"`
	// Durable is a durable batch's name (manager.Durable).
	Durable string `json:"durable,omitempty"`
	// Counts says what Total, Done and Failed of a durable batch no
	// manager holds are: "last published" (the progress its last holder
	// published), or "none published" (its holder died before it published
	// any: they are 0, and Func unknown). A batch held and published
	// since has none: its counts are its manager's now.
	Counts string `json:"counts,omitempty"`
	// FailedBy counts an ended batch's failed elements per cause ("error",
	// "panic", "lost", "timeout", "no worker", ...).
	FailedBy map[string]int `json:"failed_by,omitempty"`
	// Alone says, for each task of a running batch that a live worker
	// runs alone as a suspect (lost twice with its workers: maybe a poison
	// pill), which worker and why, as that worker published it.
	Alone []string `json:"alone,omitempty"`
	// Reason says why an ended batch ended early, if it did.
	Reason  string    `json:"reason,omitempty"`
	Started time.Time `json:"started,omitzero"`
	Ended   time.Time `json:"ended,omitzero"`
	// Call is what the call said of its batch by name (manager.Label, ...):
	// the fields this release knows (a later one's others are skipped).
	Call codec.CallInfo `json:"call,omitzero"`
	// Backups counts the batch's backup tasks (manager.Backups): copies
	// started of tasks held far longer than its typical task, races a
	// copy won, copies wasted.
	Backups wire.Backups `json:"backups,omitzero"`
}

// FailureGroup is the failed elements of one function, kind and group: the
// message's fingerprint, with numbers, ids, quoted strings and paths
// masked (the way error trackers group), so that "no such file
// /data/17.csv" and "no such file /data/18.csv" are one group. Every
// failed element is counted, retries included.
type FailureGroup struct {
	Queue string    `json:"queue"`
	Func  string    `json:"func"`
	Kind  string    `json:"kind"`
	Group string    `json:"group"` // the fingerprint
	Error string    `json:"error"` // one message of the group in full: the last one
	Count int64     `json:"count"`
	First time.Time `json:"first"`
	Last  time.Time `json:"last"`
	// Workers that saw it (up to 10).
	Workers     []string `json:"workers"`
	SampleTask  string   `json:"sample_task"`
	SampleStack string   `json:"sample_stack,omitempty"`
}

// Snapshot is one queue, its workers, batches and failure groups, read
// together.
type Snapshot struct {
	Time      time.Time // the Redis clock
	Queue     Queue
	Workers   []Worker
	Batches   []Batch // running, and durable ones not ended (Inspector.Batches)
	History   []Batch // ended, newest first (the last HistoryShown)
	Failures  []FailureGroup
	Malformed int     // failure groups that could not be read
	Limits    []Limit // the functions' fleet-wide limits
}

// Ping checks that Redis answers. One round trip.
func (i *Inspector) Ping(ctx context.Context) error { return i.admin.Ping(ctx) }

// Now returns the Redis clock. One round trip.
func (i *Inspector) Now(ctx context.Context) (time.Time, error) {
	ms, err := i.admin.Now(ctx)
	return time.UnixMilli(ms), err
}

// Queues lists the queues whose managers published progress or whose
// workers heartbeated within the last week (keys.QueueIndexAge), sorted; a
// sharded queue is listed once, under its name. One round trip, however
// many keys the database holds besides: it reads the index of queues that
// managers and workers keep, not the keyspace. A queue only a build older
// than the index wrote, and none has written since, is found by ScanQueues.
func (i *Inspector) Queues(ctx context.Context) ([]string, error) { return i.admin.Queues(ctx) }

// ScanQueues lists the queues that have any key under the prefix, by SCAN
// of the whole keyspace, and adds those it finds to the index of queues,
// so that Queues lists them from then on: once, after an upgrade from a
// build that kept no index, for queues no manager or worker of this build
// has written since (they name their queue within a minute). Its cost
// grows with every key of the database, redmap's or not. A user that may
// not write still gets the list (the index is left as it was).
func (i *Inspector) ScanQueues(ctx context.Context) ([]string, error) {
	qs, err := i.admin.ScanQueues(ctx)
	if err != nil && qs != nil && broker.Refused(err) {
		return qs, nil
	}
	return qs, err
}

// Workers returns the workers of queue, registered or gone within GoneFor,
// with their states (see Worker.State) by the Redis clock now: the live
// ones first, then by id.
func (i *Inspector) Workers(ctx context.Context, queue string, now time.Time) ([]Worker, error) {
	regs, err := i.admin.Workers(ctx, &broker.QueueParams{Queue: queue})
	if err != nil {
		return nil, err
	}
	gone, err := i.admin.Gone(ctx, &broker.GoneParams{Queue: queue, Since: now.Add(-GoneFor).UnixMilli()})
	if err != nil {
		return nil, err
	}
	nowMs := now.UnixMilli()
	out := make([]Worker, 0, len(regs)+len(gone))
	for _, r := range append(regs, gone...) {
		in := r.Info
		w := Worker{Queue: queue, ID: r.ID, Live: r.Deadline > nowMs,
			Host: in.Host, PID: in.PID, Concurrency: in.Concurrency, Running: in.Running, Held: r.Held,
			Taken: in.Taken, Delivered: in.Delivered, Failed: in.Failed, Functions: in.Functions,
			CacheHits: in.CacheHits, CacheBytes: in.CacheBytes, Suspects: in.Suspects, Alone: in.Alone, AloneTask: in.AloneTask, Version: in.Version, Error: in.Error}
		if w.Functions == nil {
			w.Functions = []string{}
		}
		w.BackupRaces, w.Overtaken = r.Races, r.Lost
		w.Slow = r.Lost >= SlowRaces && 2*r.Lost > r.Races
		w.State, w.Since, w.HeartbeatAge = stateOf(r, nowMs)
		if !w.Live {
			w.Running, w.Held = 0, 0
		}
		if r.Malformed != nil {
			w.Error = strings.TrimSpace(w.Error + " (unreadable record: " + r.Malformed.Error() + ")")
		}
		out = append(out, w)
	}
	slices.SortStableFunc(out, func(a, b Worker) int {
		return cmp.Or(cmp.Compare(rank(!a.Live), rank(!b.Live)), strings.Compare(a.ID, b.ID))
	})
	return out, nil
}

// stateOf returns a worker's state, how long it has been in it, and the age
// of its last heartbeat, in seconds, by the Redis clock nowMs.
func stateOf(r wire.Registered, nowMs int64) (state string, since, age float64) {
	in := r.Info
	secs := func(ms int64) float64 { return float64(max(ms, 0)) / 1000 }
	if !in.Gone.IsZero() && r.Deadline == 0 { // reaped, not back: stopped or dead, as reap.lua wrote
		return cmp.Or(in.State, "dead"), secs(nowMs - in.Gone.UnixMilli()), secs(nowMs - in.Gone.UnixMilli())
	}
	// The lease began at the last heartbeat, by the Redis clock.
	beat := r.Deadline - in.Lease.Milliseconds()
	age = secs(nowMs - beat)
	every := cmp.Or(in.Every, time.Second).Milliseconds()
	switch {
	case r.Deadline <= nowMs:
		return "dead", secs(nowMs - r.Deadline), age
	case in.State == "draining":
		return "draining", age, age
	case nowMs-beat > 2*every:
		return "late", secs(nowMs - beat - every), age
	}
	// How long it has been idle, or running: by its own count up to its
	// last heartbeat (BusyFor), and the heartbeat's age; an older build's
	// says nothing, and its heartbeat's age stands.
	since = age
	if busy := in.Running > 0; in.BusyFor > 0 && busy == (in.Running > 0 || r.Held > 0) {
		since = age + in.BusyFor.Seconds()
	}
	switch {
	case in.Running == 0 && r.Held == 0:
		return "idle", since, age
	case in.Alone != "":
		return "alone", since, age
	}
	return "running", since, age
}

// rank orders false before true.
func rank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Batches returns the running batches of queue, by id, and its durable
// batches that have not ended (see Batch.Outcome), from their claim on:
// one whose holder has published nothing yet, or died before it did, is
// listed from the queue's list of durable batches (Batch.Counts "none
// published"); a durable pipeline's claim is a row of it (Call.Pipeline,
// no Call.Stage), whose Func names its stages' functions. It first records the batches of managers that stopped
// publishing as "manager lost": a read model that notices a lost manager
// says so.
func (i *Inspector) Batches(ctx context.Context, queue string) ([]Batch, error) {
	return i.batches(ctx, queue, nil)
}

// batches is Batches with ws, the queue's workers if the caller read them
// (nil: read them if a batch is running).
func (i *Inspector) batches(ctx context.Context, queue string, ws []Worker) ([]Batch, error) {
	if _, err := i.admin.LoseManagers(ctx, &broker.QueueParams{Queue: queue}); err != nil && !broker.Refused(err) {
		return nil, err
	} // refused: a read-only user; the next reader that may write will
	pbs, err := i.admin.Batches(ctx, &broker.QueueParams{Queue: queue})
	if err != nil {
		return nil, err
	}
	out := make([]Batch, 0, len(pbs))
	for _, b := range pbs {
		p := b.Progress
		if b.Malformed != nil {
			p.Waiting = "unreadable progress: " + b.Malformed.Error()
		}
		out = append(out, Batch{Queue: queue, Manager: b.Manager, ID: b.ID, Func: p.Func,
			Priority: cmp.Or(p.Priority, keys.DefaultPriority), Total: p.Total, Done: succeeded(p.Done, p.Failed), Failed: p.Failed,
			FailedKeys: p.FailedKeys, Rate: p.Rate, ETA: p.ETA.Seconds(), Worker: p.Worker, Waiting: p.Waiting, Outcome: "running",
			Started: p.Started, Durable: p.Durable, Call: p.Call, Backups: p.Backups})
	}
	// A durable batch is listed from its claim on (the queue's list of
	// them), before its holder publishes any progress, and after its
	// progress expired, until it ends, is cancelled or expires.
	names, err := i.admin.DurableNames(ctx, &broker.QueueParams{Queue: queue})
	if err != nil {
		return nil, err
	}
	out = append(out, unpublished(queue, names, out)...)
	if err := i.durableStates(ctx, queue, out); err != nil {
		return nil, err
	}
	// A batch that ended a moment ago may still be in its manager's last
	// publish: the history says how it ended.
	ids := make([]string, len(out))
	for j, b := range out {
		ids[j] = b.ID
	}
	ended, err := i.admin.InHistory(ctx, &broker.InHistoryParams{Queue: queue, IDs: ids})
	if err != nil {
		return nil, err
	}
	out = slices.DeleteFunc(out, func(b Batch) bool { return ended[b.ID] })
	if err := i.ownFuncs(ctx, queue, out); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b Batch) int { return strings.Compare(a.ID, b.ID) })
	if len(out) > 0 && ws == nil {
		if ws, err = i.Workers(ctx, queue, time.Now()); err != nil {
			return nil, err
		}
	}
	suspects(out, ws)
	return out, i.pausedStates(ctx, queue, out)
}

// pausedStates says, of each running batch among bs whose manager gave no
// reason it waits, that it waits on the queue's pause (the record an
// operator's redmap pause wrote), with no ETA: nothing runs until a resume.
func (i *Inspector) pausedStates(ctx context.Context, queue string, bs []Batch) error {
	if len(bs) == 0 {
		return nil
	}
	p, err := i.admin.Paused(ctx, &broker.QueueParams{Queue: queue})
	if err != nil || p == nil {
		return err
	}
	why := "paused"
	if p.By != "" {
		why += " by " + p.By
	}
	if p.Since > 0 {
		why += " since " + time.UnixMilli(p.Since).UTC().Format(time.RFC3339)
	}
	why += ": its workers take no task until redmap resume"
	for j := range bs {
		if bs[j].Outcome == "running" && bs[j].Waiting == "" {
			bs[j].Waiting, bs[j].ETA, bs[j].Paused = why, 0, true
		}
	}
	return nil
}

// suspects sets Alone of each of bs (sorted by id) whose task a live
// worker of ws runs alone, as the workers' records say.
func suspects(bs []Batch, ws []Worker) {
	for _, w := range ws {
		if !w.Live || w.AloneTask == "" {
			continue
		}
		batch := id.BatchOf(w.AloneTask)
		if j, found := slices.BinarySearchFunc(bs, batch, func(b Batch, want string) int { return strings.Compare(b.ID, want) }); found {
			bs[j].Alone = append(bs[j].Alone, "worker "+w.ID+": "+w.Alone)
		}
	}
}

// durableStates sets the state of the durable batches among bs: held by a
// manager, running; else orphaned, or done if none of their tasks is
// outstanding (by their task sets, which workers keep).
func (i *Inspector) durableStates(ctx context.Context, queue string, bs []Batch) error {
	var owners []string
	for _, b := range bs {
		if b.Durable != "" {
			owners = append(owners, b.Manager)
		}
	}
	states, err := i.admin.DurableStates(ctx, &broker.DurableStatesParams{Queue: queue, Owners: owners})
	if err != nil {
		return err
	}
	held, outstanding, cancelled, late := states.Held, states.Outstanding, states.Cancelled, states.Late
	for j, b := range bs {
		ago, gone := late[b.Manager]
		if b.Durable == "" || held[b.Manager] && !gone && !cancelled[b.Manager] {
			continue
		}
		bs[j].Rate, bs[j].ETA = 0, 0
		bs[j].Counts = cmp.Or(b.Counts, "last published")
		n := outstanding[b.Manager]
		switch {
		case cancelled[b.Manager]:
			bs[j].Outcome = "cancelled"
			bs[j].Waiting = "cancelled by an operator: its tasks are withdrawn; the call that takes it over fails its elements with ErrCancelled"
		case gone:
			// Its claim lives out its lease, but its holder stopped
			// renewing it: killed, or cut off from Redis.
			bs[j].Outcome = "orphaned"
			bs[j].Waiting = fmt.Sprintf("its manager has not renewed its claim for %s: gone, or cut off; workers run its %d outstanding task(s) and keep their results; the same call takes it over once the claim lapses",
				ago.Round(100*time.Millisecond), n)
		case n > 0:
			bs[j].Outcome = "orphaned"
			bs[j].Waiting = fmt.Sprintf("no manager holds it; workers run its %d outstanding task(s) and keep their results; the same call takes it over", n)
		case bs[j].Counts == "none published":
			// Nothing says it ran to its end: its holder died before it
			// said anything of it, or between the phases of a pipeline.
			bs[j].Outcome = "orphaned"
			bs[j].Waiting = "no manager holds it, and none published its progress; the same call takes it over"
		default:
			bs[j].Outcome = "done"
			bs[j].Waiting = "no manager holds it; every task has its result in Redis, for the same call to collect"
		}
	}
	return nil
}

// unpublished returns a row for each durable batch of queue among names
// (owner id -> name, the queue's list of them) none of bs is of: its
// holder has not published its progress yet, or died before it did. A
// durable pipeline's claim ("<name>/pipeline") and the phases of a
// pipeline whose claim is listed ("<name>/<phase>") are rows of that
// pipeline (Call.Pipeline); the claim's has no Stage: it is the
// pipeline's own.
func unpublished(queue string, names map[string]string, bs []Batch) []Batch {
	seen := make(map[string]bool, len(bs))
	pipes := make(map[string]bool)
	for _, b := range bs {
		seen[b.Manager] = true
	}
	for _, n := range names {
		if p, ok := strings.CutSuffix(n, "/pipeline"); ok {
			pipes[p] = true
		}
	}
	var out []Batch
	for _, o := range slices.Sorted(maps.Keys(names)) {
		if seen[o] {
			continue
		}
		n := names[o]
		b := Batch{Queue: queue, Manager: o, ID: id.Batch(o, 1), Durable: n, Priority: keys.DefaultPriority, Outcome: "running",
			Counts: "none published", Waiting: "its manager has not published its progress yet"}
		if p, ok := strings.CutSuffix(n, "/pipeline"); ok {
			b.Call.Pipeline, b.Waiting = p, ""
		} else if p, _, ok := strings.Cut(n, "/"); ok && pipes[p] {
			b.Call.Pipeline = p
		}
		out = append(out, b)
	}
	return out
}

// succeeded returns the elements with a value, of ended (a record's
// "done": elements with an outcome, failed ones included) and failed.
func succeeded(ended, failed int) int { return max(ended-failed, 0) }

// HistoryShown is how many ended batches of a queue Snapshot reads.
const HistoryShown = 100

// History returns queue's ended batches, newest first, at most n (all the
// history keeps if n is 0 or less), and how many records could not be
// read. Managers write the history (see manager.Options.History).
func (i *Inspector) History(ctx context.Context, queue string, n int) ([]Batch, int, error) {
	got, err := i.admin.History(ctx, &broker.HistoryParams{Queue: queue, N: n})
	if err != nil {
		return nil, 0, err
	}
	recs, malformed := got.Records, got.Malformed
	out := make([]Batch, len(recs))
	for j, r := range recs {
		out[j] = Batch{Queue: queue, Manager: r.Manager, ID: r.ID, Func: r.Func,
			Priority: cmp.Or(r.Priority, keys.DefaultPriority), Total: r.Total, Done: succeeded(r.Done, r.Failed), Failed: r.Failed,
			FailedKeys: r.FailedKeys, Worker: r.Worker, Outcome: r.Outcome, FailedBy: r.FailedBy, Reason: r.Reason,
			Started: time.UnixMilli(r.Started), Ended: time.UnixMilli(r.Ended), Call: r.Call, Backups: r.Backups}
		if r.Started == 0 {
			out[j].Started = time.Time{}
		}
		if secs := out[j].Ended.Sub(out[j].Started).Seconds(); secs > 0 && r.Started != 0 {
			out[j].Rate = float64(r.Done) / secs
		}
	}
	return out, malformed, nil
}

// Failures returns queue's failure groups, most frequent first, and how
// many could not be read. One round trip.
func (i *Inspector) Failures(ctx context.Context, queue string) ([]FailureGroup, int, error) {
	got, err := i.admin.Failures(ctx, &broker.QueueParams{Queue: queue})
	if err != nil {
		return nil, 0, err
	}
	gs, malformed := got.Groups, got.Malformed
	out := make([]FailureGroup, len(gs))
	for j, g := range gs {
		out[j] = FailureGroup{Queue: queue, Func: g.Func, Kind: g.Kind, Group: g.Fingerprint, Error: g.Sample,
			Count: g.Count, First: time.UnixMilli(g.First), Last: time.UnixMilli(g.Last),
			Workers: strings.Split(g.Workers, ","), SampleTask: g.Task, SampleStack: g.Stack}
		if g.Workers == "" {
			out[j].Workers = []string{}
		}
	}
	return out, malformed, nil
}

// Snapshot reads queue: its depth and throughput, workers, batches,
// failure groups and limits.
func (i *Inspector) Snapshot(ctx context.Context, queue string) (Snapshot, error) {
	now, err := i.Now(ctx)
	if err != nil {
		return Snapshot{}, err
	}
	return i.snapshot(ctx, queue, now, true, always)
}

// always and never say whether snapshot reads a queue's failure groups.
func always(Queue) bool { return true }
func never(Queue) bool  { return false }

// snapshot is Snapshot at the Redis clock's now; it reads the queue's
// history only if history, its failure groups only if failures says so of
// the queue read.
func (i *Inspector) snapshot(ctx context.Context, queue string, now time.Time, history bool, failures func(Queue) bool) (s Snapshot, err error) {
	s = Snapshot{Time: now, Queue: Queue{Name: queue, Bucket: int(keys.ThroughputBucket / time.Second)}}
	if s.Queue.Depth, err = i.admin.Depth(ctx, &broker.QueueParams{Queue: queue}); err != nil {
		return s, err
	}
	p, err := i.admin.Paused(ctx, &broker.QueueParams{Queue: queue})
	if err != nil {
		return s, err
	}
	if p != nil {
		s.Queue.Paused = &Pause{By: p.By}
		if p.Since > 0 {
			s.Queue.Paused.Since = time.UnixMilli(p.Since)
		}
	}
	tp, err := i.admin.Throughput(ctx, &broker.ThroughputParams{Queue: queue, Now: now, Span: 15 * time.Minute})
	if err != nil {
		return s, err
	}
	s.Queue.Series = make([]float64, len(tp))
	for j, n := range tp {
		s.Queue.Series[j] = float64(n) / float64(s.Queue.Bucket)
	}
	s.Queue.Rate = recentRate(tp, now.UnixMilli())
	if s.Workers, err = i.Workers(ctx, queue, now); err != nil {
		return s, err
	}
	for _, w := range s.Workers {
		if w.Live {
			s.Queue.Workers++
			s.Queue.Running += w.Running
		}
	}
	if s.Batches, err = i.batches(ctx, queue, s.Workers); err != nil {
		return s, err
	}
	s.Queue.Batches = len(s.Batches)
	if history {
		if s.History, _, err = i.History(ctx, queue, HistoryShown); err != nil {
			return s, err
		}
	}
	if failures(s.Queue) {
		if s.Failures, s.Malformed, err = i.Failures(ctx, queue); err != nil {
			return s, err
		}
	}
	s.Limits, err = i.Limits(ctx, queue)
	return s, err
}

// readers is how many queues Snapshots and a scrape of Collector read at
// once: each queue is a few round trips one after another, so a thousand
// queues read one at a time would take a thousand times that.
const readers = 8

// eachQueue calls read with each of qs and its index, up to readers at
// once, and returns when every call has.
func eachQueue(qs []string, read func(j int, q string)) {
	var wg sync.WaitGroup
	turns := make(chan struct{}, readers)
	for j, q := range qs {
		wg.Add(1)
		turns <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-turns }()
			read(j, q)
		}()
	}
	wg.Wait()
}

// Snapshots reads each of queues as Snapshot does, up to 8 at once, at one
// reading of the Redis clock: snaps[j] is queues[j]'s, or errs[j] says why
// it could not be read.
func (i *Inspector) Snapshots(ctx context.Context, queues []string) (snaps []Snapshot, errs []error) {
	return i.snapshots(ctx, queues, true, always)
}

// Busy is Snapshots that reads the failure groups of the busy queues only:
// an idle one's (Queue.Idle) are left empty, a round trip and up to a
// thousand failure groups fewer. What a view of many queues, most of them
// idle, reads once a second.
func (i *Inspector) Busy(ctx context.Context, queues []string) (snaps []Snapshot, errs []error) {
	return i.snapshots(ctx, queues, true, func(q Queue) bool { return !q.Idle() })
}

// Statuses is Snapshots without each queue's history and failure groups
// (History, Failures and Malformed are empty): what a status of many
// queues shows, in two round trips a queue fewer.
func (i *Inspector) Statuses(ctx context.Context, queues []string) (snaps []Snapshot, errs []error) {
	return i.snapshots(ctx, queues, false, never)
}

func (i *Inspector) snapshots(ctx context.Context, queues []string, history bool, failures func(Queue) bool) (snaps []Snapshot, errs []error) {
	snaps, errs = make([]Snapshot, len(queues)), make([]error, len(queues))
	now, err := i.Now(ctx)
	if err != nil {
		for j := range errs {
			errs[j] = err
		}
		return snaps, errs
	}
	eachQueue(queues, func(j int, q string) { snaps[j], errs[j] = i.snapshot(ctx, q, now, history, failures) })
	return snaps, errs
}

// recentRate returns elements per second over the last minute of the
// counters tp (the last one is the current bucket, nowMs into it): the
// current bucket so far, the whole ones before it, and of the bucket the
// minute began in, the share of its count the minute covers, over exactly
// 60 s. For a queue whose first counted element ended within that minute,
// it is the rate since the start of that element's bucket: a queue that
// began 5 s ago shows its rate, not a twelfth of it, while a burst after a
// quiet spell counts over the whole minute.
func recentRate(tp []int64, nowMs int64) float64 {
	bucketMs := keys.ThroughputBucket.Milliseconds()
	per := int(time.Minute.Milliseconds() / bucketMs) // buckets a minute spans, the current one's share aside
	first := slices.IndexFunc(tp, func(n int64) bool { return n > 0 })
	if first < 0 {
		return 0
	}
	cur := len(tp) - 1
	into := nowMs%bucketMs + 1 // ms of the current bucket so far
	if first > cur-per {       // a young queue: since its first bucket
		var sum int64
		for _, n := range tp[first:] {
			sum += n
		}
		ms := int64(cur-first)*bucketMs + into
		return float64(sum) / (float64(max(ms, 1000)) / 1000)
	}
	sum := 0.0
	for _, n := range tp[cur-per+1:] {
		sum += float64(n)
	}
	sum += float64(tp[cur-per]) * float64(bucketMs-into) / float64(bucketMs)
	return sum / time.Minute.Seconds()
}

// Drain asks worker wid of queue to take no more tasks, finish what it
// holds and exit: it learns of it at its next heartbeat.
func (i *Inspector) Drain(ctx context.Context, queue, wid string) error {
	return i.admin.Drain(ctx, &broker.DrainParams{Queue: queue, Worker: wid})
}

// Pause stops the taking of queue's tasks (redmap pause): its workers
// finish what they hold and take nothing more, idle, until Resume; its
// batches wait, and their managers say so. by says who paused it, for the
// record. It reports whether the queue was running until now.
func (i *Inspector) Pause(ctx context.Context, queue, by string) (bool, error) {
	return i.admin.Pause(ctx, &broker.PauseParams{Queue: queue, By: by})
}

// Resume lets queue's workers take its tasks again (redmap resume), at
// once. It reports whether the queue was paused, and how many idle workers
// it woke.
func (i *Inspector) Resume(ctx context.Context, queue string) (bool, int64, error) {
	got, err := i.admin.Resume(ctx, &broker.QueueParams{Queue: queue})
	if err != nil {
		return false, 0, err
	}
	return got.Paused, got.Rang, nil
}

// Purge removes every task waiting in queue's public lists, all shards;
// their managers fail them with ErrLost. It returns how many were purged,
// and how many ids it dropped whose task was gone already.
func (i *Inspector) Purge(ctx context.Context, queue string) (purged, dropped int, err error) {
	got, err := i.admin.Purge(ctx, &broker.QueueParams{Queue: queue})
	if got != nil {
		purged, dropped = got.Purged, got.Dropped
	}
	return purged, dropped, err
}

// Queued returns how many tasks wait in queue's public lists, all shards.
func (i *Inspector) Queued(ctx context.Context, queue string) (int64, error) {
	return i.admin.Queued(ctx, &broker.QueueParams{Queue: queue})
}
