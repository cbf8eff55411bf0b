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

// down records a failed call; it reports whether this began an outage.
func (o *outage) down() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.since.IsZero() {
		o.since = time.Now()
		return true
	}
	return false
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
