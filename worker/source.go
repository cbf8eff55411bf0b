package worker

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redmap/redmap/internal/backoff"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
)

// source is the worker's queue in Redis as its parts see it: one queue,
// however many shards its managers spread it over (manager.Options.Shards).
// It is where the worker's sharding lives: which shards it serves (it grows
// when managers use more, and never shrinks: a name Redis lost stays
// served), the fair rotation of takes over them, their bells, and the
// calls that go to every shard (heartbeat, reap, retire) or to a task's
// own (finish, give back, the check that a task is still wanted).
//
// Each take starts at the shard after the one that gave tasks last, and
// skips the shards the worker waits on (their last take left them empty).
// A bell listener per shard waits for the rings of those shards, since one
// BLPOP cannot wait on keys of different Cluster slots. A queue of one
// shard waits in its take instead (WaitTake).
type source struct {
	sourceParams
	growMu sync.Mutex                     // serialises growth
	list   atomic.Pointer[[]broker.Shard] // the shards served; it only grows

	// Owned by the fetch loop (await, take):
	// waiting[i]: the last take of shard i left it empty and registered the
	// worker idle there; the next take of it waits for its bell first.
	waiting   []bool
	due       time.Time // when a limit's next token is due, if a take waits on one (shard 0's: limited tasks are all there)
	next      int       // the shard to try first
	listening int       // shards with a listener

	wake      chan struct{} // a listener heard a bell ring
	rungMu    sync.Mutex
	rung      map[int]bool // the shards whose bells rang since the fetch loop last looked
	listeners sync.WaitGroup
}

// sourceParams is what a source is built from.
type sourceParams struct {
	wid      string
	lease    time.Duration // Options.Lease
	idleWait time.Duration // Options.IdleWait
	first    broker.Queue
	// serves is what the worker registered, "<name>\t<signature>" each: a
	// take passes lanes whose tasks call anything else.
	serves func() []string
	// open returns shard i of the queue, named name (redisbroker.NewShard).
	open   func(name string, i int) broker.Shard
	failed func(op string, err error) // logs a failed call, for operators
	log    *slog.Logger
}

func newSource(p sourceParams) *source {
	s := &source{sourceParams: p, wake: make(chan struct{}, 1), rung: make(map[int]bool)}
	s.list.Store(&[]broker.Shard{p.first})
	return s
}

// shards returns the shards the worker serves: one, until it learns that
// managers spread the queue over more.
func (s *source) shards() []broker.Shard { return *s.list.Load() }

// shard returns shard i, which the worker serves.
func (s *source) shard(i int) broker.Shard { return s.shards()[i] }

// grow serves every shard the queue's list of shard names names, if the
// worker knows that there are n shards and serves fewer: one LRANGE.
func (s *source) grow(ctx context.Context, n int) {
	if n <= len(s.shards()) {
		return
	}
	s.growMu.Lock()
	defer s.growMu.Unlock()
	old := s.shards()
	if n <= len(old) {
		return
	}
	names, err := s.first.ShardNames(ctx)
	if err != nil {
		s.failed("read the queue's shard names", err)
		return
	}
	grown := slices.Clip(old)
	for _, name := range names {
		if !slices.ContainsFunc(grown, func(r broker.Shard) bool { return r.Name() == name }) {
			grown = append(grown, s.open(name, len(grown)))
		}
	}
	if len(grown) > len(old) {
		s.list.Store(&grown)
		s.log.Info("serving more shards of the queue, as its managers spread tasks over them", "shards", len(grown))
	}
}

// round is what one round of takes brought.
type round struct {
	taken        []wire.Taken
	err          error // the first take that failed, if none gave tasks
	suspectWaits bool  // a take left a suspect for when the worker holds nothing
	holding      int   // what the worker held by its ledger at the last take
	// room: a task of a limited function waits for the worker to have room
	// to start it (end.Room); the fetcher takes again once a task ends.
	room bool
	// drained: the take that gave tasks left its shard empty, so the next
	// take of it waits for its bell.
	drained bool
}

