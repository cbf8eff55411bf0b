package worker

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/redisbroker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
)

// What the unit tests of the worker's parts run on: a queue on the
// package's shared redis-server (a fresh name for each test), set up as
// its managers would leave it (scene), each shard seen through faulty,
// which returns the error a test asks for from an operation and records
// what tests look at of the calls.

// scene is a queue of shards on a redis-server, and the side of a manager
// that sets scenes on it: it submits tasks, withdraws them, reads what was
// delivered to it.
type scene struct {
	t      *testing.T
	c      *redis.Client
	name   string
	mid    string
	shards []*faulty
	counts []int64         // each shard's task set count: what its next submit expects
	lanes  map[string]lane // the lane of each function's tasks, by "<name>\t<signature>"
	seq    uint64
}

// newScene returns a queue of n shards on the package's shared server,
// shard 0 listing the others as a manager that spreads its tasks over them
// does.
func newScene(t *testing.T, n int) *scene { return sceneOn(t, redistest.Shared(t), n) }

// sceneOn is newScene on server srv.
func sceneOn(t *testing.T, srv *redistest.Server, n int) *scene {
	t.Helper()
	s := &scene{t: t, c: srv.Client(t), name: redistest.Queue(t), mid: id.New(), counts: make([]int64, n), lanes: map[string]lane{}}
	var names []string
	for i := range n {
		name := s.name
		if i > 0 {
			name = keys.Shard(s.name, i)
			names = append(names, name)
		}
		s.shards = append(s.shards, &faulty{Queue: redisbroker.NewShard(s.c, DefaultPrefix, name, i)})
	}
	if n > 1 {
		if _, err := s.first().AddShards(context.Background(), &broker.ShardsParams{Names: names}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// first returns shard 0.
func (s *scene) first() *faulty { return s.shards[0] }

// open returns the shard named name, as a worker opens shard i.
func (s *scene) open(name string, i int) broker.Shard {
	for _, r := range s.shards {
		if r.Name() == name {
			return r
		}
	}
	s.t.Errorf("opened shard %d, %q: no such shard", i, name)
	return nil
}

// serves is what a worker registers to take every task the scene queued.
func (s *scene) serves() []string {
	var out []string
	for calls := range s.lanes {
		out = append(out, calls)
	}
	slices.Sort(out)
	return out
}

// task returns a task of h over xs, with a new id of the scene's manager
// and attempt attempts lost.
func (s *scene) task(h *redmap.Handle[int, int], attempt int, xs ...int) wire.Taken {
	s.t.Helper()
	in, err := codec.EncodeElements(xs, 0)
	if err != nil {
		s.t.Fatal(err)
	}
	payload, err := codec.EncodeTask(&codec.Task{Func: h.Name(), Sig: h.Signature(), Count: len(xs), Input: in})
	if err != nil {
		s.t.Fatal(err)
	}
	calls := h.Name() + "\t" + h.Signature()
	l, ok := s.lanes[calls]
	if !ok {
		n := uint64(len(s.lanes) + 1)
		l = lane{Lane: wire.Lane{Name: s.mid + "." + strconv.FormatUint(n, 36), Calls: calls}, n: n}
		s.lanes[calls] = l
	}
	s.seq++
	return wire.Taken{ID: id.TaskIn(s.mid, s.seq, l.n, max(len(xs), 1), keys.DefaultPriority, keys.DefaultPriority),
		Attempt: attempt, Payload: payload}
}

// lane is a lane of the scene's manager, and its number, which its tasks'
// ids carry (id.TaskIn).
type lane struct {
	wire.Lane
	n uint64
}

// lane returns the lane of task t, which task made.
func (s *scene) lane(t wire.Taken) wire.Lane {
	d, err := codec.DecodeTask(t.Payload, 0)
	if err != nil {
		s.t.Fatal(err)
	}
	return s.lanes[d.Func+"\t"+d.Sig].Lane
}

// add submits tasks to shard i, in order, each on its function's lane,
// with their lost attempts, as a submit and reaps leave them.
func (s *scene) add(i int, ts ...wire.Taken) {
	s.t.Helper()
	ctx := context.Background()
	r := s.shards[i]
	for _, t := range ts {
		if t.Attempt > 0 {
			if err := s.c.HSet(ctx, keys.Attempts(DefaultPrefix, r.Name(), s.mid), t.ID, t.Attempt).Err(); err != nil {
				s.t.Fatal(err)
			}
		}
		got, err := r.Queue.Submit(ctx, &broker.SubmitParams{Manager: s.mid, Lane: s.lane(t), TTL: time.Hour,
			Tasks: []wire.Task{{ID: t.ID, Payload: t.Payload}}, Expect: wire.Expect{Count: s.counts[i], Epoch: "e1"}})
		if err != nil || !got.Intact {
			s.t.Fatalf("submit: %+v, %v", got, err)
		}
		s.counts[i] = got.Count
	}
}

// hold submits tasks to shard i and takes them as worker wid, as a take
// leaves them: in its held set.
func (s *scene) hold(i int, wid string, ts ...wire.Taken) {
	s.t.Helper()
	s.add(i, ts...)
	got, err := s.shards[i].Queue.Take(context.Background(), &broker.TakeParams{Worker: wid, Max: len(ts), Room: len(ts),
		Lease: time.Hour, Shards: len(s.shards), Serves: s.serves()})
	if err != nil {
		s.t.Fatal(err)
	}
	var want, took []string
	for _, t := range ts {
		want = append(want, t.ID)
	}
	for _, t := range got.Taken {
		took = append(took, t.ID)
	}
	if slices.Sort(want); !slices.Equal(slices.Sorted(slices.Values(took)), want) {
		s.t.Fatalf("worker %s took %v, want %v", wid, took, want)
	}
}

// withdraw withdraws tasks of shard i, as their manager does when their
// batch ends.
func (s *scene) withdraw(i int, tids ...string) {
	s.t.Helper()
	if err := s.shards[i].Queue.Cancel(context.Background(), &broker.CancelParams{Manager: s.mid, Tasks: tids}); err != nil {
		s.t.Fatal(err)
	}
}

// results returns the results delivered to the scene's manager on shard i,
// in order.
func (s *scene) results(i int) []*codec.Result {
	s.t.Helper()
	ctx := context.Background()
	r := s.shards[i].Queue
	entries, err := r.ReadResults(ctx, &broker.ReadResultsParams{Manager: s.mid})
	if err == nil {
		entries, err = r.Unstaged(ctx, &broker.EntriesParams{Manager: s.mid, Entries: entries})
	}
	if err != nil {
		s.t.Fatal(err)
	}
	var out []*codec.Result
	for _, e := range entries {
		d, err := wire.DecodeEntry(e, 1<<20)
		if err != nil || d.Result == nil {
			s.t.Fatalf("entry %.40q: %v", e, err)
		}
		out = append(out, d.Result)
	}
	return out
}

// delivered returns the ids of the tasks of the results delivered on shard
// i, in order.
func (s *scene) delivered(i int) []string {
	s.t.Helper()
	var out []string
	for _, r := range s.results(i) {
		out = append(out, r.Task)
	}
	return out
}

// heldBy returns the members of worker wid's held set on shard i, sorted.
func (s *scene) heldBy(i int, wid string) []string {
	s.t.Helper()
	ms, err := s.shards[i].Queue.Held(context.Background(), &broker.HeldParams{Worker: wid})
	if err != nil {
		s.t.Fatal(err)
	}
	slices.Sort(ms)
	return ms
}

// result returns a result of task tid with outputs of size bytes, as a
// worker reports it.
func result(t *testing.T, tid string, size int) []byte {
	t.Helper()
	b, err := codec.EncodeResult(&codec.Result{Task: tid, Values: make([]byte, size)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// faulty is a shard of the queue through which a test makes chosen
// operations fail (fail), and sees what was asked of it: the calls of each
// operation, what each take said the worker held, which tasks Unwanted was
// asked about.
type faulty struct {
	broker.Queue
	mu       sync.Mutex
	calls    map[string]int
	fails    map[string]error
	holdings []int
	asked    map[string]int
	// maxCall, if set, is the most bytes a Finish call carries in time: a
	// larger one times out, as over a link too slow for it.
	maxCall int
}

// fail makes the calls of op ("take", "finish", "unwanted", "reap") return
// err from now on; nil: they succeed.
func (f *faulty) fail(op string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fails == nil {
		f.fails = map[string]error{}
	}
	f.fails[op] = err
}

// count returns how many calls of op were made.
func (f *faulty) count(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// call records a call of op and returns the error it is to fail with.
func (f *faulty) call(op string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls == nil {
		f.calls = map[string]int{}
	}
	f.calls[op]++
	return f.fails[op]
}

// takes returns the Holding of each take, in order.
func (f *faulty) takes() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.holdings)
}

// askedAbout returns how often Unwanted was asked about task tid.
func (f *faulty) askedAbout(tid string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.asked[tid]
}

func (f *faulty) took(p *broker.TakeParams) error {
	err := f.call("take")
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		f.holdings = append(f.holdings, p.Holding)
	}
	return err
}

func (f *faulty) Take(ctx context.Context, p *broker.TakeParams) (*broker.TakeResult, error) {
	if err := f.took(p); err != nil {
		return nil, err
	}
	return f.Queue.Take(ctx, p)
}

func (f *faulty) WaitTake(ctx context.Context, p *broker.TakeParams) (*broker.TakeResult, error) {
	if err := f.took(p); err != nil {
		return nil, err
	}
	return f.Queue.WaitTake(ctx, p)
}

func (f *faulty) Finish(ctx context.Context, p *broker.FinishParams) (*wire.Finished, error) {
	if err := f.call("finish"); err != nil {
		return nil, err
	}
	size := 0
	for _, d := range p.Done {
		size += len(d.Result) + len(d.Record)
	}
	f.mu.Lock()
	maxCall := f.maxCall
	f.mu.Unlock()
	if maxCall > 0 && size > maxCall {
		return nil, fmt.Errorf("finish of %d bytes: read tcp 127.0.0.1:1: i/o timeout", size)
	}
	return f.Queue.Finish(ctx, p)
}

func (f *faulty) Unwanted(ctx context.Context, p *broker.UnwantedParams) (*broker.UnwantedResult, error) {
	if err := f.call("unwanted"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	if f.asked == nil {
		f.asked = map[string]int{}
	}
	for _, tid := range p.Tasks {
		f.asked[tid]++
	}
	f.mu.Unlock()
	return f.Queue.Unwanted(ctx, p)
}

func (f *faulty) Reap(ctx context.Context) (*wire.Reaped, error) {
	if err := f.call("reap"); err != nil {
		return nil, err
	}
	return f.Queue.Reap(ctx)
}

// live returns the workers whose lease holds on shard i.
func (s *scene) live(i int) []string {
	s.t.Helper()
	ws, err := s.shards[i].Queue.LiveWorkers(context.Background())
	if err != nil {
		s.t.Fatal(err)
	}
	return ws
}

// full makes srv refuse, for want of memory, every command that may
// grow its data: as at maxmemory, with nothing it may evict.
func full(t *testing.T, srv *redistest.Server) {
	t.Helper()
	c := srv.Client(t)
	if err := c.ConfigSet(context.Background(), "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(context.Background(), "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
}
