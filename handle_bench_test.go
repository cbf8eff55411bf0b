package redmap_test

import (
	"context"
	"testing"

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
