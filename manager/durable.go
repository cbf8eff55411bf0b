package manager

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zeebo/blake3"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/id"
)

// A durable batch (Durable) runs on a manager of its own, its owner: the
// manager a program made (the parent) makes one per durable batch, whose
// id is id.Durable(name), so that the batch's keys and task ids are the
// same whichever process holds it. The owner's keys live DurableTTL; its
// collectors keep what they read (see durableSeams); it holds the
// batch's claim while it lives, renewed by its keeper; and before its
// first submit it resumes what Redis has of the batch (resume), which its
// feeder then submits around (feeder.window). Once the batch has ended in
// it, completed or cancelled, the owner closes, deleting the batch's keys;
// ended otherwise (its context, the parent's Close) it detaches, leaving
// them for the next call to take over.

// durableTasks is how many tasks a durable batch of a slice without
// ChunkSize is cut into, at most (see cutPlan): all of them fit in one
// window, so that a batch under 64 MiB is all in Redis at once once its
// cost is measured, and runs to its end with no manager.
const durableTasks = windowTasks

// durableChunk is the least chunk size of a durable batch of n elements of
// a slice without ChunkSize.
func durableChunk(n int) int {
	return max(1, (n+durableTasks-1)/durableTasks)
}

// durableSeed is the seed of a durable batch without Seed: the same for
// every call that takes it over.
func durableSeed(name string) uint64 {
	sum := blake3.Sum256([]byte("redmap durable seed\x00" + name))
	return binary.LittleEndian.Uint64(sum[:8])
}

// durables are a parent manager's durable batches running, by name, each
// on its owner.
type durables struct {
	mu     sync.Mutex
	owners map[string]*Manager
	closed bool
	ended  Stats          // the counts of the owners removed, which Stats adds
	ending sync.WaitGroup // owners closing or detaching
}

// owned is what an owner knows of its durable batch.
type owned struct {
	name    string
	holder  wire.Holder   // the claim it holds
	parent  *durables     // which lists it while it runs
	resumed chan struct{} // closed once resume ran: the collectors start then
	once    sync.Once     // closes resumed
	found   *resumeState  // what resume found; nil before
	// fence is the claim it holds, which its writes carry: a script refuses
	// one once another manager took the batch (see broker.Fence), and the
	// owner then lets the batch go (lose).
	fence *broker.Fence
	lost  sync.Once // lose's
	// held is until when, by this process's clock, its claim is surely
	// still its own (Unix ns): a renewal that began at t holds it until at
	// least t plus the lease. Past it, its collectors trim nothing (see
	// collector.mayTrim), so that an owner that was cut off for longer than
	// its lease, and lost the batch to another manager, does not move onto
	// the kept list results the other waits for.
	held atomic.Int64
	// costs are what the parent has learnt of its functions' costs, which
	// the owner shares.
	costs *costs
	// pipes are the parent's pipelines running, which the owner's keeper
	// cancels when an operator cancels one of their batches.
	pipes *pipes
}

// owner returns a manager of its own for durable batch name, holding the
// batch's claim; the caller submits on it, or detaches it. While another
// manager holds the batch it tries again every Poll for up to wait
// (DurableWait), then fails with the *redmap.HeldError.
func (m *Manager) owner(ctx context.Context, name string, wait time.Duration) (*Manager, error) {
	deadline := time.Now().Add(wait)
	for {
		o, err := m.tryOwner(ctx, name)
		var held *redmap.HeldError
		if err == nil || !errors.As(err, &held) || !time.Now().Before(deadline) {
			return o, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(min(m.opts.Poll, time.Until(deadline))):
		}
	}
}

// tryOwner is owner's one try.
func (m *Manager) tryOwner(ctx context.Context, name string) (*Manager, error) {
	o, err := m.newOwner(ctx, name)
	if err != nil {
		return nil, err
	}
	if err := o.claim(ctx); err != nil {
		o.detach(err)
		return nil, err
	}
	return o, nil
}

