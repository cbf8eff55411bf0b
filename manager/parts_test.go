package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
)

// Unit tests of the manager's parts, on a queue of the package's shared
// redis-server (broker_test.go). The suites with worker processes and real
// faults are the package's other tests.

// squares is a worker's run of square over a task's elements.
func squares(t *codec.Task) ([]byte, error) {
	xs := make([]int, t.Count)
	if err := codec.DecodeElements(t.Input, xs); err != nil {
		return nil, err
	}
	for i := range xs {
		xs[i] *= xs[i]
	}
	b, _, err := codec.EncodeOutputs(xs)
	return b, err
}

func unitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// until polls cond, reading Redis or the manager, until it holds.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	redistest.Eventually(t, what, cond)
}

func count(n int) []int {
	xs := make([]int, n)
	for i := range xs {
		xs[i] = i
	}
	return xs
}

func checkSquares(t *testing.T, ys []int, n int) {
	t.Helper()
	if len(ys) != n {
		t.Fatalf("%d results, want %d", len(ys), n)
	}
	for i, y := range ys {
		if y != i*i {
			t.Fatalf("ys[%d] = %d, want %d", i, y, i*i)
		}
	}
}

func TestFeederAndCollector(t *testing.T) {
	q := newTestQueue(t, 1)
	q.play(squares, 0)
	m := q.manager(t, Options{})
	ys, err := Map(unitCtx(t), m, square, count(1000), ChunkSize(10))
	if err != nil {
		t.Fatal(err)
	}
	checkSquares(t, ys, 1000)
	if got := len(q.first().submittedIDs()); got != 100 {
		t.Fatalf("%d tasks submitted, want 100 of 10 elements", got)
	}
	if st := m.Stats(); st.Pending != 0 || st.Dropped != 0 || st.Elements != 1000 {
		t.Fatalf("stats %+v: want nothing pending or dropped, 1000 elements ended", st)
	}
}

// The router spreads a batch's tasks round-robin over the shards, and puts
// every task of a private batch on shard 0.
func TestRouterSpreadsTasks(t *testing.T) {
	q := newTestQueue(t, 3)
	q.play(squares, 0)
	live(t, q.first(), "w1")
	m := q.manager(t, Options{})
	ys, err := Map(unitCtx(t), m, square, count(3000), ChunkSize(10))
	if err != nil {
		t.Fatal(err)
	}
	checkSquares(t, ys, 3000)
	for i, s := range q.all() {
		if n := len(s.submittedIDs()); n != 100 {
			t.Fatalf("shard %d got %d tasks, want 100 of the 300", i, n)
		}
	}
	if names, _ := q.first().ShardNames(context.Background()); len(names) != 2 {
		t.Fatalf("shard names published: %q, want 2", names)
	}
	submitted := func() []int {
		var n []int
		for _, s := range q.all() {
			n = append(n, len(s.submittedIDs()))
		}
		return n
	}
	before := submitted()
	ys, err = Map(unitCtx(t), m, square, count(300), ChunkSize(10), OnWorker("w1"))
	if err != nil {
		t.Fatal(err)
	}
	checkSquares(t, ys, 300)
	after := submitted()
	if after[0]-before[0] != 30 || after[1] != before[1] || after[2] != before[2] {
		t.Fatalf("a private batch's 30 tasks went to shards %v → %v; want all on shard 0", before, after)
	}
}