// await waits, on a queue of several shards, while the worker waits on
// every shard, for a bell to ring or IdleWait to pass (starting listeners
// for new shards); it reports false if ctx ended.
func (s *source) await(ctx context.Context) bool {
	shards := s.shards()
	for len(s.waiting) < len(shards) {
		s.waiting = append(s.waiting, false)
	}
	if len(shards) == 1 {
		return true
	}
	s.listen(ctx, shards)
	s.heard()
	if !slices.Contains(s.waiting, false) {
		if !s.sleep(ctx) {
			return false
		}
		if !s.heard() {
			clear(s.waiting) // the wait timed out: look at every shard
		}
	}
	return true
}

// take takes up to free tasks from the first shard that gives some,
// starting at the one after the shard that gave tasks last, skipping those
// the worker waits on; holding says what the worker holds by its ledger
// (see take.lua's suspect rule), room how many tasks of limited functions
// it could start now. A take of shard 0 says when managers use more shards:
// the source grows after it.
func (s *source) take(ctx context.Context, free int, room func() int, holding func() int) (r round) {
	shards := s.shards()
	for len(s.waiting) < len(shards) {
		s.waiting = append(s.waiting, false)
	}
	start := s.next
	known, said := len(shards), 0 // the shard count the worker serves; what shard 0 said, if more
	for tries := 0; tries < len(shards) && len(r.taken) == 0; tries++ {
		i := (start + tries) % len(shards)
		if s.waiting[i] && len(shards) > 1 {
			continue
		}
		var end wire.TakeEnd
		var err error
		if i == 0 && s.waiting[0] && !s.due.IsZero() && time.Until(s.due) < time.Second {
			// A limit's token is due within a second: Redis times a
			// BLPOP out at its cron's tick (a tenth of a second by
			// default), late by up to that much each time, which would
			// slow a rate of 100/s to 70; a timer here is on time. A bell
			// that rings meanwhile is heard at the take, that much later.
			if !backoff.Sleep(ctx, time.Until(s.due)) {
				r.err = ctx.Err()
				return r
			}
			s.waiting[0] = false
		}
		r.holding = holding()
		p := &broker.TakeParams{Worker: s.wid, Max: free, Room: room(), Lease: s.lease, Holding: r.holding, Shards: known, Serves: s.serves()}
		var got *broker.TakeResult
		if s.waiting[i] {
			p.Wait = s.wait()
			got, err = shards[i].WaitTake(ctx, p)
		} else {
			got, err = shards[i].Take(ctx, p)
		}
		if err == nil {
			r.taken, end = got.Taken, got.End
		}
		if err != nil {
			// Try the other shards (on a Cluster, another master may
			// answer), and this one first again no sooner than after them.
			r.err = cmp.Or(r.err, err)
			s.next = (i + 1) % len(shards)
			continue
		}
		// A take that left the shard empty registered the worker idle
		// there: the next take of it waits for its bell (a take now would
		// find nothing).
		s.waiting[i] = end.Drained
		if i == 0 {
			// A limit refused a task: the wait for the bell ends when its
			// token is due, the next take takes it.
			s.due = time.Time{}
			if end.Wait > 0 {
				s.due = time.Now().Add(end.Wait)
			}
		}
		r.room = r.room || end.Room
		if len(r.taken) > 0 {
			s.next, r.err, r.drained = (i+1)%len(shards), nil, end.Drained
		}
		said = max(said, end.Shards)
		if end.Suspect {
			// A suspect waits here for the worker to hold nothing: the
			// worker now empties, and its next take starts here, so that
			// no take of another shard fills it again first (else, while
			// the other shards have tasks, the suspect waits for ever).
			r.suspectWaits, s.next = true, i
			break
		}
	}
	s.grow(ctx, said)
	return r
}

