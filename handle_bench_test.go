package redmap_test

import (
	"context"
	"testing"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/engine"
)

// BenchmarkRunChunk is the worker's hot path for one task of 1,000 tiny
// elements: decode, call, encode.
func BenchmarkRunChunk(b *testing.B) {
	h := redmap.Func("square", func(_ context.Context, x int) (int, error) { return x * x, nil })
	xs := make([]int, 1000)
	for i := range xs {
		xs[i] = i
	}
	frame, _ := codec.EncodeElements(xs, 0)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, fails := rt(h).Run(ctx, nil, 1000, frame, engine.Policy{Attempts: 3}, nil); len(fails) != 0 {
			b.Fatal(fails)
		}
	}
}

// BenchmarkRunChunkTimeout is BenchmarkRunChunk with a timeout per element
// (manager.Timeout), as a worker runs it: each run under its own context,
// and, with Abandon (worker.Options.AbandonGrace), on its own goroutine.
func BenchmarkRunChunkTimeout(b *testing.B) {
	h := redmap.Func("square", func(_ context.Context, x int) (int, error) { return x * x, nil })
	xs := make([]int, 1000)
	for i := range xs {
		xs[i] = i
	}
	frame, _ := codec.EncodeElements(xs, 0)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		p    engine.Policy
	}{
		{"no-abandon", engine.Policy{Attempts: 3, Timeout: time.Minute}},
		{"abandon", engine.Policy{Attempts: 3, Timeout: time.Minute, Abandon: time.Second}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, fails := rt(h).Run(ctx, nil, 1000, frame, c.p, nil); len(fails) != 0 {
					b.Fatal(fails)
				}
			}
		})
	}
}
