package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

type scenario struct {
	name string
	run  func(e *env) ([]row, error)
}

var scenarios = []scenario{
	{"tiny", tiny},
	{"unchunked", unchunked},
	{"medium", medium},
	{"large", large},
	{"midsize", midsize},
	{"constant", constant},
	{"latency", latency},
	{"fanout", fanout},
	{"fairshare", fairshare},
	{"managers", managers},
	{"stream", stream},
	{"reduce", reduce},
	{"shuffle", shuffle},
	{"index", index},
	{"manindex", manindex},
	{"seq", seq},
	{"consume", consume},
	{"compute", compute},
	{"scale", scale},
	{"stragglers", stragglers},
	{"pipeline", pipeline}, // GOROOT/src files → identifiers → counts by identifier → top 10 per first letter → lines: loop, hand-chained calls, Pipeline Collect
}

// The functions redmap runs, and their baseline twins on raw bytes.
var (
	square = redmap.Func("square", func(_ context.Context, x int) (int, error) { return x * x, nil })
	spin   = redmap.Func("spin", func(_ context.Context, x int) (int, error) { return burn(x), nil })
	mirror = redmap.Func("mirror", func(_ context.Context, b []byte) ([]byte, error) { return reversed(b), nil })
	lookup = redmap.FuncWith("lookup", func(_ context.Context, tab []byte, x int) (int, error) { return int(tab[x%len(tab)]), nil })
)

func squareBytes(b []byte) []byte {
	x := binary.LittleEndian.Uint64(b)
	return binary.LittleEndian.AppendUint64(nil, x*x)
}

func spinBytes(b []byte) []byte {
	return binary.LittleEndian.AppendUint64(nil, uint64(burn(int(binary.LittleEndian.Uint64(b)))))
}

func reversed(b []byte) []byte {
	out := make([]byte, len(b))
	for i, c := range b {
		out[len(b)-1-i] = c
	}
	return out
}

// burnIters is how many rounds of burn take about a millisecond here.
var burnIters = calibrate()

func burn(x int) int {
	h := uint64(x) | 1
	for range burnIters {
		h ^= h << 13
		h ^= h >> 7
		h ^= h << 17
	}
	return int(h & 0xff)
}

func calibrate() int {
	n := 1 << 16
	for {
		start := time.Now()
		h := uint64(1)
		for range n {
			h ^= h << 13
			h ^= h >> 7
			h ^= h << 17
		}
		if d := time.Since(start); d > 20*time.Millisecond || h == 0 {
			return int(float64(n) * float64(time.Millisecond) / float64(d))
		}
		n *= 2
	}
}

// pick returns full or, with -quick, small.
func (e *env) pick(full, small int) int {
	if e.quick {
		return small
	}
	return full
}

// redmapFleet starts a redmap worker with GOMAXPROCS slots on a fresh queue,
// as a process of its own (or, with -inprocess, in this one, serving hs),
// and a manager for it; stop ends both.
func (e *env) redmapFleet(hs ...redmap.AnyHandle) (*manager.Manager, func(), error) {
	if !e.inproc {
		return e.processFleet(1)
	}
	queue := "bench-" + id.New()[:8]
	w, err := worker.New(e.rdb, worker.Options{Queue: queue, Concurrency: e.slots})
	if err != nil {
		return nil, nil, err
	}
	if err := w.Register(hs...); err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	m, err := manager.New(e.rdb, manager.Options{Queue: queue})
	if err != nil {
		cancel()
		return nil, nil, err
	}
	return m, func() { m.Close(); cancel(); <-done }, nil
}

func ints(n int) []int {
	xs := make([]int, n)
	for i := range xs {
		xs[i] = i
	}
	return xs
}

func intBytes(n int) [][]byte {
	xs := make([][]byte, n)
	for i := range xs {
		xs[i] = binary.LittleEndian.AppendUint64(nil, uint64(i))
	}
	return xs
}

