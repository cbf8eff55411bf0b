package manager

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redmap/redmap/cache"
	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/await"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/memory"
	"github.com/redmap/redmap/internal/id"
)

// What the unit tests of the manager's parts run on: the memory broker
// (internal/broker/memory, which internal/broker/brokertest holds to the
// scripts' rules) and an object cache in memory.

// activity is notified at every call to the memory broker: what until
// waits on.
var activity await.Broadcast

var errFakeDown = errors.New("dial tcp 127.0.0.1:1: connect: connection refused")

// memQueue is a queue of shards in the memory broker, and an object cache
// in memory.
type memQueue struct {
	*memory.Queue
	store *fakeStore
}

// newMemQueue returns a queue of n shards.
func newMemQueue(n int) *memQueue {
	var names []string
	for i := 1; i < n; i++ {
		names = append(names, "fake#"+strconv.Itoa(i))
	}
	return &memQueue{Queue: memory.NewQueue(&activity, names...), store: newFakeStore()}
}

// live makes worker wid live on s for an hour, as its heartbeat does.
func live(t *testing.T, s *memory.Shard, wid string) {
	t.Helper()
	if _, err := s.Heartbeat(context.Background(), &broker.HeartbeatParams{Worker: wid, Lease: time.Hour}); err != nil {
		t.Fatal(err)
	}
}

// epochOf returns the epoch of manager mid's task set on s.
func epochOf(t *testing.T, s *memory.Shard, mid string) string {
	t.Helper()
	got, err := s.Submitted(context.Background(), &broker.ManagerParams{Manager: mid})
	if err != nil {
		t.Fatal(err)
	}
	return got.Epoch
}

// manager wires a manager to the queue, with opts (their defaults filled
// in); it is closed when the test ends.
func (q *memQueue) manager(t interface {
	Helper()
	Fatal(...any)
	Cleanup(func())
}, opts Options) *Manager {
	t.Helper()
	if opts.Queue == "" {
		opts.Queue = "fake"
	}
	opts.Shards = len(q.Shards())
	opts, err := opts.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	next := 1
	m := assemble(seams{
		queue: q.First(),
		shard: func(string, int) broker.Shard {
			s := q.Shard(next)
			next++
			return s
		},
		masters: func(context.Context) (broker.Masters, bool, error) { return broker.Masters{}, false, nil },
		store:   q.store,
	}, opts, id.New(), nil)
	t.Cleanup(func() { _ = m.Close() })
	return m
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
