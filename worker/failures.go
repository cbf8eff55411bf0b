package worker

import (
	"encoding/json"
	"time"

	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/rdb"
)

// maxPendingFailures caps the failure records a worker keeps between
// heartbeats; past it, it counts them but drops the records.
const maxPendingFailures = 100

// noteFailures keeps records of a task's failed elements, to be written to
// Redis with the next heartbeat, off the hot path.
func (w *Worker) noteFailures(fn, tid string, fails []codec.Failure) {
	now := time.Now().UTC()
	w.failMu.Lock()
	defer w.failMu.Unlock()
	for _, f := range fails {
		if len(w.failures) >= maxPendingFailures {
			return
		}
		b, _ := json.Marshal(rdb.FailureRecord{Time: now, Worker: w.opts.ID, Task: tid, Func: fn,
			Index: f.Index, Kind: f.Kind.String(), Error: f.Msg, Stack: f.Stack})
		w.failures = append(w.failures, string(b))
	}
}

func (w *Worker) takeFailures() []string {
	w.failMu.Lock()
	defer w.failMu.Unlock()
	out := w.failures
	w.failures = nil
	return out
}