// listen starts a bell listener for each of shards that has none.
func (s *source) listen(ctx context.Context, shards []broker.Shard) {
	for ; s.listening < len(shards); s.listening++ {
		r := shards[s.listening]
		s.listeners.Go(func() { s.listenTo(ctx, r) })
	}
}

// listenTo waits for the rings of shard r's bell until ctx ends, and tells
// the fetch loop of each.
func (s *source) listenTo(ctx context.Context, r broker.Shard) {
	var bo backoff.Backoff
	for ctx.Err() == nil {
		rang, err := r.WaitBell(ctx, &broker.WaitBellParams{Worker: s.wid, Timeout: s.idleWait})
		if err != nil {
			if ctx.Err() == nil {
				s.failed("wait", err)
				bo.Wait(ctx)
			}
			continue
		}
		bo.Reset()
		if rang {
			s.rungMu.Lock()
			s.rung[r.Shard()] = true
			s.rungMu.Unlock()
			select {
			case s.wake <- struct{}{}:
			default:
			}
		}
	}
}

// heard marks the shards whose bells rang since it was last called as no
// longer waited on, and reports whether there were any.
func (s *source) heard() bool {
	s.rungMu.Lock()
	defer s.rungMu.Unlock()
	rang := len(s.rung) > 0
	for i := range s.rung {
		if i < len(s.waiting) {
			s.waiting[i] = false
		}
	}
	clear(s.rung)
	return rang
}

// wait returns how long the worker waits for a bell: IdleWait, or less if
// a limit's next token is due sooner.
func (s *source) wait() time.Duration {
	if s.due.IsZero() {
		return s.idleWait
	}
	return max(min(time.Until(s.due), s.idleWait), time.Millisecond)
}

// sleep waits, while the worker waits on every shard, for a bell to ring or
// IdleWait to pass (less if a limit's token is due sooner); it reports
// false if ctx ended.
func (s *source) sleep(ctx context.Context) bool {
	t := time.NewTimer(s.wait())
	defer t.Stop()
	select {
	case <-s.wake:
	case <-t.C:
	case <-ctx.Done():
		return false
	}
	return true
}

// stopped rings the worker's own bells, so that a blocking wait for work
// returns now rather than at its timeout.
func (s *source) stopped(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	for _, r := range s.shards() {
		_ = r.RingStop(rctx, &broker.RingStopParams{Worker: s.wid})
	}
}

// closed waits for the bell listeners (whose context has ended) to return.
// Only the fetch loop starts listeners, so it is called once that loop has
// returned: a listener started while a stop was under way is waited for too.
func (s *source) closed() {
	s.listeners.Wait()
}

// finish reports results, one call per shard they came from (each cut in
// calls of at most broker.CallBytes), and returns what they came to, with
// the first error.
func (s *source) finish(ctx context.Context, done []wire.Done) (wire.Finished, error) {
	var out wire.Finished
	var err error
	for i, group := range byShard(done, func(d wire.Done) int { return d.Shard }) {
		got, ferr := s.shard(i).Finish(ctx, &broker.FinishParams{Worker: s.wid, Done: group})
		if got == nil { // said nothing of what it reported: nothing was
			got = &wire.Finished{Failed: group}
		}
		out.Sent += got.Sent
		out.Delivered += got.Delivered
		out.Full = append(out.Full, got.Full...)
		out.Failed = append(out.Failed, got.Failed...)
		err = cmp.Or(err, ferr)
	}
	return out, err
}

// byShard groups xs by shard, in one group if there is one shard.
func byShard[T any](xs []T, shardOf func(T) int) map[int][]T {
	if len(xs) > 0 && !slices.ContainsFunc(xs[1:], func(x T) bool { return shardOf(x) != shardOf(xs[0]) }) {
		return map[int][]T{shardOf(xs[0]): xs} // no copy, grown one by one, of a batch of results
	}
	out := make(map[int][]T)
	for _, x := range xs {
		i := shardOf(x)
		out[i] = append(out[i], x)
	}
	return out
}

