package manager

import "time"

// outcome is how a batch stands apart from its elements: why it ended
// early, if it did, and why it does not advance, if it waits; its final
// record and Progress read it. Its batch's mu guards it.
type outcome struct {
	err      error     // why the batch ended early, if it did
	waiting  string    // why the batch does not advance (no live worker serves it), or ""
	unserved time.Time // since when no live worker serves it, or zero
	stopped  error     // set when the waiting elements were failed: the feeder fails the rest
	left     bool      // it ended early leaving its tasks in Redis (a durable batch: see Batch.abort)
}

// served records whether, at now, some live worker serves the batch's
// function; why says what it means if none does (kept as Progress.Waiting,
// the latest reason). It reports whether the batch just began to wait, and
// whether it has waited past timeout (never, if timeout is negative).
func (o *outcome) served(ok bool, now time.Time, timeout time.Duration, why string) (began, expired bool) {
	if ok {
		o.unserved, o.waiting = time.Time{}, ""
		return false, false
	}
	if o.unserved.IsZero() {
		o.unserved = now
		began = true
	}
	// The latest reason: it grows more precise as the manager learns more
	// (a worker's types, published after its start, say which field
	// differs).
	o.waiting = why
	return began, timeout >= 0 && now.Sub(o.unserved) >= timeout
}
