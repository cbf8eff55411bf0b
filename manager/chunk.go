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
// no other client; and its results near chunkOut, from the sizes of the
// outputs tasks returned, so that a finish stays small beside maxmemory
// (2,000 outputs of 64 KiB in tasks of 125 were 8 MiB finishes, refused
// whole by a Redis of 20 MB).
//
// A map task of a map/reduce by key costs far more than its elements'
// run: it stores a partial per partition for every distinct key of its
// elements, and the reduce phase reads and folds each of them again. The
// larger the task, the more of its pairs combine before they travel (an
// index of 21,180 man pages stored 42.5 MiB of partials in tasks of 8
// files, 7.4 MiB in tasks of 512), so such a task aims at mapTarget of
// work, and the spread a batch keeps (chunkSpread tasks) sizes a small
// job's tasks.
//
// While a function's cost is unknown, a batch's first window is
// measureTasks tasks of up to chunkUnknown elements; the feeder cuts the
// rest only once one of them has reported its cost (feeder.measuring), so
// that a batch of 30,000 elements is not all cut blind.
const (
	chunkTarget  = 4e6   // ns of work per task to aim at
	mapTarget    = 500e6 // ns of work per map task of a map/reduce by key
	chunkMax     = 65536
	chunkBytes   = 4 << 20   // encoded input bytes per task to stay near
	chunkOut     = 256 << 10 // encoded output bytes per task to stay near
	chunkUnknown = 8         // elements per task while a function's cost is unknown
	chunkSpread  = 16        // tasks a batch keeps, if it has the elements for them
	measureTasks = 4         // tasks of a window cut while the cost is unknown
)

// sizing is how a batch's chunks are sized: the name its cost is learnt
// under and the work a task aims at. A map/reduce by key's map phase
// learns apart from plain calls of its emitter (mapSizing), and its
// reduce phase (one partition a task) learns nothing.
type sizing struct {
	key    string
	target float64 // ns of work a task
}

// plainSizing is the sizing of a batch of fn's tasks.
func plainSizing(fn string) sizing { return sizing{key: fn, target: chunkTarget} }

// mapSizing is the sizing of the map phase of a map/reduce by key of
// emitter fn.
func mapSizing(fn string) sizing { return sizing{key: fn + "\x00map", target: mapTarget} }

// costs are what the manager has learnt of its functions: for each function
// name, nanoseconds of work and encoded input bytes per element, smoothed.
type costs struct {
	mu    sync.Mutex
	seen  map[string]int // tasks observed, by key (observe)
	m     map[string]float64
	bytes map[string]float64
	out   map[string]float64 // encoded output bytes per element
}

func newCosts() *costs {
	return &costs{seen: make(map[string]int), m: make(map[string]float64), bytes: make(map[string]float64), out: make(map[string]float64)}
}

// chunkSize returns how many elements to put in the next task of a batch
// of n elements sized by s.
func (c *costs) chunkSize(s sizing, n int) int {
	c.mu.Lock()
	cost, known := c.m[s.key]
	per := c.bytes[s.key]
	out := c.out[s.key]
	c.mu.Unlock()
	if !known {
		// Small first tasks measure the cost soon; a small batch is spread.
		return min(max(n/64, 1), chunkUnknown)
	}
	size := int(min(s.target/max(cost, 1), chunkMax))
	if per > 0 {
		size = min(size, int(chunkBytes/per))
	}
	if out > 0 {
		// A task's results travel in one finish, which Redis holds whole
		// (at maxmemory, refuses whole).
		size = min(size, int(chunkOut/out))
	}
	// Keep chunkSpread tasks in a batch that has the elements for them.
	return max(1, min(size, chunkMax, (n+chunkSpread-1)/chunkSpread))
}

// known reports whether the cost of tasks sized by s has been measured.
func (c *costs) known(s sizing) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.m[s.key]
	return ok
}

// observe records that a task of fn (a sizing's key) ran count elements
// in nanos.
//
// Of the first measureTasks tasks, the cheapest per element is kept: a
// task's time only grows with what disturbs it (a cold start, a starved
// core), and the first ones decide how the rest of a batch is cut.
func (c *costs) observe(fn string, nanos int64, count int) {
	if nanos <= 0 || count <= 0 || fn == "" {
		return
	}
	c.mu.Lock()
	n := c.seen[fn]
	c.seen[fn]++
	old, ok := c.m[fn]
	c.mu.Unlock()
	if ok && n < measureTasks {
		c.mu.Lock()
		c.m[fn] = min(old, float64(nanos)/float64(count))
		c.mu.Unlock()
		return
	}
	c.learn(c.m, fn, float64(nanos), count)
}

// observeOut records that count elements of fn gave size bytes of
// encoded outputs.
func (c *costs) observeOut(fn string, size, count int) {
	c.learn(c.out, fn, float64(max(size, 1)), count)
}

// observeSize records that count elements of fn were encoded into size
// bytes.
func (c *costs) observeSize(fn string, size, count int) {
	c.learn(c.bytes, fn, float64(size), count)
}

// learn folds total/count, a measure per element of fn, into m[fn]:
// smoothed, so that one odd task moves it a fifth of the way.
func (c *costs) learn(m map[string]float64, fn string, total float64, count int) {
	if total <= 0 || count <= 0 || fn == "" {
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
