package manager

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/redisbroker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
)

// What the unit tests of the manager's parts run on: a queue on the
// package's shared redis-server (a fresh name and key prefix for each
// test), each shard seen through faulty, which returns the error a test
// asks for from an operation, records what tests look at of the calls,
// and, once the test says so (play), plays a worker that reports each task
// as it is submitted.

var errFakeDown = errors.New("dial tcp 127.0.0.1:1: connect: connection refused")

// testQueue is a queue of shards on a redis-server, for the managers a
// test wires to it.
type testQueue struct {
	t      testing.TB
	c      *redis.Client
	name   string
	prefix string // the queue's own: its constants are its alone
	n      int

	mu     sync.Mutex
	shards []*faulty // by index, shard 0 first, the others as a manager opens them
	run    func(t *codec.Task) ([]byte, error)
	nanos  int64
	entry  func(tid string) []byte
}

// newTestQueue returns a queue of n shards on the package's shared server.
func newTestQueue(t testing.TB, n int) *testQueue {
	t.Helper()
	name := redistest.Queue(t)
	q := &testQueue{t: t, c: redistest.Shared(t).Client(t), name: name, prefix: "t." + name, n: n}
	q.shards = []*faulty{{Queue: redisbroker.New(q.c, q.prefix, name), q: q}}
	return q
}

// first returns shard 0.
func (q *testQueue) first() *faulty { return q.shard(0) }

// shard returns shard i, which a manager opened.
func (q *testQueue) shard(i int) *faulty {
	q.t.Helper()
	q.mu.Lock()
	defer q.mu.Unlock()
	if i >= len(q.shards) || q.shards[i] == nil {
		q.t.Fatalf("shard %d is not open", i)
	}
	return q.shards[i]
}

// all returns the queue's shards, shard 0 first.
func (q *testQueue) all() []*faulty {
	q.t.Helper()
	out := make([]*faulty, q.n)
	for i := range out {
		out[i] = q.shard(i)
	}
	return out
}

// open returns shard i, named name, as a manager opens it.
func (q *testQueue) open(name string, i int) broker.Shard {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.shards) <= i {
		q.shards = append(q.shards, nil)
	}
	if s := q.shards[i]; s == nil || s.Name() != name {
		q.shards[i] = &faulty{Queue: redisbroker.NewShard(q.c, q.prefix, name, i), q: q}
	}
	return q.shards[i]
}

// play makes a worker report each task as it is submitted, and those
// complete completes, with run, the outputs of its elements, each element
// reported to have taken nanos; nil: tasks wait.
func (q *testQueue) play(run func(t *codec.Task) ([]byte, error), nanos int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.run, q.nanos = run, nanos
}

// writeEntries makes the played worker report entry(tid) for each task it
// runs, in place of its result: any bytes, as a broken or hostile worker
// could write.
func (q *testQueue) writeEntries(entry func(tid string) []byte) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.entry = entry
}