func TestRouterOpensOnceAndNotAfterClose(t *testing.T) {
	mq := newTestQueue(t, 3)
	first := mq.first()
	// Another manager named them first.
	if _, err := first.AddShards(context.Background(), &broker.ShardsParams{Names: []string{"taken-1", "taken-2"}}); err != nil {
		t.Fatal(err)
	}
	var opened []string
	r := newRouter(routerParams{queue: mq.name, shards: 3, first: first,
		open: func(name string, i int) broker.Shard {
			opened = append(opened, fmt.Sprintf("%d:%s", i, name))
			return mq.open(name, i)
		},
		masters: func(context.Context) (broker.Masters, bool, error) { return broker.Masters{}, false, nil },
		opened:  func(*shard) {}, log: discard()})
	for range 2 {
		if err := r.openAll(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{"1:taken-1", "2:taken-2"}; !slices.Equal(opened, want) {
		t.Fatalf("opened %q, want the queue's names once: %q", opened, want)
	}
	for seq := range 12 {
		r.nextSeq() // a public task between: any shard
		if s := r.nextPrivateSeq(); s%3 != 0 {
			t.Fatalf("private task %d got sequence %d, not a multiple of 3 (shard 0)", seq, s)
		}
	}
	closed := newRouter(routerParams{queue: "q", shards: 2, first: newTestQueue(t, 1).first(),
		open:    func(string, int) broker.Shard { t.Fatal("opened a shard after close"); return nil },
		masters: func(context.Context) (broker.Masters, bool, error) { return broker.Masters{}, false, nil },
		opened:  func(*shard) {}, log: discard()})
	closed.close()
	if err := closed.openAll(context.Background()); !errors.Is(err, redmap.ErrClosed) {
		t.Fatalf("openAll after close: %v, want ErrClosed", err)
	}
}

// A duplicate result, or one for a task the manager does not know, is
// dropped and counted; the batch gets each of its results once.
func TestCollectorDropsDuplicatesAndStrangers(t *testing.T) {
	q := newTestQueue(t, 1)
	s := q.first()
	m := q.manager(t, Options{})
	b, err := Submit(unitCtx(t), m, square, count(2), ChunkSize(1)) // results come when the test says
	if err != nil {
		t.Fatal(err)
	}
	tids := s.submittedIDs()
	s.mu.Lock()
	payload := s.payloads[tids[0]]
	s.mu.Unlock()
	q.play(squares, 0)
	if s.complete(tids[0]) != 1 {
		t.Fatal("task 0 not in the task set")
	}
	stranger := strings.Replace(tids[0], "-", "-zz", 1)              // its manager's, never submitted
	s.push(m.ID(), string(mustResult(tids[0], payload, squares, 0))) // a duplicate
	s.push(m.ID(), string(mustResult(stranger, payload, squares, 0)))
	s.push(m.ID(), "not a result")
	s.complete(tids[1])
	ys, err := b.Wait(unitCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	checkSquares(t, ys, 2)
	until(t, "the three are dropped", func() bool { return m.Stats().Dropped == 3 })
}

// A private task whose worker died, or a task an operator purged, fails
// with ErrLost saying which.
func TestCollectorLostAndPurged(t *testing.T) {
	q := newTestQueue(t, 1)
	s := q.first()
	m := q.manager(t, Options{})
	b, err := Submit(unitCtx(t), m, square, count(2), ChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}
	tids := s.submittedIDs()
	// As a reap of dead worker w9 and an operator's purge push them.
	s.push(m.ID(), wire.EncodeEntry(wire.Entry{Kind: wire.EntryLost, Task: tids[0], Worker: "w9"}))
	s.push(m.ID(), wire.EncodeEntry(wire.Entry{Kind: wire.EntryPurged, Task: tids[1]}))
	_, err = b.Wait(unitCtx(t))
	var be *redmap.BatchError
	if !errors.As(err, &be) || len(be.Failed) != 2 {
		t.Fatalf("err = %v, want a BatchError of 2", err)
	}
	for _, e := range be.Failed {
		if !errors.Is(e, redmap.ErrLost) {
			t.Fatalf("element error %v, want ErrLost", e)
		}
	}
	msg := err.Error()
	if !strings.Contains(msg, "worker w9 died") || !strings.Contains(msg, "purged") {
		t.Fatalf("err = %v: want it to name the dead worker and the purge", err)
	}
}

// A read Redis refuses for good fails every outstanding element at once,
// with the refusal; one it cannot answer fails them with ErrUnavailable
// once the outage has lasted RedisTimeout.
func TestCollectorRefusalAndOutage(t *testing.T) {
	refused := &redmap.CommandError{Op: "read results", Reply: "NOPERM no permissions to run the 'lmove' command", Kind: redmap.ErrRefused}
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"refused", refused, redmap.ErrRefused},
		{"unreachable", errFakeDown, redmap.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newTestQueue(t, 1)
			s := q.first()
			m := q.manager(t, Options{Poll: 5 * time.Millisecond, RedisTimeout: 50 * time.Millisecond})
			b, err := Submit(unitCtx(t), m, square, count(3), ChunkSize(1))
			if err != nil {
				t.Fatal(err)
			}
			s.fail("readresults", tc.err)
			s.fail("waitresults", tc.err)
			s.wake(m.ID())
			_, err = b.Wait(unitCtx(t))
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			var be *redmap.BatchError
			if !errors.As(err, &be) || len(be.Failed) != 3 {
				t.Fatalf("err = %v, want each of the 3 elements failed", err)
			}
		})
	}
}