// giveBack puts held members back in their shards' queues, their attempt
// counted if they ran, and returns how many went back.
func (s *source) giveBack(ctx context.Context, members map[int][]string, ran bool) (int, error) {
	var given int
	var err error
	for i, ms := range members {
		n, gerr := s.shard(i).GiveBack(ctx, &broker.GiveBackParams{Worker: s.wid, Members: ms, Ran: ran})
		given += n
		err = cmp.Or(err, gerr)
	}
	return given, err
}

// unwanted returns those of tids (by shard) whose managers no longer want
// them.
func (s *source) unwanted(ctx context.Context, tids map[int][]string) (broker.UnwantedResult, error) {
	var out broker.UnwantedResult
	for i, ts := range tids {
		u, err := s.shard(i).Unwanted(ctx, &broker.UnwantedParams{Worker: s.wid, Tasks: ts})
		if err != nil {
			return out, err
		}
		out.Tasks = append(out.Tasks, u.Tasks...)
		out.Outrun = append(out.Outrun, u.Outrun...)
	}
	return out, nil
}

// held returns, for each shard, the members Redis says the worker holds.
func (s *source) held(ctx context.Context) (map[int][]string, error) {
	out := make(map[int][]string)
	for i, r := range s.shards() {
		ms, err := r.Held(ctx, &broker.HeldParams{Worker: s.wid})
		if err != nil {
			return out, err
		}
		out[i] = ms
	}
	return out, nil
}

// heartbeat renews the worker's lease on every shard, publishing info in
// shard 0, and serves more shards if the queue's managers now use more.
// Every shard's lease is renewed even if another's Redis fails: on a
// Cluster with a master down, the worker still holds its tasks of the
// others.
func (s *source) heartbeat(ctx context.Context, info *wire.WorkerInfo) (wire.Beat, error) {
	var beat wire.Beat
	got, err := s.first.Heartbeat(ctx, &broker.HeartbeatParams{Worker: s.wid, Lease: s.lease, Info: info})
	if err == nil {
		beat = *got
		s.grow(ctx, beat.Shards)
	}
	for _, r := range s.shards()[1:] {
		if _, serr := r.Heartbeat(ctx, &broker.HeartbeatParams{Worker: s.wid, Lease: s.lease}); serr != nil && err == nil {
			err = serr
		}
	}
	return beat, err
}

// reap gives the tasks of workers whose lease expired back to the queue,
// on every shard, and returns what it did in all.
func (s *source) reap(ctx context.Context) (wire.Reaped, error) {
	var all wire.Reaped
	for _, r := range s.shards() {
		got, err := r.Reap(ctx)
		if err != nil {
			return all, err
		}
		all.Workers += got.Workers
		all.Requeued += got.Requeued
		all.Lost += got.Lost
	}
	return all, nil
}

// retire ends the worker's lease on every shard: tasks left in its private
// lists are reported lost to their managers; shard 0 lists it as stopped,
// with its last info.
func (s *source) retire(ctx context.Context, last wire.WorkerInfo) {
	for _, r := range s.shards() {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var info *wire.WorkerInfo
		if r.Shard() == 0 {
			info = &last
		}
		if reaped, err := r.Retire(rctx, &broker.RetireParams{Worker: s.wid, Info: info}); err != nil {
			s.log.Warn("retiring failed; the lease will expire", "err", err)
		} else if reaped.Lost > 0 {
			s.log.Warn("private tasks left unrun were reported lost", "tasks", reaped.Lost)
		}
		cancel()
	}
}

// depth counts the task ids waiting in the public lists of every shard.
func (s *source) depth(ctx context.Context) (int64, error) {
	var total int64
	for _, r := range s.shards() {
		n, err := r.Depth(ctx)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}