// manager wires a manager to the queue, with opts (their defaults filled
// in); it is closed when the test ends.
func (q *testQueue) manager(t testing.TB, opts Options) *Manager {
	t.Helper()
	opts.Queue, opts.Prefix, opts.Shards = q.name, q.prefix, q.n
	opts, err := opts.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	r := clientSeams(q.c, opts)
	r.queue = q.first()
	r.shard = q.open
	m := assemble(r, opts, id.New(), nil)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// operator returns the operators' side of the queue's Redis.
func (q *testQueue) operator() *redisbroker.Admin { return redisbroker.NewAdmin(q.c, q.prefix) }

// live makes worker wid live on s for an hour, as its heartbeat does,
// registering serves ("<name>\t<signature>" each).
func live(t testing.TB, s broker.Shard, wid string, serves ...string) {
	t.Helper()
	if _, err := s.Heartbeat(context.Background(), &broker.HeartbeatParams{Worker: wid, Lease: time.Hour,
		Info: &wire.WorkerInfo{Serves: serves}}); err != nil {
		t.Fatal(err)
	}
}

// epochOf returns the epoch of manager mid's task set on s.
func epochOf(t testing.TB, s broker.Shard, mid string) string {
	t.Helper()
	got, err := s.Submitted(context.Background(), &broker.ManagerParams{Manager: mid})
	if err != nil {
		t.Fatal(err)
	}
	return got.Epoch
}

// mustResult is the result of run over the task payload encodes, as a
// worker reports it, each element having taken nanos.
func mustResult(tid string, payload []byte, run func(*codec.Task) ([]byte, error), nanos int64) []byte {
	t, err := codec.DecodeTask(payload, 0)
	if err != nil {
		panic(err)
	}
	values, err := run(t)
	if err != nil {
		panic(err)
	}
	r, err := codec.EncodeResult(&codec.Result{Task: tid, Values: values, Nanos: nanos * int64(t.Count)})
	if err != nil {
		panic(err)
	}
	return r
}

// faulty is a shard of the queue through which a test makes chosen
// operations fail (fail), and sees what was asked of it: the calls of each
// operation, the tasks submitted and withdrawn, the managers whose keys
// were dropped.
type faulty struct {
	broker.Queue
	q *testQueue

	mu        sync.Mutex
	calls     map[string]int
	fails     map[string]error
	submitted []string          // every task submitted, in order
	payloads  map[string][]byte // their payloads
	cancels   []string          // the tasks withdrawn, in order
	dropped   map[string]bool   // the managers whose keys were dropped
}

// fail makes the calls of op (the contract's method name in lower case:
// "submit", "readresults", ...) return err from now on; nil: they
// succeed.
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

// submittedIDs returns the id of every task submitted, in order.
func (f *faulty) submittedIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.submitted...)
}

// withdrawn returns the tasks withdrawn, in order.
func (f *faulty) withdrawn() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.cancels...)
}

// droppedKeys reports whether manager mid's keys were dropped.
func (f *faulty) droppedKeys(mid string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dropped[mid]
}

// complete plays a worker that reports tasks tids in one call, as play
// does; it returns how many were still wanted (their results delivered).
func (f *faulty) complete(tids ...string) int {
	f.q.mu.Lock()
	run, nanos, entry := f.q.run, f.q.nanos, f.q.entry
	f.q.mu.Unlock()
	done := make([]wire.Done, len(tids))
	for i, tid := range tids {
		f.mu.Lock()
		payload := f.payloads[tid]
		f.mu.Unlock()
		done[i] = wire.Done{ID: tid, Shard: f.Shard()}
		switch {
		case entry != nil:
			done[i].Result = entry(tid)
		case run != nil:
			done[i].Result = mustResult(tid, payload, run, nanos)
		default:
			f.q.t.Errorf("complete %s: no worker played", tid)
			return 0
		}
	}
	got, err := f.Queue.Finish(context.Background(), &broker.FinishParams{Worker: "played", Done: done})
	if err != nil {
		f.q.t.Errorf("complete %v: %v", tids, err)
		return 0
	}
	return got.Delivered
}

// wake wakes manager mid's collector, as a worker's result does: a read
// that blocks in Redis (a second at least) ends now.
func (f *faulty) wake(mid string) {
	f.q.t.Helper()
	if err := f.Queue.WakeCollector(context.Background(), &broker.ManagerParams{Manager: mid}); err != nil {
		f.q.t.Fatal(err)
	}
}

// push appends entry to manager mid's result list, as anyone with access
// to Redis could.
func (f *faulty) push(mid, entry string) {
	f.q.t.Helper()
	if err := f.q.c.RPush(context.Background(), keys.Results(f.q.prefix, f.Name(), mid), entry).Err(); err != nil {
		f.q.t.Fatal(err)
	}
}

