package manager

import (
	"maps"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
)

// batch is the untyped face of a *Batch that the manager's parts deal with.
type batch interface {
	deliver(chunk int, r *codec.Result, err error)
	fail(chunk, attempt int, cause error)
	abort(err error)
	cancel(err error)
	resubmission(chunk int) (t wire.Task, wid string, lane wire.Lane, err error)
	place() (wid string, lane wire.Lane)
	Progress() Progress
	published() wire.BatchProgress
	function() (name string, public bool)
	calls() string
	typesOf(name string) []string
	served(ok bool, now time.Time, timeout time.Duration, why string) (began, expired bool)
	failWaiting(cause error)
	event(name string, attrs ...attribute.KeyValue) // on the batch's span
	// dueBackups and backupsQueued are its backup tasks' (backup.go).
	dueBackups(now time.Time, shards int) []string
	backupsQueued(got []broker.Backup)
}

// registry lists the manager's running batches, for the keeper to publish
// to operators and the reaper to check that someone serves them.
type registry struct {
	mu      sync.Mutex
	running map[string]batch // id → running batch
}

func newRegistry() *registry {
	return &registry{running: make(map[string]batch)}
}

// list records a running batch.
func (r *registry) list(id string, b batch) {
	r.mu.Lock()
	r.running[id] = b
	r.mu.Unlock()
}

// unlist forgets a batch that ended (its record goes to the queue's
// history).
func (r *registry) unlist(id string) {
	r.mu.Lock()
	delete(r.running, id)
	r.mu.Unlock()
}

// get returns running batch id.
func (r *registry) get(id string) (batch, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.running[id]
	return b, ok
}

// batches returns the running batches.
func (r *registry) batches() map[string]batch {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.running)
}
