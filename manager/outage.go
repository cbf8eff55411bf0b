package manager

import (
	"sync"
	"time"
)

// outage tracks how long Redis has been unreachable (or failing over), as
// every call of the manager sees it: the collector's reads and the feeders'
// submits share one clock, so a batch ends RedisTimeout after Redis went
// away, not one RedisTimeout per window.
//
// A call that timed out while Redis answers (a slow link, a pool busy with
// other callers) is not an outage: it starts a clock of its own, stalled,
// which only a call that completes stops, so that a link too slow for even
// the smallest call still ends the shard's batches after RedisTimeout.
type outage struct {
	mu       sync.Mutex
	since    time.Time // zero while Redis answers
	stalled  time.Time // the first slow call since the last that completed; zero if none
	answered time.Time // when a call last completed
}

// down records a call, begun at started, that failed because Redis could
// not be reached: the outage began when that call did, since go-redis may
// spend seconds retrying before it gives up.
func (o *outage) down(started time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.since.IsZero() || started.Before(o.since) {
		o.since = started
	}
}

// slow records a call, begun at started, that timed out while Redis
// answered.
func (o *outage) slow(started time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.stalled.IsZero() || started.Before(o.stalled) {
		o.stalled = started
	}
}

// up records a call that Redis answered.
func (o *outage) up() {
	o.mu.Lock()
	o.since, o.stalled = time.Time{}, time.Time{}
	o.answered = time.Now()
	o.mu.Unlock()
}

// answeredSince reports whether a call completed after t.
func (o *outage) answeredSince(t time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.answered.After(t)
}

// length returns how long the current outage has lasted; 0 if none.
func (o *outage) length() time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.since.IsZero() {
		return 0
	}
	return time.Since(o.since)
}

// stall returns how long calls have timed out while Redis answered, with
// none completing; 0 if none.
func (o *outage) stall() time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.stalled.IsZero() {
		return 0
	}
	return time.Since(o.stalled)
}