// lose deletes manager mid's task set, with its count and epoch, as a
// Redis that lost its data (or a replica promoted before it had the
// writes).
func (f *faulty) lose(mid string) {
	f.q.t.Helper()
	if err := f.q.c.Del(context.Background(), keys.Tasks(f.q.prefix, f.Name(), mid)).Err(); err != nil {
		f.q.t.Fatal(err)
	}
}

func (f *faulty) Submit(ctx context.Context, p *broker.SubmitParams) (*broker.SubmitResult, error) {
	if err := f.call("submit"); err != nil {
		return nil, err
	}
	got, err := f.Queue.Submit(ctx, p)
	if err != nil {
		return got, err
	}
	f.mu.Lock()
	if f.payloads == nil {
		f.payloads = map[string][]byte{}
	}
	for _, t := range p.Tasks {
		f.submitted = append(f.submitted, t.ID)
		f.payloads[t.ID] = t.Payload
	}
	f.mu.Unlock()
	f.q.mu.Lock()
	playing := f.q.run != nil || f.q.entry != nil
	f.q.mu.Unlock()
	if playing {
		tids := make([]string, len(p.Tasks))
		for i, t := range p.Tasks {
			tids[i] = t.ID
		}
		f.complete(tids...)
	}
	return got, nil
}

func (f *faulty) Cancel(ctx context.Context, p *broker.CancelParams) error {
	if err := f.call("cancel"); err != nil {
		return err
	}
	if err := f.Queue.Cancel(ctx, p); err != nil {
		return err
	}
	f.mu.Lock()
	f.cancels = append(f.cancels, p.Tasks...)
	f.mu.Unlock()
	return nil
}

func (f *faulty) Drop(ctx context.Context, p *broker.ManagerParams) error {
	if err := f.call("drop"); err != nil {
		return err
	}
	if err := f.Queue.Drop(ctx, p); err != nil {
		return err
	}
	f.mu.Lock()
	if f.dropped == nil {
		f.dropped = map[string]bool{}
	}
	f.dropped[p.Manager] = true
	f.mu.Unlock()
	return nil
}

func (f *faulty) ReadResults(ctx context.Context, p *broker.ReadResultsParams) ([]string, error) {
	if err := f.call("readresults"); err != nil {
		return nil, err
	}
	return f.Queue.ReadResults(ctx, p)
}

// ReadThenWait is a read, then a wait: it fails as either does.
func (f *faulty) ReadThenWait(ctx context.Context, p *broker.ReadResultsParams) (*broker.ReadThenWaitResult, error) {
	if err := f.call("readresults"); err != nil {
		return nil, err
	}
	if err := f.call("waitresults"); err != nil {
		return nil, err
	}
	return f.Queue.ReadThenWait(ctx, p)
}

func (f *faulty) WaitResults(ctx context.Context, p *broker.WaitResultsParams) (string, error) {
	if err := f.call("waitresults"); err != nil {
		return "", err
	}
	return f.Queue.WaitResults(ctx, p)
}

func (f *faulty) Ping(ctx context.Context) error {
	if err := f.call("ping"); err != nil {
		return err
	}
	return f.Queue.Ping(ctx)
}

func (f *faulty) ReadLimit(ctx context.Context, p *broker.ReadLimitParams) (*broker.LimitResult, error) {
	if err := f.call("readlimit"); err != nil {
		return nil, err
	}
	return f.Queue.ReadLimit(ctx, p)
}

func (f *faulty) Renew(ctx context.Context, p *broker.RenewParams) error {
	if err := f.call("renew"); err != nil {
		return err
	}
	return f.Queue.Renew(ctx, p)
}

func (f *faulty) Reap(ctx context.Context) (*wire.Reaped, error) {
	if err := f.call("reap"); err != nil {
		return nil, err
	}
	return f.Queue.Reap(ctx)
}

func (f *faulty) Served(ctx context.Context, p *broker.ServedParams) ([]wire.Serving, error) {
	if err := f.call("served"); err != nil {
		return nil, err
	}
	return f.Queue.Served(ctx, p)
}
