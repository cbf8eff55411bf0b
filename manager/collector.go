package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/backoff"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/part"
)

// collectMax caps the results read from Redis in one round trip.
const collectMax = 1024

// collector reads one shard's result list and hands each result to the
// batch waiting for it; nothing else. A result whose task is not pending
// (stale, a duplicate, withdrawn) is dropped.
type collector struct {
	collectorParams
	*part.Runner
	// budget is the bytes of staged results read in one call: broker.CallBytes,
	// halved after each call that timed out while Redis answered (a link
	// slower than CallBytes assumes), doubled back after each that did not.
	budget int
}

// collectorParams is what a collector is built from.
type collectorParams struct {
	shard    *shard
	mid      string
	poll     time.Duration // the longest wait for a result: Options.Poll
	maxFrame int           // Options.MaxFrame
	pending  *pendingTasks
	faults   *faults
	dropped  *atomic.Int64                 // results dropped: stale, duplicate or unreadable
	stale    func(tid string, attempt int) // notes a stale result on its batch's span
	bytes    *atomic.Int64                 // bytes of results read
	log      *slog.Logger
	// A durable batch's owner's collectors start reading once after is
	// closed (its resume ran), and hand a result whose task is not pending
	// to early, which puts it aside if the feeder has yet to register it
	// (resumeState.keep); nil for a manager.
	after   <-chan struct{}
	early   func(tid, entry string) bool
	mayTrim func() bool // whether it still holds its claim (Manager.stillHolds)
}

func newCollector(p collectorParams) *collector {
	c := &collector{collectorParams: p, budget: broker.CallBytes}
	c.Runner = part.New(c.collect)
	return c
}

// Stop stops reading, and wakes the collector from its wait for a result
// rather than let it wait out its timeout: one round trip. (A durable
// batch's owner's wake leaves its result list's TTL as it was, and is
// refused once another manager took the batch: that owner's wait ends
// within a Poll.)
func (c *collector) Stop() {
	c.Runner.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.shard.rdb.WakeCollector(ctx, &broker.ManagerParams{Manager: c.mid})
}

// collect reads the shard's result list until ctx ends. If the shard's
// Redis stays unreachable for RedisTimeout, what is outstanding there fails
// with ErrUnavailable; if it refuses the read for good (an ACL, say),
// everything outstanding fails at once, with the refusal.
func (c *collector) collect(ctx context.Context) {
	if c.after != nil {
		select {
		case <-c.after:
		case <-ctx.Done():
			return
		}
	}
	var (
		handled int    // entries read last time, to trim off with the next read
		mark    string // the start of the last of them
		waited  bool   // they came from a wait (WaitResults), not a read
		bo      backoff.Backoff
		r       = c.shard.rdb
	)
	for ctx.Err() == nil {
		if handled > 0 && c.mayTrim != nil && !c.mayTrim() {
			// A durable batch's owner that cannot be sure it still holds the
			// batch (its claim unrenewed for most of its lease) trims, and
			// so keeps, nothing: what it read stays for whoever holds it.
			// It reads again once its keeper renews the claim, or lets go.
			handled, waited = 0, false
			if !bo.Wait(ctx) {
				return
			}
			continue
		}
		var entries []string
		ok := c.faults.keep(ctx, c.shard, "reading results", loudOutage, func() (err error) {
			if waited {
				// The last entry came alone, from a wait: the read that trims
				// it will likely find nothing more, so the next wait goes
				// behind it in the same round trip.
				var got *broker.ReadThenWaitResult
				if got, err = r.ReadThenWait(ctx, &broker.ReadResultsParams{Manager: c.mid, Handled: handled, Mark: mark, Limit: collectMax, Wait: c.poll}); got != nil {
					entries, waited = got.Entries, got.FromWait
				}
			} else {
				entries, err = r.ReadResults(ctx, &broker.ReadResultsParams{Manager: c.mid, Handled: handled, Mark: mark, Limit: collectMax})
				if err == nil && len(entries) == 0 {
					// Wait for the next entry; it comes with the wait, and the
					// next read trims it as handled.
					var first string
					if first, err = r.WaitResults(ctx, &broker.WaitResultsParams{Manager: c.mid, Timeout: c.poll}); first != "" {
						entries = []string{first}
					}
					waited = true
				}
			}
			return err
		})
		if !ok {
			// The trim may or may not have been applied: read from the
			// start again; entries seen twice are dropped as duplicates.
			handled, waited = 0, false
			if !bo.Wait(ctx) {
				return
			}
			continue
		}
		c.shard.outage.up()
		bo.Reset()
		// The read trimmed what was handled before: from here on, handled
		// counts the entries of this read.
		handled = c.handOut(ctx, entries)
		if handled > 0 {
			mark = broker.Mark(entries[handled-1])
		}
		if handled < len(entries) {
			// A read of staged results failed: the next read trims what
			// was handled and reads the rest again.
			waited = false
			if !bo.Wait(ctx) {
				return
			}
		}
	}
}

