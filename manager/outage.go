package manager

import (
	"sync"
	"time"
)

// outage tracks how long Redis has been unreachable (or failing over), as
// every call of the manager sees it: the collector's reads and the feeders'
// submits share one clock, so a batch ends RedisTimeout after Redis went
// away, not one RedisTimeout per window.
type outage struct {
	mu    sync.Mutex
	since time.Time // zero while Redis answers
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

// up records a call that Redis answered.
func (o *outage) up() {
	o.mu.Lock()
	o.since = time.Time{}
	o.mu.Unlock()
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
