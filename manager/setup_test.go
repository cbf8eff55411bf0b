package manager_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// artefacts holds what tests share across the package, such as the built
// examples/squares binary; removed when the tests end.
var artefacts string

func TestMain(m *testing.M) {
	// go-redis logs the dial failures of fault tests on stderr; they are
	// expected, and would drown the tests' own output.
	redmap.RouteRedisLogs(slog.New(slog.DiscardHandler))
	runChild()
	dir, err := os.MkdirTemp("", "redmap-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	artefacts = dir
	code := redistest.Run(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// bundle is what one test works with: a client of the package's server and a
// queue no other test uses.
type bundle struct {
	srv   *redistest.Server
	rdb   *redis.Client
	queue string
}

func setup(t *testing.T) *bundle {
	t.Helper()
	t.Parallel()
	srv := redistest.Shared(t)
	return &bundle{srv: srv, rdb: srv.Client(t), queue: redistest.Queue(t)}
}

// ctx returns a context that ends with the test, or after a minute, so a
// broken test fails instead of hanging.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func (b *bundle) manager(t *testing.T, opts manager.Options) *manager.Manager {
	t.Helper()
	opts.Queue = b.queue
	m, err := manager.New(b.rdb, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("manager close: %v", err)
		}
	})
	return m
}

// worker starts an in-process worker with hs; it is stopped, and Run's
// return checked, when the test ends.
func (b *bundle) worker(t *testing.T, opts worker.Options, hs ...redmap.Handler) *worker.Worker {
	t.Helper()
	opts.Queue = b.queue
	w, err := worker.New(b.rdb, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Handle(hs...); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("worker run: %v", err)
		}
	})
	return w
}

// waitLive waits until the manager sees every worker id as live.
func waitLive(t *testing.T, m *manager.Manager, ids ...string) {
	t.Helper()
	eventually(t, "workers live", func() bool {
		live, err := m.Workers(context.Background())
		if err != nil {
			return false
		}
		for _, id := range ids {
			if !slices.Contains(live, id) {
				return false
			}
		}
		return true
	})
}

// eventually polls cond until it holds; see redistest.Eventually.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	redistest.Eventually(t, what, cond)
}

func ints(n int) []int {
	xs := make([]int, n)
	for i := range xs {
		xs[i] = i
	}
	return xs
}

var square = redmap.Func("square", func(_ context.Context, x int) (int, error) { return x * x, nil })

// logRecorder is a slog.Handler that keeps every record, for tests that check
// what the manager logs.
type logRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.recs = append(l.recs, r.Clone())
	l.mu.Unlock()
	return nil
}
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

// above returns the messages logged above level, with their attributes.
func (l *logRecorder) above(level slog.Level) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.recs {
		if r.Level > level {
			s := r.Level.String() + " " + r.Message
			r.Attrs(func(a slog.Attr) bool { s += " " + a.String(); return true })
			out = append(out, s)
		}
	}
	return out
}

// logged reports whether a message containing msg was logged.
func (l *logRecorder) logged(msg string) bool {
	for _, s := range l.above(slog.LevelDebug - 1) {
		if strings.Contains(s, msg) {
			return true
		}
	}
	return false
}
