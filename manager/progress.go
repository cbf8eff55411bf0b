package manager

import (
	"context"
	"fmt"
	"time"

	"github.com/redmap/redmap/internal/rdb"
)

// Progress is how far a batch has got.
type Progress struct {
	Func     string        `json:"func"`               // the function's registered name
	Total    int           `json:"total"`              // elements
	Done     int           `json:"done"`               // elements with a result, failed ones included
	Failed   int           `json:"failed"`             // elements that failed
	Rate     float64       `json:"rate"`               // elements per second since the batch started
	ETA      time.Duration `json:"eta"`                // at that rate; 0 when done or unknown
	Started  time.Time     `json:"started"`            // when Submit was called
	Worker   string        `json:"worker,omitempty"`   // the private queue's worker, or "" for the public queue
	Waiting  string        `json:"waiting,omitempty"`  // why the batch is not advancing, if the manager knows: no live worker serves its function
	Priority int           `json:"priority,omitempty"` // its tasks' priority (Priority), 1 to 5
}

// Progress returns how far the batch has got. It costs no round trip.
func (b *Batch[Out]) Progress() Progress {
	b.mu.Lock()
	p := Progress{Func: b.fn, Total: b.n, Done: b.n - b.left, Failed: len(b.errs), Started: b.started, Worker: b.worker, Waiting: b.waiting, Priority: b.priority}
	b.mu.Unlock()
	if secs := time.Since(p.Started).Seconds(); secs > 0 {
		p.Rate = float64(p.Done) / secs
	}
	if p.Rate > 0 && p.Done < p.Total {
		p.ETA = time.Duration(float64(p.Total-p.Done) / p.Rate * float64(time.Second))
	}
	return p
}

// publishBatches writes the progress of the manager's running batches to
// Redis for operators (redmap batches), replacing what it wrote last time.
func (m *Manager) publishBatches(ctx context.Context) {
	m.mu.Lock()
	running := make(map[string]batch, len(m.batches))
	for id, b := range m.batches {
		running[id] = b
	}
	finished := m.finished
	m.finished = make(map[string]batch)
	m.mu.Unlock()
	published := make(map[string]rdb.BatchProgress, len(running)+len(finished))
	for id, b := range running {
		published[id] = rdb.BatchProgress(b.snapshot())
	}
	// A batch that ended since the last publish is shown once more, as it
	// ended, so operators see its outcome rather than its last progress.
	for id, b := range finished {
		published[id] = rdb.BatchProgress(b.snapshot())
	}
	// Elements ended since the last publish feed the queue's throughput
	// counters (redmap dashboard), whatever batch they were of.
	ended := m.ended.Load()
	cancels, err := m.rdb.PublishBatches(ctx, m.id, published, m.opts.KeyTTL, ended-m.endedSaid)
	if err != nil {
		m.mu.Lock()
		for id, b := range finished {
			m.finished[id] = b // shown next time
		}
		m.mu.Unlock()
	}
	switch {
	case err == nil:
		m.endedSaid = ended
	case ctx.Err() != nil:
		m.log.Debug("stopped while publishing batch progress", "err", err)
	case rdb.Refused(err):
		m.log.Error("publishing batch progress for operators refused", "err", err)
	default:
		m.log.Warn("publishing batch progress failed", "err", err)
	}
	for _, id := range cancels {
		if b, ok := running[id]; ok {
			m.log.Warn("an operator cancelled a batch", "batch", id)
			b.abort(fmt.Errorf("%w: by an operator (redmap dashboard)", context.Canceled))
		}
	}
}