// The keeper renews the manager's keys on every shard, publishes its
// running batches for operators, and ends a batch an operator cancelled.
func TestKeeperPublishesAndRenews(t *testing.T) {
	q := newTestQueue(t, 2)
	m := q.manager(t, Options{Poll: 5 * time.Millisecond})
	b, err := Submit(unitCtx(t), m, square, count(4), ChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range q.all() {
		until(t, fmt.Sprintf("shard %d renewed", i), func() bool { return s.count("renew") > 0 })
	}
	op := q.operator()
	until(t, "the batch is published", func() bool {
		bs, err := op.Batches(context.Background(), &broker.QueueParams{Queue: q.name})
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(bs, func(p wire.PublishedBatch) bool {
			return p.ID == b.id && p.Manager == m.ID() && p.Progress.Func == "square" && p.Progress.Total == 4
		})
	})
	if err := op.CancelBatch(context.Background(), &broker.CancelBatchParams{Queue: q.name, Manager: m.ID(), Batch: b.id}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Wait(unitCtx(t)); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "operator") {
		t.Fatalf("err = %v, want cancelled by an operator", err)
	}
}

// The keeper stores again a batch's constant that Redis lost, and the
// batch releases it when it ends.
func TestKeeperRestoresLostConstant(t *testing.T) {
	q := newTestQueue(t, 1)
	s := q.first()
	m := q.manager(t, Options{Poll: 5 * time.Millisecond})
	add := redmap.FuncWith("add", func(_ context.Context, c int, x int) (int, error) { return c + x, nil })
	b, err := SubmitWith(unitCtx(t), m, add, 7, count(2), ChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}
	stored := objectKeys(t, q)
	if len(stored) == 0 {
		t.Fatal("the constant is not in Redis")
	}
	if err := q.c.Del(context.Background(), stored...).Err(); err != nil { // Redis loses it
		t.Fatal(err)
	}
	until(t, "the constant is stored again", func() bool { return m.Stats().ConstantUploads == 2 })
	if len(objectKeys(t, q)) == 0 {
		t.Fatal("the constant, stored again, is not in Redis")
	}
	q.play(func(t *codec.Task) ([]byte, error) {
		xs := make([]int, t.Count)
		if err := codec.DecodeElements(t.Input, xs); err != nil {
			return nil, err
		}
		for i := range xs {
			xs[i] += 7
		}
		b, _, err := codec.EncodeOutputs(xs)
		return b, err
	}, 0)
	s.complete(s.submittedIDs()...)
	ys, err := b.Wait(unitCtx(t))
	if err != nil || !slices.Equal(ys, []int{7, 8}) {
		t.Fatalf("ys, err = %v, %v; want [7 8]", ys, err)
	}
	until(t, "the constant is released", func() bool { return len(objectKeys(t, q)) == 0 })
}

// objectKeys returns the keys of the constants stored under q's prefix.
func objectKeys(t *testing.T, q *testQueue) []string {
	t.Helper()
	ks, err := q.c.Keys(context.Background(), keys.Object(q.prefix, "*")+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

// The reaper reaps on every shard, says when no live worker registered a
// batch's function, and fails its waiting elements after NoWorkerTimeout.
func TestReaperChecksServed(t *testing.T) {
	q := newTestQueue(t, 2)
	live(t, q.first(), "w1", "other\tsig") // a live worker, which registered something else
	m := q.manager(t, Options{Poll: 5 * time.Millisecond, NoWorkerTimeout: 50 * time.Millisecond})
	b, err := Submit(unitCtx(t), m, square, count(4), ChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range q.all() {
		until(t, fmt.Sprintf("shard %d reaped", i), func() bool { return s.count("reap") > 0 })
	}
	until(t, "the batch says it waits", func() bool { return strings.Contains(b.Progress().Waiting, `registered "square"`) })
	_, err = b.Wait(unitCtx(t))
	if !errors.Is(err, redmap.ErrNoWorker) || !errors.Is(err, redmap.ErrUnknownFunc) {
		t.Fatalf("err = %v, want ErrNoWorker and ErrUnknownFunc", err)
	}
}

// A batch no live worker serves while Redis refuses the manager's writes
// for want of memory fails with ErrRedisFull as well as ErrNoWorker: its
// workers' reports were refused too, so they left or look dead.
func TestReaperNoWorkerWhileFull(t *testing.T) {
	q := newTestQueue(t, 1) // no worker is live
	m := q.manager(t, Options{Poll: 5 * time.Millisecond, NoWorkerTimeout: 50 * time.Millisecond})
	// Redis refuses the manager's calls all along (as at maxmemory, where
	// its renewals and reads are refused every Poll).
	refusing, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			m.faults.lastFull.Store(time.Now().UnixNano())
			select {
			case <-refusing:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	b, err := Submit(unitCtx(t), m, square, count(2), ChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Wait(unitCtx(t))
	close(refusing)
	<-stopped
	if !errors.Is(err, redmap.ErrNoWorker) || !errors.Is(err, redmap.ErrRedisFull) {
		t.Fatalf("err = %v, want ErrNoWorker and ErrRedisFull", err)
	}
	// Without a refusal, no live worker is ErrNoWorker alone.
	m.faults.lastFull.Store(0)
	b, err = Submit(unitCtx(t), m, square, count(2), ChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err = b.Wait(unitCtx(t)); !errors.Is(err, redmap.ErrNoWorker) || errors.Is(err, redmap.ErrRedisFull) {
		t.Fatalf("err = %v, want ErrNoWorker alone", err)
	}
}

// A served batch never waits: its elements end with their values.
func TestReaperLeavesServedBatch(t *testing.T) {
	q := newTestQueue(t, 1)
	s := q.first()
	live(t, s, "w1", square.Name()+"\t"+square.Signature())
	var checks int
	m := q.manager(t, Options{Poll: 5 * time.Millisecond, NoWorkerTimeout: 20 * time.Millisecond})
	b, err := Submit(unitCtx(t), m, square, count(2), ChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}
	until(t, "served checked a few times past NoWorkerTimeout", func() bool {
		checks = s.count("served")
		return checks > 10
	})
	if w := b.Progress().Waiting; w != "" {
		t.Fatalf("a served batch waits: %q", w)
	}
	q.play(squares, 0)
	s.complete(s.submittedIDs()...)
	ys, err := b.Wait(unitCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	checkSquares(t, ys, 2)
}

// After Redis lost a shard's task set, the recoverer submits the
// outstanding tasks again under their own ids, with a new epoch, and their
// results count.
func TestRecovererPutsBackLostTasks(t *testing.T) {
	q := newTestQueue(t, 2)
	m := q.manager(t, Options{Poll: 5 * time.Millisecond})
	b, err := Submit(unitCtx(t), m, square, count(6), ChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}
	lost := q.shard(1)
	first := lost.submittedIDs()
	epoch := epochOf(t, lost, m.ID())
	lost.lose(m.ID())
	until(t, "the lost tasks are submitted again", func() bool { return len(lost.submittedIDs()) == 2*len(first) })
	again := lost.submittedIDs()[len(first):]
	slices.Sort(again)
	if want := slices.Sorted(slices.Values(first)); !slices.Equal(again, want) {
		t.Fatalf("submitted again %q, want the same ids %q", again, want)
	}
	newEpoch := epochOf(t, lost, m.ID())
	if newEpoch == "" || newEpoch == epoch {
		t.Fatalf("epoch %q after recovery, was %q: want a new one", newEpoch, epoch)
	}
	if n := len(q.shard(0).submittedIDs()); n != 3 {
		t.Fatalf("shard 0, which lost nothing, had %d submits, want its 3", n)
	}
	q.play(squares, 0)
	for _, s := range q.all() {
		s.complete(s.submittedIDs()...)
	}
	ys, err := b.Wait(unitCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	checkSquares(t, ys, 6)
}

// Close ends running batches with ErrClosed, withdraws their tasks and
// drops the manager's keys on every shard; parts are stopped when it
// returns.
func TestCloseWithdrawsAndDrops(t *testing.T) {
	q := newTestQueue(t, 2)
	m := q.manager(t, Options{Poll: 5 * time.Millisecond})
	b, err := Submit(unitCtx(t), m, square, count(4), ChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Wait(unitCtx(t)); !errors.Is(err, redmap.ErrClosed) {
		t.Fatalf("err = %v, want ErrClosed", err)
	}
	for i, s := range q.all() {
		cancels, dropped := len(s.withdrawn()), s.droppedKeys(m.ID())
		if cancels != 2 || !dropped {
			t.Fatalf("shard %d: %d tasks withdrawn, keys dropped %v; want 2 and true", i, cancels, dropped)
		}
		left, err := q.c.Exists(context.Background(), keys.Tasks(q.prefix, s.Name(), m.ID()), keys.Results(q.prefix, s.Name(), m.ID())).Result()
		if err != nil || left != 0 {
			t.Fatalf("shard %d: %d of the manager's task set and result list left in Redis (%v)", i, left, err)
		}
	}
	if _, err := Submit(unitCtx(t), m, square, count(1)); !errors.Is(err, redmap.ErrClosed) {
		t.Fatalf("Submit after Close: %v, want ErrClosed", err)
	}
}

// Submit rides out an outage shorter than RedisTimeout, and fails with
// ErrUnavailable once it is longer.
func TestSubmitRidesOutages(t *testing.T) {
	// The submit, and the read of the function's limit before a first
	// window (it once failed the submit at once: make chaos-cluster).
	for _, call := range []string{"submit", "readlimit"} {
		q := newTestQueue(t, 1)
		s := q.first()
		q.play(squares, 0)
		m := q.manager(t, Options{RedisTimeout: time.Hour})
		s.fail(call, errFakeDown)
		done := make(chan error, 1)
		go func() {
			ys, err := Map(unitCtx(t), m, square, count(5))
			if err == nil && len(ys) != 5 {
				err = fmt.Errorf("%d results", len(ys))
			}
			done <- err
		}()
		until(t, "a "+call+" call failed", func() bool { return s.count(call) > 1 })
		s.fail(call, nil)
		if err := <-done; err != nil {
			t.Fatalf("%s: %v", call, err)
		}
	}

	short := newTestQueue(t, 1)
	m2 := short.manager(t, Options{RedisTimeout: 20 * time.Millisecond})
	short.first().fail("submit", errFakeDown)
	if _, err := Map(unitCtx(t), m2, square, count(5)); !errors.Is(err, redmap.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	if st := m2.Stats(); st.Pending != 0 {
		t.Fatalf("%d tasks still pending after Submit failed", st.Pending)
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// A withdrawal whose cancel fails is tried again at every retry (the
// keeper's, every Poll) until it passes, then no more: a task left in the
// task set would stay there, renewed, as long as the manager lives.
func TestWithdrawalRetriedUntilItPasses(t *testing.T) {
	q := newTestQueue(t, 1)
	f := q.first()
	r := newRouter(routerParams{queue: q.name, shards: 1, first: f,
		open:    func(name string, i int) broker.Shard { t.Fatal("opened a shard"); return nil },
		masters: func(context.Context) (broker.Masters, bool, error) { return broker.Masters{}, false, nil },
		opened:  func(*shard) {}, log: discard()})
	p := newPendingTasks()
	tids := []string{"m-1,1.1", "m-2,1.1"}
	if err := p.add(nil, tids, 0); err != nil {
		t.Fatal(err)
	}
	w := &withdrawal{mid: "m", pending: p, router: r, log: discard()}
	f.fail("cancel", errors.New("i/o timeout"))
	w.withdraw(tids)
	w.retry(context.Background()) // fails again: kept
	if f.count("cancel") != 2 || len(f.withdrawn()) != 0 {
		t.Fatalf("%d cancels, %v withdrawn; want 2 tries, none through", f.count("cancel"), f.withdrawn())
	}
	f.fail("cancel", nil)
	w.retry(context.Background())
	w.retry(context.Background()) // nothing left
	if f.count("cancel") != 3 || !slices.Equal(f.withdrawn(), tids) {
		t.Fatalf("%d cancels, %v withdrawn; want the third through, and no fourth", f.count("cancel"), f.withdrawn())
	}
}
