package redmap

import (
	"context"
	"math/rand/v2"

	"github.com/redmap/redmap/internal/engine"
)

// Rand returns the random source of the element ctx belongs to, for a
// stochastic function: its stream is fixed by the batch's seed
// (manager.Seed; without it, a seed the manager draws for the batch) and the
// element's index in the batch. So a Map with a seed returns the same outputs
// whichever worker runs each element, whatever the chunk size, and however
// often an element is retried: each attempt starts the stream again.
//
// Within one call of the function, every Rand(ctx) returns the same source.
// It is not safe for use by several goroutines at once. Outside a redmap
// element, Rand returns a randomly seeded source.
func Rand(ctx context.Context) *rand.Rand { return engine.Rand(ctx) }