// newOwner returns the owner of durable batch name for m, listed as such,
// its keeper started; it has yet to take the batch's claim.
func (m *Manager) newOwner(ctx context.Context, name string) (*Manager, error) {
	if m.client == nil {
		return nil, errors.New("manager: Durable needs a manager made by New")
	}
	if err := m.ready(ctx); err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	holder := wire.Holder{Manager: m.id, Host: host, PID: os.Getpid(), PIDs: pidNamespace(), Since: time.Now().UnixMilli(),
		Every: m.opts.Poll.Milliseconds(), Lease: claimLease(m.opts.Poll).Milliseconds()}
	m.durables.mu.Lock()
	if m.durables.closed {
		m.durables.mu.Unlock()
		return nil, redmap.ErrClosed
	}
	if o, ok := m.durables.owners[name]; ok {
		m.durables.mu.Unlock()
		return nil, heldError(name, o.owned.holder)
	}
	opts := m.opts
	opts.KeyTTL = opts.DurableTTL
	fence := broker.NewFence(id.Durable(name))
	o := assemble(durableSeams(m.client, opts, fence), opts, id.Durable(name),
		&owned{name: name, holder: holder, parent: &m.durables, resumed: make(chan struct{}), fence: fence, costs: m.costs, pipes: m.pipes})
	o.faults.durable, o.faults.lose = name, o.lose
	o.addr = m.addr
	o.probed.Store(true)
	if m.durables.owners == nil {
		m.durables.owners = make(map[string]*Manager)
	}
	m.durables.owners[name] = o
	m.durables.mu.Unlock()
	return o, nil
}

// claimLease is how long an owner's claim outlives it: what a manager that
// takes the batch over after a crash waits at most, on another host.
func claimLease(poll time.Duration) time.Duration { return lostAfter(poll, time.Hour) }

// claim takes the batch's claim for the owner's parent, or renews it. A
// claim held by another manager is refused with a *redmap.HeldError, unless
// its holder was a process of this host that is gone (a program restarted
// after a crash): that one is taken over at once. A claim taken becomes
// the owner's fence; a renewal once another manager took the batch is
// refused with the *redmap.HeldError naming it, and stops the owner (lose).
func (m *Manager) claim(ctx context.Context) error {
	q := m.router.queue()
	var got wire.Claimed
	call := func(steal string) error {
		return m.faults.callQueue("claiming durable batch "+strconv.Quote(m.owned.name), func() (err error) {
			c := m.claimOf(claimLease(m.opts.Poll), steal)
			var claimed *wire.Claimed
			if claimed, err = q.Claim(ctx, &c); err == nil {
				got = *claimed
			}
			return err
		})
	}
	began := time.Now()
	if err := call(""); err != nil {
		return err
	}
	other := got.Holder
	if !got.Held && other.Host == m.owned.holder.Host && other.PIDs == m.owned.holder.PIDs && other.PID != os.Getpid() && !processAlive(other.PID) {
		m.log.Warn("taking over a durable batch whose holder, on this host, is gone",
			"batch", m.owned.name, "holder", other.Manager, "pid", other.PID)
		if err := call(got.Record); err != nil {
			return err
		}
	}
	if !got.Held {
		return heldError(m.owned.name, got.Holder)
	}
	if m.owned.fence.Record() == "" {
		m.owned.fence.Set(got.Record)
	}
	m.owned.held.Store(began.Add(claimLease(m.opts.Poll) - m.opts.Poll).UnixNano())
	return nil
}

// lose stops an owner that lost its batch to another manager (err, the
// *redmap.HeldError naming it, from a write its fence refused): its batches
// end with err, leaving what Redis has of the batch to the holder. It
// returns at once (the part that found err is among those the owner stops).
func (m *Manager) lose(err error) {
	m.owned.lost.Do(func() {
		var held *redmap.HeldError
		if errors.As(err, &held) {
			m.log.Error("another manager took this durable batch over; this one lets it go", "batch", m.owned.name, "holder", held.Manager, "host", held.Host)
		}
		// Not on the part that found err: detach stops it. The parent's
		// Close waits for it; once that Close has begun, it detaches the
		// owner itself (and no Add may race its Wait).
		d := m.owned.parent
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return
		}
		d.ending.Add(1)
		d.mu.Unlock()
		go func() {
			defer d.ending.Done()
			pprof.SetGoroutineLabels(m.ctx)
			m.detach(err)
		}()
	})
}

