package manager

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redmap/redmap/cache"
	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/await"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/rdb"
	"github.com/redmap/redmap/internal/wire"
)

// fakeShard is a shard of a queue in memory, for the unit tests of the
// manager's parts: the seam's other side (shardRedis, queueRedis). It keeps
// a task set (count, epoch, members) and a result list as submit.lua and the
// result scripts do, and records what each part asked of it. If run is set,
// it plays a worker: each submitted task's result is pushed as it is
// submitted.
type fakeShard struct {
	i   int
	run func(t *codec.Task) ([]byte, error) // a worker: the outputs of a task's elements
	// nanos, with run, is the time each element took, as results report it
	// (codec.Result.Nanos); 0 reports none.
	nanos int64
	// entry, if set with run, is the raw result entry of task tid instead
	// (any bytes, as a broken or hostile worker could write).
	entry func(tid string) []byte

	mu      sync.Mutex
	changed chan struct{} // closed and replaced at every change of results
	count   int64
	epoch   string
	tasks   map[string][]byte // the task set: id → payload
	queued  []string          // task ids, in the order submitted
	results []string          // the result list
	rec     await.Calls       // its calls, and the errors they are to return
	cancels []string          // tasks withdrawn
	dropped bool
	renewed int
	reaped  wire.Reaped // what the next Reap returns

	// queue-wide (shard 0)
	served      map[string]bool
	noWorker    bool // Served says no worker is live at all
	published   []map[string]wire.BatchProgress
	history     []wire.BatchRecord
	failures    []wire.FailureGroup // the failure groups the manager counted on its side
	cancelBatch []string            // batch ids PublishBatches says an operator cancelled
	shardNames  []string
	workers     []string
}

func newFakeShard(i int) *fakeShard {
	return &fakeShard{i: i, tasks: make(map[string][]byte), rec: await.Calls{Activity: &activity},
		changed: make(chan struct{}), served: make(map[string]bool)}
}

// call records a call of op and returns the error set for it.
func (f *fakeShard) call(op string) error { return f.rec.Call(op) }

func (f *fakeShard) setFail(op string, err error) { f.rec.SetFail(op, err) }

func (f *fakeShard) callsOf(op string) int { return f.rec.Of(op) }

// push appends an entry to the result list.
func (f *fakeShard) push(entry string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pushLocked(entry)
}

func (f *fakeShard) pushLocked(entry string) {
	f.results = append(f.results, entry)
	close(f.changed)
	f.changed = make(chan struct{})
}

// lose forgets the task set, as a Redis that lost its data (or a replica
// promoted before it had the writes).
func (f *fakeShard) lose() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count, f.epoch, f.tasks = 0, "", make(map[string][]byte)
}

// complete plays a worker that finishes task tid: its result is pushed
// and it leaves the task set (as finish.lua does). It reports whether the
// task was in the set.
func (f *fakeShard) complete(tid string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	payload, ok := f.tasks[tid]
	if !ok {
		return false
	}
	delete(f.tasks, tid)
	f.pushLocked(string(f.result(tid, payload)))
	return true
}

// result is the entry a worker pushes for task tid: entry's if it is set,
// else a result of run's outputs.
func (f *fakeShard) result(tid string, payload []byte) []byte {
	if f.entry != nil {
		return f.entry(tid)
	}
	return mustResult(tid, payload, f.run, f.nanos)
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

// setRun makes the fake run tasks with run as they are submitted or
// completed (nil: they wait).
func (f *fakeShard) setRun(run func(t *codec.Task) ([]byte, error)) {
	f.mu.Lock()
	f.run = run
	f.mu.Unlock()
}

func (f *fakeShard) Shard() int { return f.i }

func (f *fakeShard) Submit(_ context.Context, _, _ string, _ wire.Lane, tasks []wire.Task, _ time.Duration, exp wire.Expect) (int64, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("submit"); err != nil {
		return 0, false, err
	}
	// As submit.lua: intact if the count was as expected and the epoch the
	// manager's (or none yet), which a recovery replaces.
	intact := f.count >= exp.Count && (f.epoch == "" || f.epoch == exp.Epoch)
	switch {
	case exp.NewEpoch != "":
		f.epoch = exp.NewEpoch
	case f.epoch == "":
		f.epoch = exp.Epoch
	}
	for _, t := range tasks {
		f.tasks[t.ID] = t.Payload
		f.queued = append(f.queued, t.ID)
		f.count++
	}
	if f.run != nil { // a worker that runs tasks as they come
		for _, t := range tasks {
			delete(f.tasks, t.ID)
			f.pushLocked(string(f.result(t.ID, t.Payload)))
		}
	}
	return f.count, intact, nil
}

func (f *fakeShard) Cancel(_ context.Context, _ string, tids []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("cancel"); err != nil {
		return err
	}
	for _, tid := range tids {
		delete(f.tasks, tid)
	}
	f.cancels = append(f.cancels, tids...)
	return nil
}

// trim drops the entries handled last time (the first handled, if the
// first of them is still the one marked) and returns up to limit more.
func (f *fakeShard) trim(handled int, mark string, limit int) []string {
	if handled > 0 && len(f.results) >= handled && rdb.Mark(f.results[handled-1]) == mark {
		f.results = f.results[handled:]
	}
	return slices.Clone(f.results[:min(limit, len(f.results))])
}

func (f *fakeShard) ReadResults(_ context.Context, _ string, handled int, mark string, limit int) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("read"); err != nil {
		return nil, err
	}
	return f.trim(handled, mark, limit), nil
}

