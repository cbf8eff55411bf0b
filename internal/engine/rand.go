package engine

import (
	"context"
	"math/rand/v2"
)

// Rand returns the random source of the element ctx belongs to (see
// redmap.Rand).
func Rand(ctx context.Context) *rand.Rand {
	e, _ := ctx.Value(elementKey{}).(*element)
	if e == nil {
		return rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	if !e.seeded {
		e.src.Seed(e.seed, mix(e.seed^mix(e.index)))
		e.seeded = true
	}
	if e.r == nil {
		e.r = rand.New(&e.src) // made once a task, by the first that asks
	}
	return e.r
}

// elementKey is the context key of the element a function runs on.
type elementKey struct{}

// element is the element a function runs on, for Rand: one per task, reset
// for each element and each attempt.
type element struct {
	seed, index uint64
	seeded      bool
	src         rand.PCG
	r           *rand.Rand
}

// withElements returns ctx carrying an element of the batch with seed; at
// sets the element and attempt about to run.
func withElements(ctx context.Context, seed uint64) (context.Context, *element) {
	e := &element{seed: seed}
	return context.WithValue(ctx, elementKey{}, e), e
}

// at makes e element index of its batch, its stream not yet started.
func (e *element) at(index int) {
	e.index, e.seeded = uint64(index), false
}

// mix is SplitMix64's finaliser: nearby inputs give unrelated outputs, so
// neighbouring elements get unrelated streams.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
