// Package memory is the broker contract (internal/broker) in memory: a
// queue of shards, each with its task set, public list, workers' private
// lists, held sets and leases, and the results delivered. The unit tests of
// the parts run on it; internal/broker/brokertest checks that it keeps the
// rules the scripts keep, so that what those tests show holds on Redis.
//
// Besides the contract, a Shard has what a test needs to set a scene (Add,
// Hold, Withdraw, Fail, SetDrain, SetLimits, RunOnSubmit, ...) and to look
// at it (Results, HeldBy, Calls, Asked, Holdings, Infos, Groups, Retired,
// ...). Every call notifies the Broadcast the queue was made with, for
// await.Until.
//
// What it does not model, so that a test on it proves nothing of: lanes,
// rings and priorities (a shard has one public list, first in first out,
// and a take passes no task for what the worker serves), limits, foreign
// data and staged results; an audit counts as placed a task on any list or
// held set; durable batches (their operations return ErrDurable: their
// tests run on Redis).
package memory

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/redmap/redmap/internal/await"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/id"
)

// Queue is a queue of shards in memory: shard 0 first, then those named
// when it was made, which a worker opens as it learns of them.
type Queue struct {
	shards []*Shard
}

// NewQueue returns a queue of shard 0 and a shard per name; every call to
// one of them notifies activity.
func NewQueue(activity *await.Broadcast, names ...string) *Queue {
	q := &Queue{}
	q.shards = append(q.shards, newShard(0, "q", activity))
	for i, n := range names {
		q.shards = append(q.shards, newShard(i+1, n, activity))
	}
	q.shards[0].names = names
	q.shards[0].count = len(q.shards)
	return q
}

// Shard returns shard i.
func (q *Queue) Shard(i int) *Shard { return q.shards[i] }

// Shards returns the queue's shards, shard 0 first.
func (q *Queue) Shards() []*Shard { return q.shards }

// First returns shard 0, where the queue-wide records live.
func (q *Queue) First() *Shard { return q.shards[0] }

// Open returns the shard named name, as a worker opens shard i of the
// queue; it panics if there is none.
func (q *Queue) Open(name string, _ int) broker.Shard {
	for _, s := range q.shards {
		if s.name == name {
			return s
		}
	}
	panic("memory: no shard " + name)
}

// Shard is one shard of a queue in memory; shard 0 holds the queue-wide
// records as well (a broker.Queue).
type Shard struct {
	i    int
	name string
	rec  await.Calls // the calls, and the errors they are to return

	mu       sync.Mutex
	tokens   map[string][]string      // each worker's bell: its tokens, as the list in Redis
	rung     map[string]chan struct{} // closed and replaced when a token is pushed on a worker's bell
	idle     map[string]bool          // workers whose last take left the lists empty: a submit rings them
	tasks    map[string]task          // the task sets, by task id
	public   []string                 // the public list: task ids
	private  map[string][]string      // each worker's private list
	held     map[string]map[string]bool
	leases   map[string]time.Time // each worker's lease deadline
	drain    map[string]bool
	done     []wire.Done // the results delivered, in order
	asked    map[string]int
	holdings []int
	infos    []wire.WorkerInfo
	groups   []wire.FailureGroup
	retired  map[string]bool
	types    map[string][]string
	count    int      // the queue's shard count, as shard 0 says it
	names    []string // the queue's list of shard names (shard 0)
	// maxResult, if set, is the largest result Finish takes: a call with a
	// larger one is refused as Redis at maxmemory refuses staged results.
	maxResult int
	// maxCall, if set, is the most bytes of results a Finish call carries
	// in time: a larger call times out, as over a link too slow for it.
	maxCall int
	m       managerState
	sh      shuffleState
	backups []backupEntry   // copies of tasks that ran long (Backup), taken before the public list
	copied  map[string]bool // tasks that got a copy (Backup), until their cancel (see Unwanted)
}

// backupEntry is a copy of task tid, kept off worker holder.
type backupEntry struct{ tid, holder string }

// task is a task in its manager's task set.
type task struct {
	payload []byte
	attempt int // attempts lost (counted by a reap or a give-back of a task that ran)
}

func newShard(i int, name string, activity *await.Broadcast) *Shard {
	return &Shard{i: i, name: name, rec: await.Calls{Activity: activity},
		tokens: map[string][]string{}, rung: map[string]chan struct{}{}, idle: map[string]bool{},
		tasks: map[string]task{}, copied: map[string]bool{}, private: map[string][]string{},
		held: map[string]map[string]bool{}, leases: map[string]time.Time{},
		drain: map[string]bool{}, asked: map[string]int{}, retired: map[string]bool{}, types: map[string][]string{}, count: 1,
		m: newManagerState(), sh: newShuffleState()}
}