// Unstaged: the fake's entries are never staged.
func (f *fakeShard) Unstaged(_ context.Context, _ string, entries []string) ([]string, error) {
	return entries, nil
}

func (f *fakeShard) Ping(context.Context) error { return f.call("ping") }

func (f *fakeShard) StagedSizes(_ context.Context, _ string, entries []string) ([]int, error) {
	sizes := make([]int, len(entries))
	for i, e := range entries {
		sizes[i] = len(e)
	}
	return sizes, nil
}

func (f *fakeShard) ReadThenWait(ctx context.Context, mid string, handled int, mark string, limit int, timeout time.Duration) ([]string, bool, error) {
	entries, err := f.ReadResults(ctx, mid, handled, mark, limit)
	if err != nil || len(entries) > 0 {
		return entries, false, err
	}
	first, err := f.WaitResults(ctx, mid, timeout)
	if first == "" {
		return nil, true, err
	}
	return []string{first}, true, err
}

func (f *fakeShard) WaitResults(ctx context.Context, _ string, timeout time.Duration) (string, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		f.mu.Lock()
		if err := f.call("wait"); err != nil {
			f.mu.Unlock()
			return "", err
		}
		if len(f.results) > 0 {
			first := f.results[0]
			f.mu.Unlock()
			return first, nil
		}
		changed := f.changed
		f.mu.Unlock()
		select {
		case <-changed:
		case <-t.C:
			return "", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

func (f *fakeShard) WakeCollector(context.Context, string) error {
	f.push(wire.EncodeEntry(wire.Entry{Kind: wire.EntryWake}))
	return nil
}

func (f *fakeShard) ForgetLanes(context.Context, string, []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.call("forget lanes")
}

func (f *fakeShard) Renew(context.Context, string, time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("renew"); err != nil {
		return err
	}
	f.renewed++
	return nil
}

func (f *fakeShard) Drop(context.Context, string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dropped = true
	return f.call("drop")
}

func (f *fakeShard) Reap(context.Context) (*wire.Reaped, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.reaped
	f.reaped = wire.Reaped{}
	if err := f.call("reap"); err != nil {
		return nil, err
	}
	return &r, nil
}

func (f *fakeShard) SetAsideTasks(context.Context, string, error) bool { return false }

func (f *fakeShard) Submitted(context.Context, string) (int64, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.count, f.epoch, f.call("submitted")
}

func (f *fakeShard) Audit(context.Context, string, []wire.Placed, time.Duration) (wire.Audited, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return wire.Audited{}, f.call("audit")
}

func (f *fakeShard) Missing(_ context.Context, _ string, tids []string) ([]string, int64, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("missing"); err != nil {
		return nil, 0, "", err
	}
	var missing []string
	for _, tid := range tids {
		if _, ok := f.tasks[tid]; !ok {
			missing = append(missing, tid)
		}
	}
	return missing, f.count, f.epoch, nil
}

func (f *fakeShard) Preflight(context.Context, *broker.PreflightParams) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.call("preflight")
}

func (f *fakeShard) LiveWorkers(context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.workers), f.call("workers")
}

// Served says a batch is served if the function it calls (the name before
// the tab) is in served.
func (f *fakeShard) Served(_ context.Context, calls []string) ([]wire.Serving, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]wire.Serving, len(calls))
	for i, c := range calls {
		name, _, _ := strings.Cut(c, "\t")
		out[i] = wire.Serving{Code: wire.Unregistered, Name: name}
		if f.noWorker {
			out[i].Code = wire.NoWorker
		}
		if f.served[name] {
			out[i].Code = wire.ServedBy
		}
	}
	return out, f.call("served")
}

func (f *fakeShard) Types(context.Context, *broker.TypesParams) ([]string, error) { return nil, nil }

func (f *fakeShard) PublishTypes(context.Context, *broker.PublishTypesParams) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.call("types")
}

// DeclareLimit and ReadLimit: the fake queue limits nothing.
func (f *fakeShard) DeclareLimit(context.Context, *broker.DeclareLimitParams) (*broker.DeclareLimitResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &broker.DeclareLimitResult{}, f.call("limit")
}

func (f *fakeShard) ReadLimit(context.Context, string) (wire.Limit, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return wire.Limit{}, "", f.call("limit")
}

func (f *fakeShard) AdoptShards(_ context.Context, proposals []string) ([]string, error) {
	return f.publishShards(true, proposals)
}

func (f *fakeShard) AddShards(_ context.Context, names []string) ([]string, error) {
	return f.publishShards(false, names)
}

