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
	resubmission(chunk int) (rdb.Task, string, error)
	snapshot() Progress
	function() (name string, public bool)
	served(ok bool, now time.Time, timeout time.Duration, why string) (began, expired bool)
	failWaiting(cause error)
}

// registry lists the manager's running batches, for the keeper to publish
// to operators and the reaper to check that someone serves them.
type registry struct {
	mu       sync.Mutex
	running  map[string]batch // id → running batch
	finished map[string]batch // id → batch ended since the last publish
}

func newRegistry() *registry {
	return &registry{running: make(map[string]batch), finished: make(map[string]batch)}
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
		r.finished[id] = b
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

// takeFinished returns the batches that ended since it was last called;
// putBack returns them, if publishing them failed.
func (r *registry) takeFinished() map[string]batch {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.finished
	r.finished = make(map[string]batch)
	return f
}

func (r *registry) putBack(finished map[string]batch) {
	r.mu.Lock()
	maps.Copy(r.finished, finished)
	r.mu.Unlock()
}
