// Package await is how the unit tests of the manager's and the worker's
// parts wait for a condition: not on a timer, but on the activity of the
// fakes the parts call (each call notifies a Broadcast), looking again at
// each.
package await

import (
	"sync"
	"testing"
	"time"
)

// Broadcast wakes every waiter at once: Wait returns a channel that the
// next Notify closes. The zero value is ready to use.
type Broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

// Wait returns the channel the next Notify closes.
func (b *Broadcast) Wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

// Notify wakes whoever waits.
func (b *Broadcast) Notify() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}

// Until returns once cond holds, looking at it now and again at each
// Notify of b; it fails t, naming what it waited for, if limit passes
// first. A part's state changes as a call to a fake returns, and every
// part that runs calls again (a tick, the next read), so a condition that
// becomes true is seen at the next call.
func Until(t testing.TB, b *Broadcast, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for {
		next := b.Wait() // taken before looking, so that no Notify is missed
		if cond() {
			return
		}
		select {
		case <-next:
		case <-deadline.C:
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

// Calls is what a fake records of the calls made to it, and the errors it
// is told to return: each call notifies a Broadcast, for Until. The zero
// value is ready to use, with Activity set.
type Calls struct {
	Activity *Broadcast // notified at each call

	mu    sync.Mutex
	calls map[string]int   // operation → calls
	fail  map[string]error // operation → the error its calls return
}

// Call records a call of op and returns the error set for it.
func (c *Calls) Call(op string) error {
	defer c.Activity.Notify()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == nil {
		c.calls = make(map[string]int)
	}
	c.calls[op]++
	return c.fail[op]
}

// Of returns how many calls of op were made.
func (c *Calls) Of(op string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[op]
}

// SetFail makes the calls of op return err from now on (nil: succeed).
func (c *Calls) SetFail(op string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail == nil {
		c.fail = make(map[string]error)
	}
	if err == nil {
		delete(c.fail, op)
	} else {
		c.fail[op] = err
	}
}
