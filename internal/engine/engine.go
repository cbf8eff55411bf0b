// Package engine is the execution engine behind redmap's handles: what a
// worker calls to run a task's elements (Run, Reduce) under a policy
// (attempts, timeout, retries, the batch's seed), and each handle's Runtime.
// Package redmap makes a Runtime with every handle it makes, which holds it
// (AnyHandle.Runtime); the manager and the worker reach it there. User code
// never needs this package.
package engine

import (
	"fmt"
	"strings"
	"time"

	"github.com/redmap/redmap/codec"
)

// Policy says how a worker runs each element of a task.
type Policy struct {
	Attempts int           // runs allowed per element; 0 or 1 for one run
	Timeout  time.Duration // per run; 0 for none
	Retry    bool          // retry any error or panic, not only Retryable errors
	// OnRetry, if not nil, is called before each retry of an element, with
	// its batch index, the attempt that failed and its failure.
	OnRetry func(index, attempt int, f *codec.Failure)
	Seed    uint64 // the batch's seed for redmap.Rand
	Start   int    // the batch index of the task's first element
	// Waits is how many times an element may wait for a RetryAfter and
	// run again without spending an attempt; past it, it fails with
	// codec.KindThrottled.
	Waits int
	// OnWait, if not nil, is called before each such wait, with the
	// element's batch index and the wait; it returns the wait to make
	// (the worker caps it, and tells the function's limit).
	OnWait func(index int, d time.Duration) time.Duration
	// Abandon, with a Timeout, is how long past its timeout a run that
	// has not returned (its function ignores its context) is waited for:
	// then it is abandoned, left running on its goroutine, and its element
	// fails with codec.KindTimeout at once, not retried. 0 waits for ever.
	// With it, the runs of a task under a timeout are made on a goroutine
	// of their own, one a task until a run is abandoned: two hand-offs a
	// run.
	Abandon time.Duration
	// OnAbandon, if not nil, is called when a run is abandoned, with its
	// element's batch index; the function it returns, if not nil, is
	// called when the abandoned run returns at last, if ever. It must not
	// block.
	OnAbandon func(index int) (returned func())
}

// DefaultWaits is Policy.Waits for a task that does not say
// (manager.DefaultMaxRetryAfter).
const DefaultWaits = 10

// Difference describes the first difference between two handles' structures
// (the lines of Runtime.Types): what one side has and the other lacks, or a
// path typed differently. "" if they are the same.
func Difference(mine, theirs []string, me, them string) string {
	split := func(l string) (string, string) { p, t, _ := strings.Cut(l, ": "); return p, t }
	paths := func(ls []string) map[string]string {
		m := make(map[string]string, len(ls))
		for _, l := range ls {
			p, t := split(l)
			m[p] = t
		}
		return m
	}
	mp, tp := paths(mine), paths(theirs)
	for _, l := range mine {
		p, t := split(l)
		switch other, ok := tp[p]; {
		case !ok:
			return fmt.Sprintf("%s has %s (%s), %s does not", me, p, t, them)
		case other != t:
			return fmt.Sprintf("%s is %s on %s, %s on %s", p, t, me, other, them)
		}
	}
	for _, l := range theirs {
		if p, t := split(l); mp[p] == "" {
			return fmt.Sprintf("%s has %s (%s), %s does not", them, p, t, me)
		}
	}
	return ""
}