// stillHolds reports whether the owner's claim is surely still its own (see
// owned.held).
func (m *Manager) stillHolds() bool { return time.Now().UnixNano() < m.owned.held.Load() }

// unclaim releases the batch's claim, if the owner still holds it: one
// another manager took since is left alone.
func (m *Manager) unclaim() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := m.claimOf(0, "")
	if _, err := m.router.queue().Claim(ctx, &c); err != nil && !broker.IsFenced(err) {
		m.log.Warn("releasing a durable batch's claim failed; it lapses by itself", "batch", m.owned.name, "err", err)
	}
}

// claimOf is the owner's claim for lease (0 releases it), taking over
// holder record steal if it is not "": a renewal or release of the one it
// holds, once it took one.
func (m *Manager) claimOf(lease time.Duration, steal string) wire.Claim {
	return wire.Claim{Owner: m.id, Name: m.owned.name, Holder: m.owned.holder, Lease: lease, TTL: m.opts.DurableTTL, Steal: steal,
		Fence: m.owned.fence.Record()}
}

func heldError(name string, h wire.Holder) error {
	return &redmap.HeldError{Name: name, Manager: h.Manager, Host: h.Host, PID: h.PID, Since: time.UnixMilli(h.Since)}
}

// resumeState is what an owner found of its batch in Redis before its first
// submit: the tasks submitted before (by their input's sum), those
// outstanding, and the results delivered, which the feeder hands to the
// batch as it registers their tasks. The collectors put aside a result of
// a task found outstanding that the feeder has not registered yet (keep),
// rather than drop it.
type resumeState struct {
	mu          sync.Mutex
	sums        map[string]string   // task id → sum of its input (durableSum), as first submitted
	outstanding map[string]bool     // queued, or held by a worker: not to submit again
	delivered   map[string][]string // task id → its result-list entries, in order
	cancelled   string              // why an operator cancelled the batch while no manager held it, or ""
}

// dropFailed forgets the results found of tasks whose last one holds a
// failed element, so that the feeder submits those tasks again
// (RetryFailed), and keeps only the last result of the others: an earlier
// failure of a task run again must not be the one delivered. It returns
// how many tasks will run again. limit bounds a result's decoding
// (Options.MaxFrame).
func (r *resumeState) dropFailed(limit int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for tid, entries := range r.delivered {
		last := -1
		for i, e := range entries {
			if d, err := wire.DecodeEntry(e, limit); err == nil && d.Result != nil {
				last = i
			}
		}
		if last < 0 {
			continue // notices only: the collector handles them as usual
		}
		d, _ := wire.DecodeEntry(entries[last], limit)
		if len(d.Result.Fails) > 0 {
			delete(r.delivered, tid)
			n++
			continue
		}
		r.delivered[tid] = entries[last : last+1]
	}
	return n
}

// known reports whether task tid of the batch needs no submit: its result
// was delivered, or it is outstanding.
func (r *resumeState) known(tid string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, done := r.delivered[tid]
	return done || r.outstanding[tid]
}

// registered says task tid is pending now, and returns the entries of it
// found delivered or put aside (keep), for the feeder to hand to the
// batch; the collectors hand it the rest as they come.
func (r *resumeState) registered(tid string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	entries := r.delivered[tid]
	delete(r.delivered, tid)
	delete(r.outstanding, tid)
	return entries
}

// keep puts aside entry, a result or notice of task tid that a collector
// found not pending, if tid was outstanding at the resume and the feeder
// has not registered it yet; it reports whether it did. If not, the
// collector looks at the pending tasks again: the feeder registers a task
// before it calls registered.
func (r *resumeState) keep(tid, entry string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.outstanding[tid] {
		return false
	}
	r.delivered[tid] = append(r.delivered[tid], entry)
	return true
}

