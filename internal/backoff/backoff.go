// Package backoff is the one retry delay of redmap's loops: exponential from
// 50 ms, capped, with ±20% jitter, so that a fleet which lost Redis at the
// same instant does not reconnect in lockstep.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Defaults of a zero Backoff.
const (
	DefaultMin = 50 * time.Millisecond
	DefaultMax = 2 * time.Second
)

// Backoff is the state of one retry loop. The zero value starts at
// DefaultMin and doubles to DefaultMax. Not safe for concurrent use.
type Backoff struct {
	Min, Max time.Duration // 0: the defaults
	d        time.Duration
}

// Reset starts the delays over, after a success.
func (b *Backoff) Reset() { b.d = 0 }

// Next returns the next delay: the previous one doubled (the first is Min),
// capped at Max, then jittered by up to ±20%.
func (b *Backoff) Next() time.Duration {
	lo, hi := b.Min, b.Max
	if lo <= 0 {
		lo = DefaultMin
	}
	if hi <= 0 {
		hi = DefaultMax
	}
	b.d = min(max(2*b.d, lo), hi)
	return time.Duration(float64(b.d) * (0.8 + 0.4*rand.Float64()))
}

// Wait sleeps for the next delay; it returns false if ctx ended first.
func (b *Backoff) Wait(ctx context.Context) bool { return Sleep(ctx, b.Next()) }

// Sleep waits d, or until ctx ends; it reports whether d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