// ErrOOM is the error a call refused for want of memory returns, as Redis
// at maxmemory replies.
var ErrOOM error = oom("OOM command not allowed when used memory > 'maxmemory'.")

type oom string

func (e oom) Error() string { return string(e) }

// RedisError marks it as a reply of the store, not a failure to reach it.
func (oom) RedisError() {}

// Scene-setting and looking, for tests.

// Add queues tasks on the public list, in their managers' task sets, with
// their lost attempts, as a submit and reaps would leave them, and rings
// the bells of idle workers, as a submit does.
func (s *Shard) Add(ts ...wire.Taken) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range ts {
		s.tasks[t.ID] = task{payload: t.Payload, attempt: t.Attempt}
		s.public = append(s.public, t.ID)
	}
	s.ringIdle(len(ts))
}

// Hold records tasks as taken by worker wid: in their task sets, and in its
// held set.
func (s *Shard) Hold(wid string, ts ...wire.Taken) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range ts {
		s.tasks[t.ID] = task{payload: t.Payload, attempt: t.Attempt}
		s.holdLocked(wid, t.Member())
	}
}

// Withdraw withdraws tasks from their task sets, as their managers do when
// a batch ends (Cancel, unrecorded): a take drops them, Unwanted names them,
// a finish discards their results.
func (s *Shard) Withdraw(tids ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, tid := range tids {
		delete(s.tasks, tid)
		delete(s.copied, tid)
	}
}

// Fail makes the calls of op return err from now on (nil: succeed). The
// ops are the contract's method names in lower case.
func (s *Shard) Fail(op string, err error) { s.rec.SetFail(op, err) }

// Calls returns how many calls of op were made.
func (s *Shard) Calls(op string) int { return s.rec.Of(op) }

// SetDrain says, in worker wid's next heartbeats, that an operator drains
// it.
func (s *Shard) SetDrain(wid string, drain bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drain[wid] = drain
}

// SetLimits bounds what a Finish takes: a result over maxResult bytes is
// refused for want of memory, a call over maxCall bytes times out (0: no
// bound).
func (s *Shard) SetLimits(maxResult, maxCall int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maxResult, s.maxCall = maxResult, maxCall
}

// Results returns the results delivered, in order.
func (s *Shard) Results() []wire.Done {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.done)
}

// HeldBy returns the members of worker wid's held set, sorted.
func (s *Shard) HeldBy(wid string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.heldLocked(wid)
}

// Asked returns how often Unwanted was asked about task tid.
func (s *Shard) Asked(tid string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asked[tid]
}

// Holdings returns the Holding of each take, in order.
func (s *Shard) Holdings() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.holdings)
}

// Infos returns the worker infos heartbeats published, in order.
func (s *Shard) Infos() []wire.WorkerInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.infos)
}

// Groups returns the failure groups CountFailures was given, in order.
func (s *Shard) Groups() []wire.FailureGroup {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.groups)
}

// Retired reports whether worker wid retired.
func (s *Shard) Retired(wid string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.retired[wid]
}

// The contract.

// Shard returns the shard's index.
func (s *Shard) Shard() int { return s.i }

// Name returns the shard's name.
func (s *Shard) Name() string { return s.name }

// Take takes up to p.Max tasks for p.Worker, its private list first, as
// take.lua: tasks no longer in their task sets are dropped; a suspect (lost
// wire.SuspectAfter times) comes alone, only to a worker that holds nothing
// by its own count (p.Holding) and Redis's, and a take stops at one it may
// not take (TakeEnd.Suspect); a take that leaves the lists empty, not for a
// suspect, is drained.
func (s *Shard) Take(_ context.Context, p *broker.TakeParams) (*broker.TakeResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.rec.Call("take"); err != nil {
		return nil, err
	}
	s.holdings = append(s.holdings, p.Holding)
	if _, ok := s.leases[p.Worker]; !ok && p.Lease > 0 {
		s.leases[p.Worker] = time.Now().Add(p.Lease) // registered again, as a worker Redis lost
	}
	res := &broker.TakeResult{}
	if slices.Contains(s.tokens[p.Worker], "stop") {
		return res, nil // a worker that stops takes nothing while its stop tokens last
	}
	s.private[p.Worker] = s.takeFrom(p, s.private[p.Worker], true, res)
	s.takeBackups(p, res)
	last := len(res.Taken) > 0 && res.Taken[len(res.Taken)-1].Suspect()
	if !res.End.Suspect && !last {
		s.public = s.takeFrom(p, s.public, false, res)
		last = len(res.Taken) > 0 && res.Taken[len(res.Taken)-1].Suspect()
	}
	res.End.Drained = len(res.Taken) < p.Max && !res.End.Suspect && !last && len(s.public) == 0 && len(s.private[p.Worker]) == 0
	if res.End.Drained {
		s.idle[p.Worker] = true // the next submit rings it
		s.tokens[p.Worker] = nil
	}
	if s.i == 0 && s.count > p.Shards {
		res.End.Shards = s.count
	}
	return res, nil
}

