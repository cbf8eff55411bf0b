package redmap

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redmap/redmap/internal/engine"
	"github.com/redmap/redmap/internal/failure"
)

// Limit is a fleet-wide limit on a function, for one that calls a service
// that rations it (an API at 50 requests/s, a database that takes 8
// connections): whatever manager, batch or worker runs it, the queue's
// workers together start at most Rate elements per Per, with bursts of at
// most Burst, and run at most Concurrency at once. It is enforced in Redis,
// in the same step as a take: a worker takes a task of the function only
// when the limit has room for it. Declare it with the function (Func's and
// FuncWith's options); an operator may set another at run time (redmap
// limit), which wins while it is set.
//
// The zero value is no limit. A limit needs Rate or Concurrency (or both).
type Limit struct {
	// Rate is how many elements may start per Per; 0 for no rate limit.
	Rate float64
	// Per is the rate's interval; 0 means a second.
	Per time.Duration
	// Burst is how many elements may start at once after a quiet spell (the
	// bucket's size); 0 means a tenth of Per's worth of Rate, at least 1.
	// A batch of the function is cut into tasks of at most Burst elements.
	Burst int
	// Concurrency is how many elements may run at once across the fleet; 0
	// for no cap. A task's elements run one after another, so it counts
	// one while a worker holds it (from its take to its result, or until
	// the worker's lease lapses if the worker dies).
	Concurrency int
}

// DefaultPer is the interval of a Limit's Rate when Per is 0.
const DefaultPer = time.Second

// IsZero reports whether l is no limit.
func (l Limit) IsZero() bool { return l.Rate == 0 && l.Concurrency == 0 }

// Normal returns l with its defaults filled in: Per 1 s, Burst a tenth of a
// Per's worth of Rate (at least 1) if it has a rate; the zero Limit for one
// that is no limit.
func (l Limit) Normal() Limit {
	if l.IsZero() {
		return Limit{}
	}
	if l.Rate == 0 {
		return Limit{Concurrency: l.Concurrency}
	}
	if l.Per == 0 {
		l.Per = DefaultPer
	}
	if l.Burst == 0 {
		l.Burst = max(1, int(math.Ceil(l.Rate/10)))
	}
	return l
}

// Validate reports a limit that cannot be enforced: a negative or
// non-finite field, a Per below a millisecond, a rate above a million a
// second, or one without Rate or Concurrency that sets Per or Burst.
func (l Limit) Validate() error {
	switch {
	case math.IsNaN(l.Rate) || math.IsInf(l.Rate, 0) || l.Rate < 0:
		return fmt.Errorf("redmap: limit: rate %v is not a number of elements ≥ 0", l.Rate)
	case l.Per < 0 || l.Per > 0 && l.Per < time.Millisecond:
		return fmt.Errorf("redmap: limit: per %v is below a millisecond", l.Per)
	case l.Burst < 0 || l.Burst > 1<<20:
		return fmt.Errorf("redmap: limit: burst %d is not in 0..%d", l.Burst, 1<<20)
	case l.Concurrency < 0 || l.Concurrency > 1<<20:
		return fmt.Errorf("redmap: limit: concurrency %d is not in 0..%d", l.Concurrency, 1<<20)
	case l.Rate == 0 && (l.Per != 0 || l.Burst != 0):
		return errors.New("redmap: limit: per and burst need a rate")
	}
	if n := l.Normal(); n.Rate > 0 && float64(time.Second)*n.Rate/float64(n.Per) > 1e6 {
		return fmt.Errorf("redmap: limit: rate %v per %v is above a million a second", l.Rate, n.Per)
	}
	return nil
}

// String returns l as operators read it: "50/1s burst 10, 8 at once", or
// "none".
func (l Limit) String() string {
	l = l.Normal()
	var parts []string
	if l.Rate > 0 {
		parts = append(parts, fmt.Sprintf("%s/%v burst %d", strconv.FormatFloat(l.Rate, 'g', -1, 64), l.Per, l.Burst))
	}
	if l.Concurrency > 0 {
		parts = append(parts, fmt.Sprintf("%d at once", l.Concurrency))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// Option is an option of a function's handle (Func, FuncWith, Emit): a
// Limit, or Idempotent.
type Option interface {
	apply(*handleOptions)
}

// handleOptions is what a handle's options set.
type handleOptions struct {
	limit      Limit
	idempotent bool // see Idempotent
}

func (l Limit) apply(o *handleOptions) { o.limit = l }

// options applies opts, the last of a kind winning.
func options(opts []Option) handleOptions {
	var o handleOptions
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&o)
		}
	}
	return o
}

// ErrThrottled is the cause of an element whose function kept answering
// RetryAfter past the batch's bound (manager.MaxRetryAfter).
var ErrThrottled = failure.ErrThrottled

// RetryAfter marks err as a refusal by a rationed service that says when to
// come back (an HTTP 429 or 503 with its Retry-After): returned by a
// function, its element waits d on the worker and runs again without
// spending an attempt, up to the batch's bound (manager.MaxRetryAfter,
// then it fails with ErrThrottled). If the function has a rate limit, the
// whole fleet also starts none of its elements for d, then resumes at the
// limit's rate from an empty bucket. A d of 0 or less waits a millisecond.
func RetryAfter(d time.Duration, err error) error { return engine.RetryAfter(d, err) }

// RetryAfterOf reports whether err was marked with RetryAfter, and the
// wait it asked for.
func RetryAfterOf(err error) (time.Duration, bool) { return engine.RetryAfterOf(err) }
