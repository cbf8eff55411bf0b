package manager_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
)

// A slow link is not a gone Redis: each of the manager's calls is bounded in
// bytes, so a link of 10 MB/s never makes one exceed go-redis's read timeout,
// and a call that answers is not an outage.

// wideBytes is the size of wide's outputs: far over broker.Inline, so each
// result is staged beside the result list and read by the collector's HMGET.
const wideBytes = 64 << 10

// wide returns wideBytes bytes that only x gives.
var wide = redmap.Func("wide", func(_ context.Context, x int) (string, error) { return wideOf(x), nil })

func wideOf(x int) string {
	s := fmt.Sprintf("%08d", x)
	return strings.Repeat(s, wideBytes/len(s))
}

// slowLinkManager returns a manager whose link to a Redis of the test's
// own carries rate bytes a second each way, and a worker process beside
// that Redis (it talks to it directly), live.
func slowLinkManager(t *testing.T, rate int64) *manager.Manager {
	t.Helper()
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	proxy.Throttle(rate)
	b := faultBundle(t, srv, proxy.Addr())
	b.URL = srv.URL()
	w := startChild(t, "worker", childEnv(b)...)
	w.ID = w.Expect(t, "worker ")
	m := b.Manager(t, manager.Options{})
	harness.WaitLive(t, m, w.ID)
	return m
}

// A manager behind a link of 10 MB/s (each way), a worker process beside
// Redis: 1,500 results of 64 KiB (96 MiB, about 10 s of the link, three
// times a call's read timeout) are all read, each exact, none failed with
// ErrUnavailable, though the worker delivers them far faster than the link
// carries them.
func TestFaultSlowLinkManager(t *testing.T) {
	m := slowLinkManager(t, 10<<20)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const n = 1500
	batch, err := manager.Submit(ctx, m, wide, ints(n), manager.ChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}
	seen := make([]int, n)
	var wrong, unavailable, other int
	var firstErr error
	for r := range batch.Results() {
		seen[r.Index]++
		switch {
		case r.Err == nil && r.Value == wideOf(r.Index):
		case r.Err == nil:
			wrong++
		case errors.Is(r.Err, redmap.ErrUnavailable):
			unavailable++
		default:
			other++
		}
		if r.Err != nil && firstErr == nil {
			firstErr = r.Err
		}
	}
	for i, k := range seen {
		if k != 1 {
			t.Errorf("element %d delivered %d times, want exactly once", i, k)
		}
	}
	if wrong+unavailable+other > 0 {
		t.Fatalf("of %d elements: %d wrong, %d ErrUnavailable, %d other errors; first: %v", n, wrong, unavailable, other, firstErr)
	}
	st := m.Stats()
	t.Logf("%d results of %d KiB exact through a 10 MB/s link; manager stats: %+v", n, wideBytes>>10, st)
}

// A constant of 24 MiB uploaded through a link of 3 MiB/s: its parts go in
// pipelines of at most 4 MiB (1.3 s each), each within go-redis's write
// timeout, and the batch is exact. One pipeline of all its parts
// (8 s) would time out, again at every retry.
func TestFaultSlowLinkConstant(t *testing.T) {
	m := slowLinkManager(t, 3<<20)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tab := table(24 << 20)
	xs := make([]int, 100)
	for i := range xs {
		xs[i] = i * 251_659 // spread over the table
	}
	ys, err := manager.MapWith(ctx, m, lookup, tab, xs)
	if err != nil {
		t.Fatalf("MapWith of a 24 MiB constant through a 3 MiB/s link: %v", err)
	}
	for i, y := range ys {
		if y != tab[xs[i]%len(tab)] {
			t.Fatalf("ys[%d] = %d, want %d", i, y, tab[xs[i]%len(tab)])
		}
	}
	st := m.Stats()
	if st.ConstantUploads != 1 || st.ConstantBytes < 24<<20 {
		t.Fatalf("stats %+v: want one upload of the constant", st)
	}
	t.Logf("a 24 MiB constant uploaded through a 3 MiB/s link; %d elements exact; stats %+v", len(ys), st)
}