// takeFrom takes from list into res, up to p.Max in all, and returns what
// is left of the list.
func (s *Shard) takeFrom(p *broker.TakeParams, list []string, private bool, res *broker.TakeResult) []string {
	for len(list) > 0 && len(res.Taken) < p.Max {
		tid := list[0]
		t, ok := s.tasks[tid]
		if !ok {
			list = list[1:] // no longer wanted
			continue
		}
		taken := wire.Taken{ID: tid, Attempt: t.attempt, Payload: t.payload, Private: private, Shard: s.i, At: time.Now()}
		if taken.Suspect() && (len(res.Taken) > 0 || p.Holding > 0 || len(s.held[p.Worker]) > 0) {
			res.End.Suspect = true
			break
		}
		list = list[1:]
		s.holdLocked(p.Worker, taken.Member())
		res.Taken = append(res.Taken, taken)
		if taken.Suspect() {
			break // alone
		}
	}
	return list
}

// takeBackups takes copies (Backup) into res, as take.lua: none of a task
// the worker holds; one whose task ended, or was lost, is dropped.
func (s *Shard) takeBackups(p *broker.TakeParams, res *broker.TakeResult) {
	var keep []backupEntry
	for _, b := range s.backups {
		t, ok := s.tasks[b.tid]
		switch {
		case !ok || t.attempt > 0:
		case len(res.Taken) >= p.Max || b.holder == p.Worker || s.held[p.Worker][b.tid]:
			keep = append(keep, b)
		default:
			s.holdLocked(p.Worker, b.tid)
			res.Taken = append(res.Taken, wire.Taken{ID: b.tid, Payload: t.payload, Shard: s.i, At: time.Now(), Backup: true})
		}
	}
	s.backups = keep
}

// WaitTake waits for p.Worker's bell for up to p.Wait, then takes.
func (s *Shard) WaitTake(ctx context.Context, p *broker.TakeParams) (*broker.TakeResult, error) {
	if _, err := s.WaitBell(ctx, &broker.WaitBellParams{Worker: p.Worker, Timeout: p.Wait}); err != nil {
		return nil, err
	}
	return s.Take(ctx, p)
}

// WaitBell pops a token off p.Worker's bell, waiting up to p.Timeout for
// one, and reports whether it got one.
func (s *Shard) WaitBell(ctx context.Context, p *broker.WaitBellParams) (bool, error) {
	t := time.NewTimer(p.Timeout)
	defer t.Stop()
	for {
		s.mu.Lock()
		if err := s.rec.Call("waitbell"); err != nil {
			s.mu.Unlock()
			return false, err
		}
		if toks := s.tokens[p.Worker]; len(toks) > 0 {
			s.tokens[p.Worker] = toks[1:]
			s.mu.Unlock()
			return true, nil
		}
		rung := s.rungLocked(p.Worker)
		s.mu.Unlock()
		select {
		case <-rung:
		case <-t.C:
			return false, nil
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}

// RingStop pushes two stop tokens on p.Worker's bell, as a worker that
// stops does: a wait ends, and takes take nothing while they last.
func (s *Shard) RingStop(_ context.Context, p *broker.RingStopParams) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.rec.Call("ringstop"); err != nil {
		return err
	}
	s.ringLocked(p.Worker, "stop", "stop")
	return nil
}

// Finish delivers each result whose task is still in its task set, once,
// removing the task; it releases every task reported from the worker's
// held set. An empty result only releases. As Redis, it refuses a result
// over maxResult for want of memory (in Full, the others delivered), and a
// call over maxCall times out (every result in Failed).
func (s *Shard) Finish(_ context.Context, p *broker.FinishParams) (*wire.Finished, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.rec.Call("finish"); err != nil {
		if isOOM(err) {
			return &wire.Finished{Full: p.Done}, err
		}
		return &wire.Finished{Failed: p.Done}, err
	}
	if size := bytesOf(p.Done); s.maxCall > 0 && size > s.maxCall {
		return &wire.Finished{Failed: p.Done}, fmt.Errorf("finish of %d bytes: read tcp: i/o timeout", size)
	}
	got := &wire.Finished{}
	var err error
	for _, d := range p.Done {
		if s.maxResult > 0 && len(d.Result) > s.maxResult {
			got.Full = append(got.Full, d)
			err = ErrOOM
			continue
		}
		got.Sent++
		delete(s.held[p.Worker], d.ID)
		delete(s.held[p.Worker], "!"+d.ID)
		if _, wanted := s.tasks[d.ID]; wanted && len(d.Result) > 0 {
			delete(s.tasks, d.ID)
			s.done = append(s.done, d)
			s.pushLocked(id.Manager(d.ID), string(d.Result))
			got.Delivered++
		}
	}
	return got, err
}

// GiveBack puts back, at the front of their lists, those of p.Members the
// worker holds whose tasks are still wanted, an attempt counted if they
// ran, and returns how many; it releases every one it holds.
func (s *Shard) GiveBack(_ context.Context, p *broker.GiveBackParams) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.rec.Call("giveback"); err != nil {
		return 0, err
	}
	n := 0
	for _, m := range p.Members {
		if !s.held[p.Worker][m] {
			continue
		}
		delete(s.held[p.Worker], m)
		tid := wire.HeldID(m)
		t, ok := s.tasks[tid]
		if !ok {
			continue
		}
		if p.Ran {
			t.attempt++
			s.tasks[tid] = t
		}
		if m != tid {
			s.private[p.Worker] = append([]string{tid}, s.private[p.Worker]...)
		} else {
			s.public = append([]string{tid}, s.public...)
		}
		n++
	}
	return n, nil
}