func (f *fakeShard) publishShards(adopt bool, names []string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("shards"); err != nil {
		return nil, err
	}
	if len(f.shardNames) == 0 || !adopt {
		f.shardNames = slices.Clone(names)
	}
	return slices.Clone(f.shardNames), nil
}

func (f *fakeShard) PublishBatches(_ context.Context, _ string, batches map[string]wire.BatchProgress, _, _ time.Duration, _ int64) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("progress"); err != nil {
		return nil, err
	}
	f.published = append(f.published, batches)
	c := f.cancelBatch
	f.cancelBatch = nil
	return c, nil
}

func (f *fakeShard) CountFailures(_ context.Context, p *broker.CountFailuresParams) (*broker.CountFailuresResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("failures"); err != nil {
		return nil, err
	}
	var n int64
	for _, g := range p.Groups {
		f.failures = append(f.failures, g)
		n += g.Count
	}
	return &broker.CountFailuresResult{Added: n}, nil
}

func (f *fakeShard) RecordBatches(_ context.Context, _ string, recs []wire.BatchRecord, _ int, _ time.Duration, _ int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("record"); err != nil {
		return err
	}
	f.history = append(f.history, recs...)
	return nil
}

// A durable batch needs a manager made by New: the fake has none of its
// calls.
var errNotFaked = errors.New("fake: durable batches are not faked")

func (f *fakeShard) Resume(context.Context, string, time.Duration) (wire.Resumed, error) {
	return wire.Resumed{}, errNotFaked
}
func (f *fakeShard) Kept(context.Context, string, int64, int64) ([]string, error) {
	return nil, errNotFaked
}
func (f *fakeShard) Claim(context.Context, wire.Claim) (wire.Claimed, error) {
	return wire.Claimed{}, errNotFaked
}
func (f *fakeShard) Sums(context.Context, string) (map[string]string, error) { return nil, errNotFaked }
func (f *fakeShard) AddSums(context.Context, string, map[string]string, time.Duration) error {
	return errNotFaked
}

// fakeStore is the object cache in memory.
type fakeStore struct {
	mu      sync.Mutex
	values  map[cache.Ref][]byte
	holders map[cache.Ref]map[string]bool
	uploads int64
	bytes   int64
}

func newFakeStore() *fakeStore {
	return &fakeStore{values: make(map[cache.Ref][]byte), holders: make(map[cache.Ref]map[string]bool)}
}

func (s *fakeStore) Put(_ context.Context, b []byte, holder string, _ time.Duration) (cache.Ref, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ref := cache.Ref{Hash: cache.Sum(b), Size: int64(len(b))}
	_, had := s.values[ref]
	if !had {
		s.values[ref] = b
		s.uploads++
		s.bytes += int64(len(b))
		s.holders[ref] = make(map[string]bool)
	}
	s.holders[ref][holder] = true
	return ref, !had, nil
}

func (s *fakeStore) Hold(_ context.Context, ref cache.Ref, holder string, _ time.Duration) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.values[ref]; !ok {
		return false, nil
	}
	s.holders[ref][holder] = true
	return true, nil
}

func (s *fakeStore) Release(_ context.Context, ref cache.Ref, holder string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	hs, ok := s.holders[ref]
	if !ok {
		return false, nil
	}
	delete(hs, holder)
	if len(hs) == 0 {
		delete(s.values, ref)
		delete(s.holders, ref)
		return true, nil
	}
	return false, nil
}

func (s *fakeStore) Uploads() (int64, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.uploads, s.bytes
}

// lose forgets every value, as a Redis that lost its data.
func (s *fakeStore) lose() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.values = make(map[cache.Ref][]byte)
	s.holders = make(map[cache.Ref]map[string]bool)
}

// fakeQueue is a queue of n shards in memory, and a manager wired to it.
type fakeQueue struct {
	shards []*fakeShard
	store  *fakeStore
}

func newFakeQueue(n int) *fakeQueue {
	q := &fakeQueue{store: newFakeStore()}
	for i := range n {
		q.shards = append(q.shards, newFakeShard(i))
	}
	return q
}

// manager wires a manager to the queue, with opts (their defaults filled
// in) and h; it is closed when the test ends.
func (q *fakeQueue) manager(t interface {
	Helper()
	Fatal(...any)
	Cleanup(func())
}, opts Options) *Manager {
	t.Helper()
	if opts.Queue == "" {
		opts.Queue = "fake"
	}
	opts.Shards = len(q.shards)
	opts, err := opts.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	next := 1
	m := assemble(seams{
		queue: q.shards[0],
		shard: func(string, int) shardRedis {
			s := q.shards[next]
			next++
			return s
		},
		masters: func(context.Context) (rdb.Masters, bool, error) { return rdb.Masters{}, false, nil },
		store:   q.store,
	}, opts, id.New(), nil)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

var errFakeDown = errors.New("dial tcp 127.0.0.1:1: connect: connection refused")

// activity is notified at every call to a fake: what until waits on.
var activity await.Broadcast
