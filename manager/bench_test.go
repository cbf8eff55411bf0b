package manager_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// benchFleet starts an in-process worker and a manager on the package's
// server, for benchmarks.
func benchFleet(b *testing.B) *manager.Manager {
	b.Helper()
	c := redis.NewClient(&redis.Options{Addr: redistest.Shared(b).Addr()})
	b.Cleanup(func() { c.Close() })
	queue := redistest.Queue(b)
	w, err := worker.New(c, worker.Options{Queue: queue})
	if err != nil {
		b.Fatal(err)
	}
	w.Register(square)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	m, err := manager.New(c, manager.Options{Queue: queue})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close(); cancel(); <-done })
	return m
}

// BenchmarkMapTiny is Map end to end over 100,000 tiny elements; the
// allocations it reports are per Map, of manager and worker together.
func BenchmarkMapTiny(b *testing.B) {
	m := benchFleet(b)
	xs := ints(100_000)
	ctx := context.Background()
	if _, err := manager.Map(ctx, m, square, xs); err != nil { // learn the cost
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := manager.Map(ctx, m, square, xs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(xs)*b.N)/b.Elapsed().Seconds(), "elements/s")
}

// BenchmarkMapOne is the round trip of a single-element Map.
func BenchmarkMapOne(b *testing.B) {
	m := benchFleet(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := manager.Map(ctx, m, square, []int{3}); err != nil {
			b.Fatal(err)
		}
	}
}