// Held returns the members of p.Worker's held set.
func (s *Shard) Held(_ context.Context, p *broker.HeldParams) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.rec.Call("held"); err != nil {
		return nil, err
	}
	return s.heldLocked(p.Worker), nil
}

// Unwanted returns those of p.Tasks no longer in their task sets, and
// those of them that got a copy (outrun), as unwanted.lua.
func (s *Shard) Unwanted(_ context.Context, p *broker.UnwantedParams) (*broker.UnwantedResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.rec.Call("unwanted"); err != nil {
		return nil, err
	}
	out := &broker.UnwantedResult{}
	for _, tid := range p.Tasks {
		s.asked[tid]++
		if _, ok := s.tasks[tid]; !ok {
			out.Tasks = append(out.Tasks, tid)
			if s.copied[tid] {
				out.Outrun = append(out.Outrun, tid)
			}
		}
	}
	return out, nil
}

// Heartbeat renews p.Worker's lease (a negative one ends it) and records
// its info.
func (s *Shard) Heartbeat(_ context.Context, p *broker.HeartbeatParams) (*wire.Beat, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.rec.Call("heartbeat"); err != nil {
		return nil, err
	}
	s.leases[p.Worker] = time.Now().Add(p.Lease)
	if p.Info != nil {
		s.infos = append(s.infos, *p.Info)
	}
	return &wire.Beat{Drain: s.drain[p.Worker], Shards: s.count}, nil
}

// Reap reaps the workers whose lease deadline passed, as reap.lua: their
// public tasks still wanted go back to the front of the list with an
// attempt counted (idle workers are rung for them), their private ones are
// lost (a lost entry goes to the manager in place of a result), and their
// bell and drain go.
func (s *Shard) Reap(context.Context) (*wire.Reaped, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.rec.Call("reap"); err != nil {
		return nil, err
	}
	return s.reapLocked(time.Now()), nil
}

func (s *Shard) reapLocked(now time.Time) *wire.Reaped {
	out := &wire.Reaped{}
	dead := map[string]bool{}
	for wid, until := range s.leases {
		if !until.After(now) {
			dead[wid] = true
		}
	}
	for _, wid := range slices.Sorted(maps.Keys(dead)) {
		for _, m := range s.heldLocked(wid) {
			tid := wire.HeldID(m)
			t, ok := s.tasks[tid]
			switch {
			case !ok:
			case m != tid:
				s.loseLocked(tid, wid)
				out.Lost++
			default:
				t.attempt++
				s.tasks[tid] = t
				s.public = append([]string{tid}, s.public...)
				out.Requeued++
			}
		}
		for _, tid := range s.private[wid] {
			if _, ok := s.tasks[tid]; ok {
				s.loseLocked(tid, wid)
				out.Lost++
			}
		}
		delete(s.held, wid)
		delete(s.private, wid)
		delete(s.leases, wid)
		delete(s.tokens, wid)
		delete(s.drain, wid)
		delete(s.idle, wid)
		out.Workers++
	}
	s.ringIdle(out.Requeued)
	return out
}

