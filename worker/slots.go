package worker

import "context"

// slots bounds the tasks a worker holds between taking and running them: a
// token per task taken and not yet run, Concurrency running and Prefetch
// waiting. The fetcher acquires, the executors release.
type slots chan struct{}

// acquire waits for one free slot, then claims every other free one, and
// returns how many it claimed; 0 if ctx ended first.
func (s slots) acquire(ctx context.Context) int {
	select {
	case s <- struct{}{}:
	case <-ctx.Done():
		return 0
	}
	n := 1
	for n < cap(s) {
		select {
		case s <- struct{}{}:
			n++
		default:
			return n
		}
	}
	return n
}

// release frees n slots.
func (s slots) release(n int) {
	for range n {
		<-s
	}
}
