package worker

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/redmap/redmap/internal/await"
	"github.com/redmap/redmap/internal/rdb"
	"github.com/redmap/redmap/internal/wire"
)

// fakeShard is a shard of a queue in memory, for the unit tests of the
// worker's parts: the seam's other side (shardRedis, queueRedis). It keeps
// a public list, the worker's held set and the reported results, and
// records what the parts asked of it.
type fakeShard struct {
	i    int
	name string

	mu       sync.Mutex
	bell     chan struct{} // closed and replaced when tasks come or the bell rings
	queue    []wire.Taken
	held     map[string]wire.Taken // member → task
	finished []wire.Done
	unwanted map[string]bool
	asked    map[string]int // how often Unwanted was asked about each task
	rec      await.Calls    // its calls, and the errors they are to return
	holdings []int          // the holding argument of each take
	shards   int            // what takes say of the queue's shard count
	names    []string
	drain    bool
	infos    []wire.WorkerInfo
	groups   []wire.FailureGroup // what CountFailures was given
	reaped   wire.Reaped
	retired  bool
	// maxResult, if set, is the largest result Finish takes: a call with a
	// larger one fails as Redis at maxmemory refuses staged results.
	maxResult int
	// maxCall, if set, is the most bytes of results a Finish call carries
	// in time: a larger call times out, as over a link too slow for it.
	maxCall int
}

// oom is the error reply of Redis at maxmemory.
type oom string

func (e oom) Error() string { return string(e) }
func (oom) RedisError()     {}

func newFakeShard(i int, name string) *fakeShard {
	return &fakeShard{i: i, name: name, bell: make(chan struct{}), held: make(map[string]wire.Taken),
		unwanted: make(map[string]bool), asked: make(map[string]int), rec: await.Calls{Activity: &activity}, shards: 1}
}

func (f *fakeShard) call(op string) error { return f.rec.Call(op) }

func (f *fakeShard) callsOf(op string) int { return f.rec.Of(op) }

func (f *fakeShard) setFail(op string, err error) { f.rec.SetFail(op, err) }

func (f *fakeShard) ring() {
	close(f.bell)
	f.bell = make(chan struct{})
}

// add queues tasks.
func (f *fakeShard) add(ts ...wire.Taken) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, t := range ts {
		t.Shard = f.i
		f.queue = append(f.queue, t)
	}
	f.ring()
}

func (f *fakeShard) results() []wire.Done {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.finished)
}

func (f *fakeShard) heldNow() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ms []string
	for m := range f.held {
		ms = append(ms, m)
	}
	slices.Sort(ms)
	return ms
}

func (f *fakeShard) Shard() int   { return f.i }
func (f *fakeShard) Name() string { return f.name }

func (f *fakeShard) Take(_ context.Context, p *rdb.TakeParams) ([]wire.Taken, wire.TakeEnd, error) {
	n, holding, known := p.Max, p.Holding, p.Shards
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("take"); err != nil {
		return nil, wire.TakeEnd{}, err
	}
	f.holdings = append(f.holdings, holding)
	var taken []wire.Taken
	end := wire.TakeEnd{}
	for len(taken) < n && len(f.queue) > 0 {
		t := f.queue[0]
		if t.Suspect() && (len(taken) > 0 || holding > 0 || len(f.held) > 0) {
			end.Suspect = true // a suspect goes only to a worker holding nothing
			break
		}
		f.queue = f.queue[1:]
		taken = append(taken, t)
		f.held[t.Member()] = t
		if t.Suspect() {
			break // alone
		}
	}
	// As take.lua: a take that ends with a suspect is not drained, even if
	// it emptied the lists (TestTakeConformance).
	end.Drained = len(f.queue) == 0 && !(len(taken) > 0 && taken[len(taken)-1].Suspect())
	if f.shards > known {
		end.Shards = f.shards
	}
	return taken, end, nil
}

func (f *fakeShard) WaitTake(ctx context.Context, p *rdb.TakeParams) ([]wire.Taken, wire.TakeEnd, error) {
	if _, err := f.WaitBell(ctx, p.Worker, p.Wait); err != nil {
		return nil, wire.TakeEnd{}, err
	}
	return f.Take(ctx, p)
}