// resume reads what Redis has of the owner's batch, on every shard: every
// result delivered (kept), every task outstanding, the sums of the tasks
// submitted, and each shard's count and epoch, which the owner adopts so
// that its submits find the task set intact. The collectors start after
// it.
func (m *Manager) resume(ctx context.Context) error {
	st := &resumeState{outstanding: make(map[string]bool), delivered: make(map[string][]string)}
	for _, s := range m.router.list() {
		var res *wire.Resumed
		err := m.faults.call(s, "resuming durable batch "+strconv.Quote(m.owned.name), func() (err error) {
			res, err = s.rdb.Resume(ctx, &broker.ResumeParams{Owner: m.id, TTL: m.opts.KeyTTL})
			return err
		})
		if err != nil {
			return err
		}
		st.cancelled = cmp.Or(st.cancelled, res.Cancelled)
		s.acked.Store(res.Count)
		if res.Epoch != "" {
			s.epoch.Store(&res.Epoch)
		}
		for _, tid := range res.Outstanding {
			st.outstanding[tid] = true
		}
		const page = 1000
		for from := int64(0); from < res.Kept; from += page {
			var es []string
			err := m.faults.call(s, "reading a durable batch's results", func() (err error) {
				es, err = s.rdb.Kept(ctx, &broker.KeptParams{Owner: m.id, From: from, N: page})
				return err
			})
			if err != nil {
				return err
			}
			for _, e := range es {
				if tid := entryTask(e, m.opts.MaxFrame); tid != "" {
					st.delivered[tid] = append(st.delivered[tid], e)
				}
			}
		}
	}
	err := m.faults.callQueue("reading a durable batch's inputs", func() (err error) {
		st.sums, err = m.router.queue().Sums(ctx, &broker.SumsParams{Owner: m.id})
		return err
	})
	if err != nil {
		return err
	}
	if k, ok := st.sums[shardsField]; ok && k != strconv.Itoa(len(m.router.list())) {
		// Its tasks and results are spread over the shards it was
		// submitted to, which this manager would not all read.
		return fmt.Errorf("%w: durable batch %q was submitted over %s shards (Options.Shards), this manager uses %d: take it over with the same",
			redmap.ErrDurableMismatch, m.owned.name, k, len(m.router.list()))
	}
	m.owned.found = st
	m.owned.once.Do(func() { close(m.owned.resumed) })
	return nil
}

// entryTask returns the task a result-list entry is of, or "" if it is of
// none (a wake-up) or does not decode.
func entryTask(entry string, limit int) string {
	e, _ := wire.DecodeEntry(entry, limit)
	if e.Result != nil {
		return e.Result.Task
	}
	return e.Task
}

// durableSum is the sum of what a task payload runs: its function, reducer
// and constant, and its elements with their indexes; not its options or
// trace, which a resumed call may set otherwise.
func durableSum(payload []byte, limit int) (sum, constant string, err error) {
	t, err := codec.DecodeTask(payload, max(limit, len(payload))) // the manager's own payload
	if err != nil {
		return "", "", err
	}
	h := blake3.New()
	for _, s := range []string{t.Func, t.Sig, t.Reduce, t.ReduceSig, t.Const, strconv.Itoa(t.Start), strconv.Itoa(t.Count)} {
		_, _ = h.WriteString(strconv.Itoa(len(s)) + ":" + s)
	}
	_, _ = h.Write(t.Input)
	return hex.EncodeToString(h.Sum(nil)[:16]), t.Const, nil
}

// constField is the field of a durable batch's sums (keys.Sums) that holds
// the hash of its constant, if it has one: a call that takes it over with
// another constant releases its own hold on that one (releaseUnused).
const constField = "_const"

// startedField is the field of a durable batch's sums that holds when the
// call that first submitted it started (Unix ms): its history record and
// progress say so, whichever call ends it.
const startedField = "_started"

// shardsField is the field of a durable batch's sums that holds how many
// shards it was submitted over: a call that takes it over must use as many.
const shardsField = "_shards"

// mismatch is the error of a resumed call whose task tid, elements
// [start, start+count), differs from the batch's.
func mismatch(name, tid string, start, count int) error {
	return fmt.Errorf("%w: durable batch %q: task %s (elements %d to %d) was submitted with another input, function or constant",
		redmap.ErrDurableMismatch, name, tid, start, start+count-1)
}

// on reads a call's options (callOptionsOf) and returns the manager the
// call runs on: m, or for a durable batch (Durable) its owner, which holds
// the batch's claim.
func on(ctx context.Context, m *Manager, opts []CallOption) (*Manager, callOptions, error) {
	co, err := callOptionsOf(opts)
	if err != nil || co.durable == "" || m.owned != nil {
		return m, co, err
	}
	if err := ctx.Err(); err != nil {
		return nil, co, err
	}
	o, err := m.owner(ctx, co.durable, co.durableWait)
	return o, co, err
}

