package manager

import (
	"maps"
	"sync"
	"time"

	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/rdb"
)

// batch is the untyped face of a *Batch that the manager's parts deal with.
type batch interface {
	deliver(chunk int, r *codec.Result, err error)
	fail(chunk, attempt int, cause error)
	abort(err error)
	resubmission(chunk int) (t rdb.Task, wid string, lane rdb.Lane, err error)
	snapshot() Progress
	function() (name string, public bool)
	calls() string
	typesOf(name string) []string
	served(ok bool, now time.Time, timeout time.Duration, why string) (began, expired bool)
	failWaiting(cause error)
}

// registry lists the manager's running batches, for the keeper to publish
// to operators and the reaper to check that someone serves them.
type registry struct {
	mu       sync.Mutex
	running  map[string]batch // id → running batch
	finished map[string]ended // id → batch ended less than shownEnded ago
}

// ended is a batch that ended, and when.
type ended struct {
	batch
	at time.Time
}

// shownEnded is how long the keeper keeps publishing a batch that ended, as
// it ended: several Polls, so that a viewer that reads at its own pace (the
// dashboard, every 0.9 s) sees its outcome.
const shownEnded = 3 * time.Second

func newRegistry() *registry {
	return &registry{running: make(map[string]batch), finished: make(map[string]ended)}
}

// list records a running batch.
func (r *registry) list(id string, b batch) {
	r.mu.Lock()
	r.running[id] = b
	r.mu.Unlock()
}

// unlist forgets a batch that ended, after the next publish shows it as it
// ended.
func (r *registry) unlist(id string) {
	r.mu.Lock()
	if b, ok := r.running[id]; ok {
		r.finished[id] = ended{batch: b, at: time.Now()}
	}
	delete(r.running, id)
	r.mu.Unlock()
}

// batches returns the running batches.
func (r *registry) batches() map[string]batch {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.running)
}

// ended returns the batches that ended less than shownEnded before now,
// and forgets the others.
func (r *registry) ended(now time.Time) map[string]batch {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]batch, len(r.finished))
	for id, e := range r.finished {
		if now.Sub(e.at) > shownEnded {
			delete(r.finished, id)
			continue
		}
		out[id] = e.batch
	}
	return out
}