// Retire ends p.Worker's lease and reaps it.
func (s *Shard) Retire(_ context.Context, p *broker.RetireParams) (*wire.Reaped, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.rec.Call("retire"); err != nil {
		return nil, err
	}
	s.retired[p.Worker] = true
	if p.Info != nil {
		s.infos = append(s.infos, *p.Info)
	}
	s.leases[p.Worker] = time.Time{}
	return s.reapLocked(time.Now()), nil
}

// Depth counts the task ids on the public list.
func (s *Shard) Depth(context.Context) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(len(s.public)), s.rec.Call("depth")
}

// Preflight checks nothing: memory allows every command.
func (s *Shard) Preflight(context.Context, *broker.PreflightParams) error {
	return s.rec.Call("preflight")
}

// PublishError records nothing but the call.
func (s *Shard) PublishError(context.Context, *broker.PublishErrorParams) {
	_ = s.rec.Call("publisherror")
}

// CountFailures records the groups and returns the failures they add.
func (s *Shard) CountFailures(_ context.Context, p *broker.CountFailuresParams) (*broker.CountFailuresResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.rec.Call("countfailures"); err != nil {
		return nil, err
	}
	out := &broker.CountFailuresResult{}
	for _, g := range p.Groups {
		out.Added += g.Count
	}
	s.groups = append(s.groups, p.Groups...)
	return out, nil
}

// LoseManagers loses none: a memory queue has no managers' progress.
func (s *Shard) LoseManagers(context.Context) (int, error) {
	return 0, s.rec.Call("losemanagers")
}

// ShardNames returns the queue's list of shard names.
func (s *Shard) ShardNames(context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.names), s.rec.Call("shardnames")
}

// Types returns the structure published for p.Sig, nil if none.
func (s *Shard) Types(_ context.Context, p *broker.TypesParams) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.rec.Call("types"); err != nil {
		return nil, err
	}
	return slices.Clone(s.types[p.Sig]), nil
}

// PublishTypes publishes the structure of p.Sig.
func (s *Shard) PublishTypes(_ context.Context, p *broker.PublishTypesParams) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.rec.Call("publishtypes"); err != nil {
		return err
	}
	s.types[p.Sig] = slices.Clone(p.Types)
	return nil
}

// DeclareLimit limits nothing: a memory queue has no limits in force.
func (s *Shard) DeclareLimit(context.Context, *broker.DeclareLimitParams) (*broker.LimitResult, error) {
	return &broker.LimitResult{}, s.rec.Call("declarelimit")
}

// Throttle has no rate to pause.
func (s *Shard) Throttle(context.Context, *broker.ThrottleParams) (bool, error) {
	return false, s.rec.Call("throttle")
}

var _ broker.Queue = (*Shard)(nil)

// loseLocked fails private task tid of dead worker wid: its manager gets a
// lost entry in place of a result.
func (s *Shard) loseLocked(tid, wid string) {
	delete(s.tasks, tid)
	s.pushLocked(id.Manager(tid), wire.EncodeEntry(wire.Entry{Kind: wire.EntryLost, Task: tid, Worker: wid}))
}

func (s *Shard) holdLocked(wid, member string) {
	if s.held[wid] == nil {
		s.held[wid] = map[string]bool{}
	}
	s.held[wid][member] = true
}

func (s *Shard) heldLocked(wid string) []string {
	return slices.Sorted(maps.Keys(s.held[wid]))
}

// rungLocked returns the channel closed when a token is next pushed on
// wid's bell.
func (s *Shard) rungLocked(wid string) chan struct{} {
	c, ok := s.rung[wid]
	if !ok {
		c = make(chan struct{})
		s.rung[wid] = c
	}
	return c
}

// ringLocked pushes tokens on wid's bell, and wakes its wait.
func (s *Shard) ringLocked(wid string, tokens ...string) {
	s.tokens[wid] = append(s.tokens[wid], tokens...)
	delete(s.idle, wid)
	if c, ok := s.rung[wid]; ok {
		close(c)
		delete(s.rung, wid)
	}
}

// ringIdle rings up to n idle workers, as a submit of n tasks does.
func (s *Shard) ringIdle(n int) {
	for _, wid := range slices.Sorted(maps.Keys(s.idle)) {
		if n <= 0 {
			return
		}
		s.ringLocked(wid, "1")
		n--
	}
}

func isOOM(err error) bool {
	var o oom
	return errors.As(err, &o)
}

func bytesOf(ds []wire.Done) int {
	n := 0
	for _, d := range ds {
		n += len(d.Result) + len(d.Record)
	}
	return n
}
