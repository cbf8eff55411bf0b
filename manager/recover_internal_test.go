package manager

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/worker"
)

// recorder keeps the records logged above Debug.
type recorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *recorder) Enabled(_ context.Context, l slog.Level) bool { return l > slog.LevelDebug }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.msgs = append(r.msgs, rec.Level.String()+" "+rec.Message)
	r.mu.Unlock()
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

func (r *recorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.msgs...)
}

var square = redmap.Func("square", func(_ context.Context, x int) (int, error) { return x * x, nil })

// On a healthy Redis no data loss is ever reported, nor anything submitted
// again, whatever the timing of submits against checks: here the manager's
// seam holds every submit script of a feeder back until the manager has
// checked for lost data while the submit's tasks are registered as
// outstanding (the race that once read a missing task set as a loss). And a
// clean Close logs nothing above Debug.
func TestNoFalseAlarm(t *testing.T) {
	srv := redistest.Shared(t)
	c := srv.Client(t)
	queue := redistest.Queue(t)
	logs := &recorder{}
	opts, err := Options{Queue: queue, Poll: 50 * time.Millisecond, Logger: slog.New(logs)}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	r := clientSeams(c, opts)
	seam := &checkFirst{Queue: r.queue}
	r.queue = seam
	m := assemble(r, opts, id.New(), nil)
	w, err := worker.New(c, worker.Options{Queue: queue, Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	w.Register(square)
	wctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(wctx) }()
	// The worker live before the first Map: a batch submitted before it
	// registers rightly warns that no live worker serves it.
	redistest.Eventually(t, "the worker live", func() bool {
		ids, err := seam.LiveWorkers(context.Background())
		return err == nil && len(ids) > 0
	})

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, n := range []int{1, 30_000} { // one window; then eight, while results come
		ys, err := Map(ctx, m, square, make([]int, n), ChunkSize(1))
		if err != nil || len(ys) != n {
			t.Fatalf("Map of %d: %v", n, err)
		}
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	stop()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	held := seam.count()
	t.Logf("%d submits each held until a check had run", held)
	if held < 5 {
		t.Fatalf("only %d submits were held back: the race was not exercised", held)
	}
	for _, msg := range logs.all() {
		if strings.Contains(msg, "lost") || strings.Contains(msg, "again") {
			t.Errorf("false alarm on a healthy Redis: %s", msg)
		}
	}
	if msgs := logs.all(); len(msgs) > 0 {
		t.Fatalf("a healthy run and a clean Close logged above Debug: %q", msgs)
	}
}

// A chunk ends once, whoever reports its end first: a result, a failure, a
// second result, a failAll. Its elements are counted once, and the batch
// ends when, and only when, every element has its outcome.
func TestChunkEndsOnce(t *testing.T) {
	m, err := New(redistest.Shared(t).Client(t), Options{Queue: redistest.Queue(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	b := newBatch[int](m.env, 1, "square", 6, nil, false)
	first := b.addChunks(chunk{start: 0, count: 2, tid: "a"}, chunk{start: 2, count: 2, tid: "b"})
	b.fail(first, 0, redmap.ErrLost)
	b.fail(first, 0, redmap.ErrUnavailable) // again: ignored
	b.failUnsubmitted(4, 2, 0, redmap.ErrUnavailable)
	select {
	case <-b.Done():
		t.Fatal("the batch ended with chunk b still out")
	default:
	}
	b.fail(first+1, 0, redmap.ErrLost)
	b.fail(first+1, 0, redmap.ErrLost)
	<-b.Done()
	_, err = b.Wait(context.Background())
	var be *redmap.BatchError
	if !errors.As(err, &be) || len(be.Failed) != 6 {
		t.Fatalf("Wait: %v, want all 6 elements failed once", err)
	}
	if !errors.Is(be.Failed[0].Err, redmap.ErrLost) || !errors.Is(be.Failed[4].Err, redmap.ErrUnavailable) {
		t.Fatalf("the first outcome of a chunk must stand: %v", be)
	}
	n := 0
	for range b.Results() {
		n++
	}
	if n != 6 {
		t.Fatalf("Results yielded %d, want 6", n)
	}
}

// checkFirst is a manager's seam to Redis that holds each feeder's submit
// (one that installs no new epoch: not a recovery's) until the next check
// for lost data (Submitted) has returned.
type checkFirst struct {
	broker.Queue
	mu      sync.Mutex
	waiting chan struct{} // closed by the next check
	held    int
}

func (c *checkFirst) Submit(ctx context.Context, p *broker.SubmitParams) (*broker.SubmitResult, error) {
	if p.Expect.NewEpoch == "" {
		ch := make(chan struct{})
		c.mu.Lock()
		c.waiting = ch
		c.held++
		c.mu.Unlock()
		<-ch
	}
	return c.Queue.Submit(ctx, p)
}

func (c *checkFirst) Submitted(ctx context.Context, p *broker.ManagerParams) (*broker.SubmittedResult, error) {
	got, err := c.Queue.Submitted(ctx, p)
	c.mu.Lock()
	if c.waiting != nil {
		close(c.waiting)
		c.waiting = nil
	}
	c.mu.Unlock()
	return got, err
}

// count returns how many submits were held.
func (c *checkFirst) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.held
}

// loseStaged is a manager's seam to Redis that deletes the staged result
// the first staged entry a read brings refers to, just before it is read:
// Redis losing it between the read of the list and the read of the result.
type loseStaged struct {
	broker.Queue
	c    *redis.Client
	key  string // the manager's staged results
	lost atomic.Int32
}

func (l *loseStaged) Unstaged(ctx context.Context, p *broker.EntriesParams) ([]string, error) {
	for _, e := range p.Entries {
		if f, ok := wire.StagedField(e); ok && l.lost.Load() == 0 {
			if err := l.c.HDel(ctx, l.key, f).Err(); err != nil {
				return nil, err
			}
			l.lost.Add(1)
		}
	}
	return l.Queue.Unstaged(ctx, p)
}

// bigEcho returns its string with "#" after it; fed strings over
// broker.Inline, its results are staged beside the result list.
var bigEcho = redmap.Func("bigecho", func(_ context.Context, s string) (string, error) { return s + "#", nil })

// A staged result found gone when read (Redis lost it) is no element's
// error: the manager submits its task again, as any task Redis lost, and
// the batch ends exact.
func TestStagedResultLostIsRunAgain(t *testing.T) {
	srv := redistest.Shared(t)
	c := srv.Client(t)
	queue := redistest.Queue(t)
	logs := &recorder{}
	opts, err := Options{Queue: queue, Poll: 50 * time.Millisecond, Logger: slog.New(logs)}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	r := clientSeams(c, opts)
	mid := id.New()
	seam := &loseStaged{Queue: r.queue, c: c, key: keys.Staged(opts.Prefix, queue, mid)}
	r.queue = seam
	m := assemble(r, opts, mid, nil)
	defer m.Close()
	w, err := worker.New(c, worker.Options{Queue: queue, Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	w.Register(bigEcho)
	wctx, stop := context.WithCancel(context.Background())
	defer stop()
	go w.Run(wctx)

	in := make([]string, 6)
	for i := range in {
		in[i] = strings.Repeat(string(rune('a'+i)), broker.Inline+100)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ys, err := Map(ctx, m, bigEcho, in, ChunkSize(1))
	if err != nil {
		t.Fatalf("Map: %v", err)
	}
	for i, y := range ys {
		if y != in[i]+"#" {
			t.Fatalf("element %d: %d bytes, want %d", i, len(y), len(in[i])+1)
		}
	}
	if seam.lost.Load() != 1 {
		t.Fatal("no staged result was lost: the test did not exercise the path")
	}
	var warned bool
	for _, msg := range logs.all() {
		warned = warned || strings.Contains(msg, "a delivered result was gone from Redis")
	}
	if !warned {
		t.Fatalf("the loss was not logged: %q", logs.all())
	}
}