// tinyRun measures redmap mapping square over n ints (after a warm-up batch
// that lets it learn the cost, as a long-running program would have), then the
// baselines, the per-task one on fewer elements (it is slow).
func tinyRun(e *env, name string, n, perTaskN int, opts ...manager.CallOption) ([]row, error) {
	r, err := e.tinyRedmap(name, "redmap", n, 0, opts...)
	if err != nil {
		return nil, err
	}
	rows := []row{r}
	for _, k := range e.shards {
		contender := fmt.Sprintf("redmap, %d shards", k)
		if k == 1 {
			contender = "redmap, 1 shard"
		}
		r, err := e.tinyRedmap(name, contender, n, k, opts...)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r)
	}
	for _, md := range []mode{perTask, batched, chunked, fixed} {
		k := n
		if md == perTask {
			k = min(n, perTaskN)
		}
		f, err := e.startBaseline(md, "square", "")
		if err != nil {
			return nil, err
		}
		if md == fixed {
			r, err := e.fixedRun(f, name, k)
			f.stop()
			if err != nil {
				return nil, err
			}
			rows = append(rows, r)
			continue
		}
		inputs := intBytes(k)
		if _, err := f.run(inputs[:min(k, 50_000)]); err != nil { // warm up, as redmap did
			f.stop()
			return nil, err
		}
		r, err := e.measure(name, md.String(), k, func() error {
			out, err := f.run(inputs)
			if err == nil && binary.LittleEndian.Uint64(out[k-1]) != uint64((k-1)*(k-1)) {
				err = fmt.Errorf("%v: wrong results", md)
			}
			return err
		})
		f.stop()
		if err != nil {
			return nil, err
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// fixedRun measures the fixed-width baseline f squaring n ints, every
// result checked, after a warm-up as redmap had.
func (e *env) fixedRun(f *baselineFleet, name string, n int) (row, error) {
	xs := make([]uint64, n)
	for i := range xs {
		xs[i] = uint64(i)
	}
	sq := func(x uint64) uint64 { return x * x }
	if err := f.runFixed(xs[:min(n, 50_000)], sq); err != nil {
		return row{}, err
	}
	return e.measure(name, fixed.String(), n, func() error { return f.runFixed(xs, sq) })
}

// tinyRedmap measures redmap squaring n ints, with a manager spreading the
// queue over shards shards (0: the default fleet).
func (e *env) tinyRedmap(name, contender string, n, shards int, opts ...manager.CallOption) (row, error) {
	fleet := func() (*manager.Manager, func(), error) { return e.redmapFleet(square) }
	if shards > 0 {
		fleet = func() (*manager.Manager, func(), error) { return e.shardedFleet(1, shards) }
	}
	m, stop, err := fleet()
	if err != nil {
		return row{}, err
	}
	defer stop()
	ctx := context.Background()
	if _, err := manager.Map(ctx, m, square, ints(min(n, 50_000)), opts...); err != nil {
		return row{}, err
	}
	xs := ints(n)
	return e.measure(name, contender, n, func() error {
		ys, err := manager.Map(ctx, m, square, xs, opts...)
		if err == nil && (len(ys) != n || ys[n-1] != (n-1)*(n-1)) {
			err = fmt.Errorf("wrong results")
		}
		return err
	})
}

func tiny(e *env) ([]row, error) {
	return tinyRun(e, "tiny", e.pick(1_000_000, 100_000), e.pick(20_000, 3_000))
}

func unchunked(e *env) ([]row, error) {
	return tinyRun(e, "unchunked", e.pick(100_000, 20_000), e.pick(20_000, 3_000), manager.ChunkSize(1))
}

// medium: about a millisecond of CPU per element.
func medium(e *env) ([]row, error) {
	n := e.pick(2000, 300)
	rows, err := mapped(e, "medium", spin, ints(n), 50, nil)
	if err != nil {
		return nil, err
	}
	return e.baselines("medium", rows, intBytes(n), "spin")
}

// mapped measures redmap's Map of fn over xs, on workers of this process
// serving fn, after a Map over xs[:warm] to warm up (the manager learns
// the function's cost, connections open). right, if not nil, says whether
// the results are right.
func mapped[In, Out any](e *env, scenario string, fn *redmap.Handle[In, Out], xs []In, warm int, right func([]Out) bool, opts ...manager.CallOption) ([]row, error) {
	m, stop, err := e.redmapFleet(fn)
	if err != nil {
		return nil, err
	}
	defer stop()
	ctx := context.Background()
	if _, err := manager.Map(ctx, m, fn, xs[:warm], opts...); err != nil {
		return nil, err
	}
	r, err := e.measure(scenario, "redmap", len(xs), func() error {
		ys, err := manager.Map(ctx, m, fn, xs, opts...)
		if err == nil && right != nil && !right(ys) {
			err = fmt.Errorf("wrong results")
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return []row{r}, nil
}

// baselines measures the three baselines on inputs and appends their rows.
func (e *env) baselines(scenario string, rows []row, inputs [][]byte, work string) ([]row, error) {
	for _, md := range []mode{perTask, batched, chunked} {
		f, err := e.startBaseline(md, work, "")
		if err != nil {
			return nil, err
		}
		if _, err := f.run(inputs[:min(len(inputs), 50)]); err != nil { // warm up, as redmap did
			f.stop()
			return nil, err
		}
		r, err := e.measure(scenario, md.String(), len(inputs), func() error {
			_, err := f.run(inputs)
			return err
		})
		f.stop()
		if err != nil {
			return nil, err
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// large: 64 KiB in and out per element.
func large(e *env) ([]row, error) {
	n := e.pick(2000, 200)
	xs := make([][]byte, n)
	for i := range xs {
		xs[i] = make([]byte, 64<<10)
		xs[i][0] = byte(i)
	}
	rows, err := mapped(e, "large", mirror, xs, 20, func(ys [][]byte) bool { return ys[n-1][64<<10-1] == byte(n-1) })
	if err != nil {
		return nil, err
	}
	return e.baselines("large", rows, xs, "mirror")
}

// midsize: 4 KiB in and out an element, one element per task
// (manager.ChunkSize(1)): payloads and results of the size a slow function's
// or a small Map's tasks carry, below a chunk's and above a number's.
func midsize(e *env) ([]row, error) {
	const size = 4 << 10
	n := e.pick(20000, 2000)
	xs := make([][]byte, n)
	for i := range xs {
		xs[i] = make([]byte, size)
		binary.BigEndian.PutUint32(xs[i][size-4:], uint32(i)) // mirror reverses it
	}
	rows, err := mapped(e, "midsize", mirror, xs, 200, func(ys [][]byte) bool {
		return len(ys) == n && binary.LittleEndian.Uint32(ys[n-1]) == uint32(n-1) && len(ys[n-1]) == size
	}, manager.ChunkSize(1))
	if err != nil {
		return nil, err
	}
	return e.baselines("midsize", rows, xs, "mirror")
}

// constant: MapWith of a large constant, one element per task; the per-task
// baseline fetches the constant for every task, the others once per worker.
func constant(e *env) ([]row, error) {
	size := e.pick(100<<20, 10<<20)
	n := e.pick(1000, 200)
	tab := make([]byte, size)
	for i := range tab {
		tab[i] = byte(i * 7)
	}
	m, stop, err := e.redmapFleet(lookup)
	if err != nil {
		return nil, err
	}
	defer stop()
	ctx := context.Background()
	r, err := e.measure("constant", "redmap", n, func() error {
		ys, err := manager.MapWith(ctx, m, lookup, tab, ints(n), manager.ChunkSize(1))
		if err == nil && ys[n-1] != int(tab[n-1]) {
			err = fmt.Errorf("wrong results")
		}
		return err
	})
	r.note = fmt.Sprintf("%d MiB constant", size>>20)
	if err != nil {
		return nil, err
	}
	rows := []row{r}
	for _, md := range []mode{perTask, batched, chunked} {
		k := n
		if md == perTask {
			k = e.pick(20, 5) // each task moves the whole constant
		}
		key := "bq:const:" + id.New()[:8]
		work := "lookup"
		if md == perTask {
			work = "lookup-each"
		}
		f, err := e.startBaseline(md, work, key)
		if err != nil {
			return nil, err
		}
		r, err := e.measure("constant", md.String(), k, func() error {
			if err := e.rdb.Set(ctx, key, tab, 0).Err(); err != nil {
				return err
			}
			_, err := f.run(intBytes(k))
			return err
		})
		f.stop()
		e.rdb.Del(ctx, key)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// latency: single-element Maps, one after another.
func latency(e *env) ([]row, error) {
	n := e.pick(1000, 200)
	m, stop, err := e.redmapFleet(square)
	if err != nil {
		return nil, err
	}
	defer stop()
	ctx := context.Background()
	for i := range 20 { // warm up connections
		manager.Map(ctx, m, square, []int{i})
	}
	lat := make([]time.Duration, n)
	r, err := e.measure("latency", "redmap", n, func() error {
		for i := range n {
			start := time.Now()
			ys, err := manager.Map(ctx, m, square, []int{i})
			if err != nil || ys[0] != i*i {
				return fmt.Errorf("map %d: %v %v", i, ys, err)
			}
			lat[i] = time.Since(start)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	r.p50, r.p99 = percentiles(lat)
	var blat []time.Duration
	f, err := e.startBaseline(perTask, "echo", "")
	if err != nil {
		return nil, err
	}
	defer f.stop()
	if _, err := latencyBaseline(e, f, 20); err != nil { // warm up connections
		return nil, err
	}
	b, err := e.measure("latency", "per-task baseline", n, func() error {
		var err error
		blat, err = latencyBaseline(e, f, n)
		return err
	})
	if err != nil {
		return nil, err
	}
	b.p50, b.p99 = percentiles(blat)
	return []row{r, b}, nil
}

func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	s := slices.Clone(d)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2], s[len(s)*99/100]
}

// managers: 8 managers at once, each mapping its share of tiny elements.
func managers(e *env) ([]row, error) {
	const k = 8
	n := e.pick(800_000, 80_000)
	queue := "bench-" + id.New()[:8]
	w, err := worker.New(e.rdb, worker.Options{Queue: queue, Concurrency: e.slots})
	if err != nil {
		return nil, err
	}
	w.Register(square)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	ms := make([]*manager.Manager, k)
	for i := range ms {
		if ms[i], err = manager.New(e.rdb, manager.Options{Queue: queue}); err != nil {
			return nil, err
		}
		defer ms[i].Close()
		manager.Map(context.Background(), ms[i], square, ints(20_000)) // learn the cost
	}
	r, err := e.measure("managers", "redmap", n, func() error {
		return parallel(k, func(i int) error {
			_, err := manager.Map(context.Background(), ms[i], square, ints(n/k))
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	rows := []row{r}
	for _, md := range []mode{perTask, batched, chunked} {
		each := n / k
		if md == perTask {
			each = e.pick(2_000, 500)
		}
		r, err := e.measure("managers", md.String(), each*k, func() error {
			return parallel(k, func(int) error { _, err := baseline(e, md, intBytes(each), squareBytes); return err })
		})
		if err != nil {
			return nil, err
		}
		rows = append(rows, r)
	}
	return rows, nil
}

func parallel(k int, f func(i int) error) error {
	errs := make(chan error, k)
	for i := range k {
		go func() { errs <- f(i) }()
	}
	var first error
	for range k {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// stream: a batch far larger than Redis may hold, through a redis-server of
// its own capped at 256 MB with noeviction; reports Redis's peak memory and
// the manager's heap, which should grow with the outputs kept, not with what
// passed through Redis.
func stream(e *env) ([]row, error) {
	n := e.pick(10_000_000, 1_000_000)
	srv, err := redistest.StartServer("--maxmemory", "256mb", "--maxmemory-policy", "noeviction")
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	capped := &env{url: srv.URL(), quick: e.quick, slots: e.slots, inproc: e.inproc, children: e.children}
	if err := capped.connect(); err != nil {
		return nil, err
	}
	defer capped.rdb.Close()
	m, stop, err := capped.redmapFleet(square)
	if err != nil {
		return nil, err
	}
	defer stop()
	ctx := context.Background()
	if _, err := manager.Map(ctx, m, square, ints(50_000)); err != nil {
		return nil, err
	}
	xs := ints(n)
	var heap uint64
	r, err := capped.measure("stream", "redmap", n, func() error {
		ys, err := manager.Map(ctx, m, square, xs)
		if err == nil && ys[n-1] != (n-1)*(n-1) {
			err = fmt.Errorf("wrong results")
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heap = ms.HeapAlloc
		return err
	})
	if err != nil {
		return nil, err
	}
	info, _ := capped.rdb.Info(ctx, "memory").Result()
	peak := regexp.MustCompile(`used_memory_peak_human:(\S+)`).FindStringSubmatch(info)
	r.note = fmt.Sprintf("maxmemory 256mb: Redis peak %s; manager heap %d MiB (inputs and outputs: %d MiB)",
		peak[1], heap>>20, 2*8*n>>20)
	return []row{r}, nil
}
