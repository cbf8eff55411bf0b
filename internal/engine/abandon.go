package engine

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redmap/redmap/codec"
)

// callers make a task's calls of its function under a timeout, one at a
// time, on a goroutine other than the task's, so that a call that has not
// returned Policy.Abandon after its timeout can be abandoned while the task
// goes on. Go cannot stop a goroutine: the abandoned one runs on, and what
// its call returns, if ever, goes nowhere but to its own caller, which only
// tells OnAbandon's returned function; the next call starts a new one.
//
// One goroutine serves a task's calls in turn, not one a call: each call
// costs two channel hand-offs, not a goroutine's start.
type callers[In, Out any] struct {
	ctx context.Context // the task's
	fn  func(context.Context, In) (Out, error)
	cur *caller[In, Out] // serving; nil before the first call, or after one was abandoned
}

// caller is one goroutine making calls handed to it, one at a time.
type caller[In, Out any] struct {
	calls chan callIn[In]
	outs  chan outcome[Out] // one place: the goroutine never waits to hand an outcome over
	// e is the goroutine's element, for redmap.Rand: an abandoned call
	// keeps it, rather than racing with the task's next calls on the
	// task's.
	e   *element
	ctx context.Context // the task's, carrying e

	mu        sync.Mutex
	abandoned bool
	returned  func() // OnAbandon's, called when the abandoned call returns
}

// callIn is a call handed to a caller: the context it runs under (ending at
// its timeout) and its input.
type callIn[In any] struct {
	ctx context.Context
	x   In
}

// call runs fn on x, the element of batch index index, under p's timeout,
// on the serving caller's goroutine (starting one if there is none), and
// returns what it came to; or abandons it if it has not returned p.Abandon
// after its timeout, telling p.OnAbandon, and returns a timeout failure.
func (cs *callers[In, Out]) call(p Policy, index int, x In) outcome[Out] {
	c := cs.cur
	if c == nil {
		c = &caller[In, Out]{calls: make(chan callIn[In]), outs: make(chan outcome[Out], 1), e: &element{seed: p.Seed}}
		c.ctx = context.WithValue(cs.ctx, elementKey{}, c.e)
		go c.serve(cs.fn, p.Timeout)
		cs.cur = c
	}
	c.e.at(index) // before the hand-off, which orders it before the call's Rand
	ctx, cancel := context.WithTimeout(c.ctx, p.Timeout)
	defer cancel()
	c.calls <- callIn[In]{ctx: ctx, x: x}
	select {
	case o := <-c.outs:
		return o
	case <-ctx.Done():
	}
	// Past its timeout (or its task cancelled): the timer is made only
	// now, rarely.
	deadline, _ := ctx.Deadline()
	t := time.NewTimer(time.Until(deadline) + p.Abandon)
	defer t.Stop()
	select {
	case o := <-c.outs:
		return o
	case <-t.C:
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case o := <-c.outs: // it returned as the timer fired
		return o
	default:
	}
	c.abandoned = true
	cs.cur = nil
	if p.OnAbandon != nil {
		// Under c.mu: the call, returning now, waits to see returned.
		c.returned = p.OnAbandon(index)
	}
	return outcome[Out]{f: &codec.Failure{Kind: codec.KindTimeout,
		Msg: fmt.Sprintf("ran past its timeout of %v and had not returned %v later: abandoned, still running (the function ignores its context)", p.Timeout, p.Abandon)},
		after: -1, abandoned: true}
}

// close ends the serving caller's goroutine, once the task's calls are
// made.
func (cs *callers[In, Out]) close() {
	if cs.cur != nil {
		close(cs.cur.calls)
		cs.cur = nil
	}
}

// serve makes the calls handed to c until they end, or until one is
// abandoned: then it tells c.returned once that call returns, and ends.
func (c *caller[In, Out]) serve(fn func(context.Context, In) (Out, error), timeout time.Duration) {
	for in := range c.calls {
		o := call(in.ctx, timeout, fn, in.x)
		c.mu.Lock()
		if c.abandoned {
			returned := c.returned
			c.mu.Unlock()
			if returned != nil {
				returned()
			}
			return
		}
		c.outs <- o
		c.mu.Unlock()
	}
}
