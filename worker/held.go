package worker

import (
	"context"
	"sync"

	"github.com/redmap/redmap/internal/broker/wire"
)

// held is the worker's ledger of the tasks it took and has not yet
// reported, as Redis has them in its held set: each one waiting to run,
// running (with the cancel of its context), or run and waiting to be
// reported. The fetcher adds, the executors start and stop, the finisher
// releases; the maintainer cancels running tasks no longer wanted, and the
// fetcher compares the ledger with Redis's held set to find orphans.
type held struct {
	mu    sync.Mutex
	tasks map[string]hold // task id -> its hold
	// empty is closed while the ledger holds nothing (see emptied).
	empty  chan struct{}
	closed bool // empty is closed
	// freed has a token when a task was released since the last receive
	// (see released).
	freed chan struct{}
}

// hold is one task in the ledger: the shard it came from, the cancel of
// its context while it runs, and whether that cancel was for a backup's
// race lost (outrun: the task's other copy delivered its result first).
type hold struct {
	shard  int
	cancel context.CancelFunc // nil unless running
	outrun bool
}

func newHeld() *held {
	h := &held{tasks: make(map[string]hold), empty: make(chan struct{}), closed: true, freed: make(chan struct{}, 1)}
	close(h.empty)
	return h
}

// add records tasks just taken.
func (h *held) add(taken []wire.Taken) {
	h.mu.Lock()
	for _, t := range taken {
		h.tasks[t.ID] = hold{shard: t.Shard}
	}
	if len(h.tasks) > 0 && h.closed {
		h.empty, h.closed = make(chan struct{}), false
	}
	h.mu.Unlock()
}

// emptied returns a channel closed once the ledger holds nothing: every
// task taken was reported, or dropped.
func (h *held) emptied() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.empty
}

// size returns how many tasks the ledger holds.
func (h *held) size() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.tasks)
}

// start records that task tid runs under cancel; stop, that it ran.
func (h *held) start(tid string, cancel context.CancelFunc) { h.set(tid, cancel) }
func (h *held) stop(tid string)                             { h.set(tid, nil) }

func (h *held) set(tid string, cancel context.CancelFunc) {
	h.mu.Lock()
	if t, ok := h.tasks[tid]; ok {
		t.cancel = cancel
		h.tasks[tid] = t
	}
	h.mu.Unlock()
}

// release forgets tasks that were reported (or dropped unrun).
func (h *held) release(tids ...string) {
	h.mu.Lock()
	for _, tid := range tids {
		delete(h.tasks, tid)
	}
	if len(h.tasks) == 0 && !h.closed {
		close(h.empty)
		h.closed = true
	}
	h.mu.Unlock()
	select {
	case h.freed <- struct{}{}:
	default:
	}
}

// released returns a channel that receives once a task was released since
// the last receive.
func (h *held) released() <-chan struct{} { return h.freed }

// running returns the ids of the tasks running now, by shard.
func (h *held) running() map[int][]string { return h.byState(true) }

// waiting returns the ids of the tasks not running now, by shard: waiting
// to run, or run and waiting to be reported.
func (h *held) waiting() map[int][]string { return h.byState(false) }

func (h *held) byState(running bool) map[int][]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[int][]string)
	for tid, t := range h.tasks {
		if (t.cancel != nil) == running {
			out[t.shard] = append(out[t.shard], tid)
		}
	}
	return out
}

// count returns how many tasks run now.
func (h *held) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, t := range h.tasks {
		if t.cancel != nil {
			n++
		}
	}
	return n
}

// cancel cancels the context of those of tids that are running; those
// also in outrun are marked so first (see outran).
func (h *held) cancel(tids, outrun []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, tid := range outrun {
		if t, ok := h.tasks[tid]; ok && t.cancel != nil {
			t.outrun = true
			h.tasks[tid] = t
		}
	}
	for _, tid := range tids {
		if cancel := h.tasks[tid].cancel; cancel != nil {
			cancel()
		}
	}
}

// outran reports whether running task tid was cancelled because it lost a
// backup's race (held.cancel).
func (h *held) outran(tid string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.tasks[tid].outrun
}

// orphans returns the members of Redis's held set (see wire.HeldID) of tasks
// the ledger does not have: taken by a call whose reply never arrived.
func (h *held) orphans(members []string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, m := range members {
		if _, ok := h.tasks[wire.HeldID(m)]; !ok {
			out = append(out, m)
		}
	}
	return out
}
