package main

import (
	"context"
	"fmt"
	"math"
	"sync"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/manager"
)

// Segment is a half-open range of integers [Lo, Hi).
type Segment struct{ Lo, Hi int64 }

// sieve counts the primes in a segment with a segmented sieve of
// Eratosthenes: compute-bound work, seconds in all, for the ceiling of a
// compute-bound batch.
var sieve = redmap.Func("sieve", func(_ context.Context, s Segment) (int, error) { return countPrimes(s), nil })

func countPrimes(s Segment) int {
	limit := int64(math.Sqrt(float64(s.Hi))) + 1
	small := make([]bool, limit+1) // composite flags below limit
	var base []int64
	for i := int64(2); i <= limit; i++ {
		if !small[i] {
			base = append(base, i)
			for j := i * i; j <= limit; j += i {
				small[j] = true
			}
		}
	}
	composite := make([]bool, s.Hi-s.Lo)
	for _, p := range base {
		start := max(p*p, (s.Lo+p-1)/p*p)
		for j := start; j < s.Hi; j += p {
			composite[j-s.Lo] = true
		}
	}
	n := 0
	for i, c := range composite {
		if !c && s.Lo+int64(i) >= 2 {
			n++
		}
	}
	return n
}

// compute: the primes below 2·10⁹ in 200 segments, with MapReduce on one
// worker process of GOMAXPROCS slots, against a pool of as many goroutines
// in this process: the ceiling for compute-bound work.
func compute(e *env) ([]row, error) {
	const segments = 200
	n := int64(e.pick(2_000_000_000, 200_000_000))
	segs := make([]Segment, segments)
	for i := range segs {
		segs[i] = Segment{Lo: n * int64(i) / segments, Hi: n * int64(i+1) / segments}
	}
	m, stop, err := e.redmapFleet(sieve, plus)
	if err != nil {
		return nil, err
	}
	defer stop()
	ctx := context.Background()
	if _, err := manager.MapReduce(ctx, m, sieve, plus, segs[:e.slots], manager.ChunkSize(1)); err != nil {
		return nil, err
	}
	var viaRedmap, local int
	r, err := e.measure("compute", "redmap MapReduce", segments, func() error {
		var err error
		viaRedmap, err = manager.MapReduce(ctx, m, sieve, plus, segs, manager.ChunkSize(1))
		return err
	})
	if err != nil {
		return nil, err
	}
	l, err := e.measure("compute", "local goroutine pool", segments, func() error {
		work := make(chan Segment)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range e.slots {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for s := range work {
					c := countPrimes(s)
					mu.Lock()
					local += c
					mu.Unlock()
				}
			}()
		}
		for _, s := range segs {
			work <- s
		}
		close(work)
		wg.Wait()
		return nil
	})
	if err != nil {
		return nil, err
	}
	if viaRedmap != local {
		return nil, fmt.Errorf("redmap counted %d primes, the local pool %d", viaRedmap, local)
	}
	r.note = fmt.Sprintf("%d primes below %d, in %d segments", local, n, segments)
	return []row{r, l}, nil
}
