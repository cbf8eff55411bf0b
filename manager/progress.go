package manager

import (
	"time"

	"github.com/redmap/redmap/internal/broker/wire"
)

// Progress is how far a batch has got.
type Progress struct {
	Func   string `json:"func"`   // the function's registered name
	Total  int    `json:"total"`  // elements
	Done   int    `json:"done"`   // elements with a result, failed ones included
	Failed int    `json:"failed"` // elements that failed
	// FailedKeys are, in a pipeline's reduce stage (whose elements are its
	// partitions), the keys that failed in the steps after the fold.
	FailedKeys int           `json:"failed_keys,omitempty"`
	Rate       float64       `json:"rate"`               // elements per second over about the last rateWindow (since the start, if younger)
	ETA        time.Duration `json:"eta"`                // at that rate; 0 when done or unknown
	Started    time.Time     `json:"started"`            // when Submit was called (a durable batch taken over: the call that first submitted it)
	Worker     string        `json:"worker,omitempty"`   // the private queue's worker, or "" for the public queue
	Waiting    string        `json:"waiting,omitempty"`  // why the batch is not advancing, if the manager knows: no live worker serves its function
	Priority   int           `json:"priority,omitempty"` // its tasks' priority (Priority), 1 to 5
	Backups    wire.Backups  `json:"backups,omitzero"`   // its backup tasks: started, won, wasted (Backups)
}

// rateWindow is about how far back Progress's rate looks: recent enough
// that a slow start (workers starting, a constant fetched) does not skew
// the ETA for long, long enough to smooth one Poll's steps.
const rateWindow = 10 * time.Second

// rateSample is how many elements had ended at a moment.
type rateSample struct {
	at   time.Time
	done int
}

// recentRate returns the elements a second over about the last rateWindow
// (since the start if the batch is younger), and keeps the samples it
// needs: b.mu must be held.
func (b *Batch[Out]) recentRate(now time.Time, done int) float64 {
	// A sample a hundredth of the window at most: a caller that asks in a
	// tight loop does not grow the list.
	if n := len(b.samples); n == 0 || now.Sub(b.samples[n-1].at) >= rateWindow/100 {
		b.samples = append(b.samples, rateSample{now, done})
	}
	// Keep one sample at least rateWindow old, as the base, and those after it.
	for len(b.samples) > 2 && now.Sub(b.samples[1].at) >= rateWindow {
		b.samples = b.samples[1:]
	}
	base := rateSample{b.started, 0}
	if now.Sub(b.samples[0].at) >= rateWindow {
		base = b.samples[0]
	}
	if secs := now.Sub(base.at).Seconds(); secs > 0 {
		return float64(done-base.done) / secs
	}
	return 0
}

// Progress returns how far the batch has got. It costs no round trip.
func (b *Batch[Out]) Progress() Progress {
	now := time.Now()
	b.mu.Lock()
	p := Progress{Func: b.fn, Total: b.feed.n, Done: b.feed.n - b.feed.left, Failed: b.outs.failed(), FailedKeys: b.outs.keyFails, Started: b.firstStarted(), Worker: b.worker, Waiting: b.state.waiting, Priority: b.priority, Backups: b.bk.counts}
	p.Rate = b.recentRate(now, p.Done)
	b.mu.Unlock()
	if p.Rate > 0 && p.Done < p.Total {
		p.ETA = time.Duration(float64(p.Total-p.Done) / p.Rate * float64(time.Second))
	}
	return p
}

// published is the batch's progress as operators read it (the keeper
// publishes it), from which its history record is made
// (wire.BatchProgress.Record).
func (b *Batch[Out]) published() wire.BatchProgress {
	p := b.Progress()
	return wire.BatchProgress{Func: p.Func, Total: p.Total, Done: p.Done, Failed: p.Failed, FailedKeys: p.FailedKeys, Rate: p.Rate, ETA: p.ETA,
		Started: p.Started, Worker: p.Worker, Waiting: p.Waiting, Priority: p.Priority, StartedMs: p.Started.UnixMilli(),
		Call: b.call, Backups: p.Backups}
}
