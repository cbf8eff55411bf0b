package manager_test

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redmap/redmap/connect"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/redistest"
)

func TestMain(m *testing.M) {
	// go-redis logs the dial failures of fault tests on stderr; they are
	// expected, and would drown the tests' own output.
	// A child started with REDMAP_GOREDIS_LOGS keeps them, on stderr, for a
	// test that reads them.
	if os.Getenv("REDMAP_GOREDIS_LOGS") != "" {
		connect.RouteLogs(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})))
	} else {
		connect.RouteLogs(slog.New(slog.DiscardHandler))
	}
	// A manager with no Logger warns through slog.Default(); the tests'
	// managers that set none would fill a failed run's output with
	// warnings they expect. TestDefaultLoggerWarns sets its own.
	slog.SetDefault(slog.New(slog.DiscardHandler))
	runChild()
	code := redistest.Run(m)
	harness.Cleanup()
	os.Exit(code)
}

// setup returns the test's Env on the package's shared server (see harness).
func setup(t *testing.T) *harness.Env { return harness.Setup(t) }

// testCtx returns a context that ends with the test, or after 3 minutes,
// so a broken test fails instead of hanging: not a bound on how fast a call
// is (a map/reduce by key of one partition took over a minute under -race
// with a second make test beside it).
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it holds; see redistest.Eventually.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	redistest.Eventually(t, what, cond)
}

// eventuallyWithin is eventually with a deadline of d, for a condition that
// waits on a chain of events (a lease lapsing, a reap, a take) which a CI
// machine running every package's tests at once can slow past 20 s.
func eventuallyWithin(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Errorf("timed out after %v waiting for: %s", d, what)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
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
