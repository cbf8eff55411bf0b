package manager

import "time"

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
	p := Progress{Func: b.fn, Total: b.feed.n, Done: b.feed.n - b.feed.left, Failed: len(b.outs.errs), Started: b.started, Worker: b.worker, Waiting: b.state.waiting, Priority: b.priority}
	b.mu.Unlock()
	if secs := time.Since(p.Started).Seconds(); secs > 0 {
		p.Rate = float64(p.Done) / secs
	}
	if p.Rate > 0 && p.Done < p.Total {
		p.ETA = time.Duration(float64(p.Total-p.Done) / p.Rate * float64(time.Second))
	}
	return p
}