func (f *fakeShard) WaitBell(ctx context.Context, _ string, timeout time.Duration) (bool, error) {
	f.mu.Lock()
	if len(f.queue) > 0 {
		f.mu.Unlock()
		return true, nil
	}
	bell := f.bell
	f.mu.Unlock()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-bell:
		return true, nil
	case <-t.C:
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

func (f *fakeShard) RingStop(context.Context, string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ring()
	return f.call("ringstop")
}

func (f *fakeShard) Finish(_ context.Context, _ string, done []wire.Done) (wire.Finished, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("finish"); err != nil {
		if rdb.OutOfMemory(err) {
			return wire.Finished{Full: done}, err
		}
		return wire.Finished{Failed: done}, err
	}
	if size := bytesOf(done); f.maxCall > 0 && size > f.maxCall {
		return wire.Finished{Failed: done}, fmt.Errorf("finish of %d bytes: read tcp: i/o timeout", size)
	}
	var got wire.Finished
	var err error
	for _, d := range done {
		if f.maxResult > 0 && len(d.Result) > f.maxResult {
			// As Redis at maxmemory refuses a staged result, apart.
			got.Full = append(got.Full, d)
			err = oom("OOM command not allowed when used memory > 'maxmemory'.")
			continue
		}
		got.Sent++
		if _, ok := f.held[d.ID]; ok {
			delete(f.held, d.ID)
			f.finished = append(f.finished, d)
			got.Delivered++
		}
	}
	return got, err
}

// bytesOf returns the bytes of ds' results and records.
func bytesOf(ds []wire.Done) int {
	n := 0
	for _, d := range ds {
		n += len(d.Result) + len(d.Record)
	}
	return n
}

func (f *fakeShard) GiveBack(_ context.Context, _ string, members []string, ran bool) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("giveback"); err != nil {
		return 0, err
	}
	n := 0
	for _, m := range members {
		if t, ok := f.held[m]; ok {
			delete(f.held, m)
			if ran {
				t.Attempt++
			}
			f.queue = append([]wire.Taken{t}, f.queue...)
			n++
		}
	}
	if n > 0 {
		f.ring()
	}
	return n, nil
}

func (f *fakeShard) Held(context.Context, string) ([]string, error) {
	ms := f.heldNow()
	f.mu.Lock()
	defer f.mu.Unlock()
	return ms, f.call("held")
}

func (f *fakeShard) Unwanted(_ context.Context, _ string, tids []string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("unwanted"); err != nil {
		return nil, err
	}
	var out []string
	for _, tid := range tids {
		f.asked[tid]++
		if f.unwanted[tid] {
			out = append(out, tid)
		}
	}
	return out, nil
}

func (f *fakeShard) Heartbeat(_ context.Context, _ string, _ time.Duration, info *wire.WorkerInfo) (wire.Beat, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("heartbeat"); err != nil {
		return wire.Beat{}, err
	}
	if info != nil {
		f.infos = append(f.infos, *info)
	}
	return wire.Beat{Drain: f.drain, Shards: f.shards}, nil
}

func (f *fakeShard) Reap(context.Context) (wire.Reaped, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.reaped
	f.reaped = wire.Reaped{}
	return r, f.call("reap")
}

func (f *fakeShard) Retire(context.Context, string, *wire.WorkerInfo) (wire.Reaped, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.retired = true
	return wire.Reaped{}, f.call("retire")
}

func (f *fakeShard) Depth(context.Context) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return int64(len(f.queue)), f.call("depth")
}

func (f *fakeShard) Preflight(context.Context, time.Duration, time.Duration, *slog.Logger) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.call("preflight")
}

func (f *fakeShard) PublishError(context.Context, string, time.Duration, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_ = f.rec.Call("publisherror")
}

func (f *fakeShard) CountFailures(_ context.Context, _ string, gs []wire.FailureGroup) (int64, int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("failures"); err != nil {
		return 0, 0, err
	}
	var n int64
	for _, g := range gs {
		n += g.Count
	}
	f.groups = append(f.groups, gs...)
	return n, 0, nil
}

func (f *fakeShard) LoseManagers(context.Context) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return 0, f.call("losemanagers")
}

func (f *fakeShard) ShardNames(context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.names), f.call("names")
}

func (f *fakeShard) PublishTypes(context.Context, string, []string) error { return nil }

// DeclareLimit and Throttle: the fake queue limits nothing.
func (f *fakeShard) DeclareLimit(context.Context, string, wire.LimitRecord) (wire.Limit, string, error) {
	return wire.Limit{}, "", nil
}

func (f *fakeShard) Throttle(context.Context, string, time.Duration) (bool, error) { return false, nil }

func (f *fakeShard) Types(context.Context, string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return nil, f.call("types")
}

// fakeQueue is a queue of shards in memory: shard 0 first, then the ones
// a worker opens as it grows, by name.
type fakeQueue struct {
	mu     sync.Mutex
	shards []*fakeShard
}

func newFakeQueue(names ...string) *fakeQueue {
	q := &fakeQueue{}
	q.shards = append(q.shards, newFakeShard(0, "q"))
	for i, n := range names {
		q.shards = append(q.shards, newFakeShard(i+1, n))
	}
	q.shards[0].names = names
	q.shards[0].shards = len(q.shards)
	return q
}

// source returns a source over the queue.
func (q *fakeQueue) source(failed func(string, error)) *source {
	return newSource(sourceParams{wid: "w1", lease: time.Minute, idleWait: 20 * time.Millisecond, first: q.shards[0], serves: func() []string { return nil },
		open: func(name string, i int) shardRedis {
			q.mu.Lock()
			defer q.mu.Unlock()
			for _, s := range q.shards {
				if s.name == name {
					return s
				}
			}
			panic("no shard " + name)
		},
		failed: failed, log: slog.New(slog.DiscardHandler)})
}

// activity is notified at every call to a fake: what until waits on.
var activity await.Broadcast
