package manager

import "sync"

// Automatic chunking: tiny elements travel many to a task, so that a million
// of them do not cost a million round trips, while slow ones travel few to a
// task, so that a batch still spreads over the fleet. The size aims at
// chunkTarget of work per task, from what workers measure. A cheap
// function's tasks are as large as the leanest hand-written chunked queue's
// (65,536 values): each task costs Redis a take, a finish and a read of
// its result whatever its size (about 57 µs of its CPU measured on 2
// cores), and at 2 ms and 32,768 elements a million tiny elements took
// about a fifth more of Redis's CPU (docs/performance.md). A task's
// payload is also kept near chunkBytes, from the sizes its elements were
// encoded to, so that a cheap function of large elements does not make
// tasks of tens of MiB: Redis copies each in one step, in which it serves
// no other client.
const (
	chunkTarget  = 4e6 // ns of work per task to aim at
	chunkMax     = 65536
	chunkBytes   = 4 << 20 // encoded input bytes per task to stay near
	chunkUnknown = 8       // elements per task while a function's cost is unknown
)

// costs are what the manager has learnt of its functions: for each function
// name, nanoseconds of work and encoded input bytes per element, smoothed.
type costs struct {
	mu    sync.Mutex
	m     map[string]float64
	bytes map[string]float64
}

func newCosts() costs {
	return costs{m: make(map[string]float64), bytes: make(map[string]float64)}
}

// chunkSize returns how many elements of fn to put in the next task of a
// batch of n elements.
func (c *costs) chunkSize(fn string, n int) int {
	c.mu.Lock()
	cost, known := c.m[fn]
	per := c.bytes[fn]
	c.mu.Unlock()
	if !known {
		// Small first tasks measure the cost soon; a small batch is spread.
		return min(max(n/64, 1), chunkUnknown)
	}
	size := int(chunkTarget / max(cost, 1))
	if per > 0 {
		size = min(size, int(chunkBytes/per))
	}
	// Keep at least 16 tasks in a batch that has the elements for them.
	return max(1, min(size, chunkMax, (n+15)/16))
}

// observe records that a task of fn ran count elements in nanos.
func (c *costs) observe(fn string, nanos int64, count int) {
	c.learn(c.m, fn, float64(nanos), count)
}

// observeSize records that count elements of fn were encoded into size
// bytes.
func (c *costs) observeSize(fn string, size, count int) {
	c.learn(c.bytes, fn, float64(size), count)
}

// learn folds total/count, a measure per element of fn, into m[fn]:
// smoothed, so that one odd task moves it a fifth of the way.
func (c *costs) learn(m map[string]float64, fn string, total float64, count int) {
	if total <= 0 || count <= 0 {
		return
	}
	per := total / float64(count)
	c.mu.Lock()
	if old, ok := m[fn]; ok {
		per = 0.8*old + 0.2*per
	}
	m[fn] = per
	c.mu.Unlock()
}