// failed detaches an owner whose submit failed: what Redis has of its
// batch stays for the next call. A manager it leaves alone.
func (m *Manager) failed(err error) {
	if m.owned != nil {
		m.detach(err)
	}
}

// detach stops an owner, leaving its batch's keys in Redis, and releases
// its claim: the batch waits there for the next call.
func (m *Manager) detach(cause error) {
	// Its progress, published once more: a batch left before its first
	// Poll would be in no operator's list (redmap batches) until a call
	// took it over.
	if k, ok := m.background[0].(*keeper); ok && m.ctx.Err() == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		k.publishBatches(ctx)
		cancel()
	}
	if _, _, first := m.halt(cause); first {
		m.unclaim()
	}
	m.owned.parent.remove(m.owned.name, m)
}

// settle closes an owner once its batch has ended and been recorded: a
// batch that completed, or was cancelled, is over, and its keys are
// deleted; one that ended otherwise (its context, the parent's Close) is
// left in Redis for the next call (detach). The channel it returns is
// closed once it has: the batch's Wait returns after it, so that a call
// made next finds the batch free, or gone.
func (m *Manager) settle(done, recorded <-chan struct{}, left func() bool) <-chan struct{} {
	settled := make(chan struct{})
	d := m.owned.parent
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ending.Add(1)
	go func() {
		defer d.ending.Done()
		defer close(settled)
		pprof.SetGoroutineLabels(m.ctx)
		<-done
		<-recorded
		if left() {
			m.detach(redmap.ErrClosed)
			return
		}
		if err := m.Close(); err != nil {
			m.log.Warn("deleting an ended durable batch's keys failed; they expire after DurableTTL", "batch", m.owned.name, "err", err)
		}
		d.remove(m.owned.name, m)
	}()
	return settled
}

// remove forgets owner o of name, if it is still the one listed, keeping
// its counts for the parent's Stats. o has stopped (halt): its counts no
// longer change.
func (d *durables) remove(name string, o *Manager) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.owners[name] == o {
		delete(d.owners, name)
		st := o.ownStats()
		st.Pending = 0 // what it had pending ended with it
		d.ended.add(st)
	}
}

// endPhases ends, as an operator's cancel with cause, the running batches
// of the owners d lists of durable pipeline name's phases (named
// name+"/"+phase), and returns what they had done when they ended.
func (d *durables) endPhases(name string, cause error) []Progress {
	d.mu.Lock()
	var owners []*Manager
	for n, o := range d.owners {
		if strings.HasPrefix(n, name+"/") {
			owners = append(owners, o)
		}
	}
	d.mu.Unlock()
	var ps []Progress
	for _, o := range owners {
		for _, b := range o.batches.batches() {
			b.cancel(cause)
			ps = append(ps, b.Progress())
		}
	}
	return ps
}

// detachDurables detaches every durable batch's owner of m (its Close):
// the batches wait in Redis for the next call.
func (m *Manager) detachDurables() {
	m.durables.mu.Lock()
	m.durables.closed = true
	owners := make([]*Manager, 0, len(m.durables.owners))
	for _, o := range m.durables.owners {
		owners = append(owners, o)
	}
	m.durables.mu.Unlock()
	for _, o := range owners {
		o.detach(redmap.ErrClosed)
	}
	m.durables.ending.Wait()
}

// renewClaim renews the owner's claim (the keeper's, every Poll). A claim
// another manager took (the owner stalled past its lease) stops the owner:
// two managers never collect one batch.
//
// Until the owner's first claim has returned (tryOwner) there is nothing
// to renew: a claim taken meanwhile would be a second one, with the next
// token, while the owner's fence could keep the first, and every write of
// the owner would then be refused as fenced.
func (m *Manager) renewClaim(ctx context.Context) {
	if m.owned.fence.Record() == "" {
		return
	}
	err := m.claim(ctx)
	switch {
	case errors.Is(err, redmap.ErrDurableHeld):
		m.lose(err)
	case err != nil && ctx.Err() == nil:
		m.log.Warn("renewing a durable batch's claim failed", "batch", m.owned.name, "err", err)
	}
}
