package worker

import (
	"sync"
	"time"

	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/rdb"
)

// maxPendingFailures caps the failure records a worker keeps between
// heartbeats; past it, it counts them but drops the records.
const maxPendingFailures = 100

// failureLog keeps records of failed elements until the maintainer writes
// them to Redis, off the hot path.
type failureLog struct {
	mu   sync.Mutex
	recs []rdb.FailureRecord
}

// note keeps records of task tid's failed elements (function fn) run by
// worker wid.
func (l *failureLog) note(wid, fn, tid string, fails []codec.Failure) {
	now := time.Now().UTC()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range fails {
		if len(l.recs) >= maxPendingFailures {
			return
		}
		l.recs = append(l.recs, rdb.FailureRecord{Time: now, Worker: wid, Task: tid, Func: fn,
			Index: f.Index, Kind: f.Kind.String(), Error: f.Msg, Stack: f.Stack})
	}
}

// take returns the records kept, and forgets them.
func (l *failureLog) take() []rdb.FailureRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.recs
	l.recs = nil
	return out
}
