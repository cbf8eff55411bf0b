package redisbroker

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/redistest"
)

// lockedBuffer is a buffer a logger may write from any goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A Redis that takes connections but does not answer PING within the
// start budget (a starved machine, a link that holds) is waited for up to
// heal, as an outage healing is, and serves once it answers; one that never
// does fails with ErrNoAnswer, which Unreachable says it is.
func TestPreflightWaitsForASlowRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	r := New(c, "rm", redistest.Queue(t))
	ctx := context.Background()

	proxy.Hold()
	logs := &lockedBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	err := r.Preflight(ctx, &broker.PreflightParams{Budget: 200 * time.Millisecond, Heal: 1500 * time.Millisecond, Log: log})
	if !errors.Is(err, broker.ErrNoAnswer) || !broker.Unreachable(err) || !strings.Contains(logs.String(), "Redis takes connections") {
		t.Fatalf("Preflight of a Redis that never answers: %v (broker.Unreachable %v); logs %q", err, broker.Unreachable(err), logs.String())
	}

	logs = &lockedBuffer{}
	log = slog.New(slog.NewTextHandler(logs, nil))
	done := make(chan error, 1)
	go func() {
		done <- r.Preflight(ctx, &broker.PreflightParams{Budget: 200 * time.Millisecond, Heal: time.Minute, Log: log})
	}()
	redistest.Eventually(t, "Preflight waiting for the held Redis", func() bool {
		return strings.Contains(logs.String(), "Redis takes connections")
	})
	proxy.Release()
	if err := <-done; err != nil {
		t.Fatalf("Preflight of a Redis that answered after the budget, within heal: %v", err)
	}
}