// handOut dispatches entries, read from the result list, in order, reading
// the staged results they refer to in calls of at most broker.CallBytes (a slow
// link slows each call, and none times out), and returns how many it
// dispatched: all of them, unless a call failed.
func (c *collector) handOut(ctx context.Context, entries []string) int {
	r := c.shard.rdb
	var sizes []int
	ok := c.faults.keep(ctx, c.shard, "reading results", loudOutage, func() (err error) {
		sizes, err = r.StagedSizes(ctx, &broker.EntriesParams{Manager: c.mid, Entries: entries})
		return err
	})
	if !ok {
		return 0
	}
	for done := 0; done < len(entries); {
		n := broker.Within(sizes[done:], c.budget)
		var read []string // the entries, staged results in place
		err := c.faults.call(c.shard, "reading results", func() (err error) {
			read, err = r.Unstaged(ctx, &broker.EntriesParams{Manager: c.mid, Entries: entries[done : done+n]})
			return err
		})
		if err != nil {
			if errors.Is(err, errSlow) {
				c.budget = max(c.budget/2, 1)
			}
			c.faults.handle(ctx, c.shard, "reading results", err, loudOutage)
			return done
		}
		c.budget = min(2*c.budget, broker.CallBytes)
		c.shard.outage.up()
		c.dispatchAll(read)
		done += n
	}
	return len(entries)
}

// dispatchAll dispatches entries, decoding them on up to GOMAXPROCS
// goroutines when there are many, and returns once all are handled.
func (c *collector) dispatchAll(entries []string) {
	const perGoroutine = 64 // fewer, and a goroutine costs more than it saves
	goroutines := min(runtime.GOMAXPROCS(0), len(entries)/perGoroutine)
	if goroutines < 2 {
		for _, e := range entries {
			c.dispatch(e)
		}
		return
	}
	var wg sync.WaitGroup
	size := (len(entries) + goroutines - 1) / goroutines
	for start := 0; start < len(entries); start += size {
		share := entries[start:min(start+size, len(entries))]
		wg.Go(func() {
			for _, e := range share {
				c.dispatch(e)
			}
		})
	}
	wg.Wait()
}

// dispatch hands one entry of the result list to its batch, or drops it if
// its task is not pending: a stale or duplicate result is never returned.
//
// A panic on that path (in decoding, on bytes some check missed) is logged
// and the entry dropped, or its task failed if it was taken: the process
// goes on.
func (c *collector) dispatch(entry string) {
	var taken *pending
	defer func() {
		if p := recover(); p != nil {
			c.dropped.Add(1)
			c.log.Error("reading a result panicked", "panic", p, "stack", string(debug.Stack()))
			if taken != nil {
				taken.batch.fail(taken.chunk, 0, fmt.Errorf("%w: reading its result panicked: %v", redmap.ErrDecode, p))
			}
		}
	}()
	e, err := wire.DecodeEntry(entry, c.maxFrame)
	switch e.Kind {
	case wire.EntryLost:
		c.failTask(e.Task, entry, fmt.Errorf("%w: worker %s died, and the batch was sent to its private queue", redmap.ErrLost, e.Worker))
		return
	case wire.EntryPurged:
		c.failTask(e.Task, entry, redmap.ErrPurged)
		return
	case wire.EntryWake:
		return
	case wire.EntryStaged:
		// A result over broker.Inline is stored beside the list; the read
		// found it gone, so Redis lost data since it was delivered (a
		// FLUSHALL, a restart, a failover between the read of the list
		// and of the result). The task is still pending and no longer in
		// the task set: the recoverer's next check submits it again, as
		// any task Redis lost.
		c.dropped.Add(1)
		c.shard.lossSeen.Store(true)
		c.log.Warn("a delivered result was gone from Redis when read (Redis lost data); its task will be submitted again",
			"task", e.Task, "shard", c.shard.i)
		return
	}
	c.bytes.Add(int64(e.Size))
	r := e.Result
	if r == nil {
		c.dropped.Add(1)
		c.log.Warn("dropped an unreadable result", "err", err)
		return
	}
	p, ok := c.pending.take(r.Task)
	if !ok && c.early != nil {
		if c.early(r.Task, entry) {
			return
		}
		p, ok = c.pending.take(r.Task) // registered since the first look
	}
	if !ok {
		c.dropped.Add(1)
		c.stale(r.Task, r.Attempt)
		return
	}
	taken = &p
	p.batch.deliver(p.chunk, r, err)
}

// failTask fails a pending task with cause, the news of entry, or drops it
// if the task is not pending.
func (c *collector) failTask(tid, entry string, cause error) {
	p, ok := c.pending.take(tid)
	if !ok && c.early != nil {
		if c.early(tid, entry) {
			return
		}
		p, ok = c.pending.take(tid)
	}
	if !ok {
		c.dropped.Add(1)
		return
	}
	p.batch.fail(p.chunk, 0, cause)
}
