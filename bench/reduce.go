package main

import (
	"context"
	"fmt"
	"iter"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redmap/redmap/connect"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// modSquare and plus are the reduce scenario's functions: the sum over x of
// (x mod 1,000)².
var (
	modSquare = redmap.Func("modsq", func(_ context.Context, x int) (int, error) { m := x % 1000; return m * m, nil })
	plus      = redmap.Reduce("plus", func(_ context.Context, a, b int) (int, error) { return a + b, nil })
)

// workerEnv, when set in a bench process's environment, makes it a worker
// process of that queue (on the Redis of benchURLEnv) instead of a bench.
const (
	workerEnv = "REDMAP_BENCH_WORKER"
	// workerConcurrencyEnv sets a worker process's Concurrency (0 or unset:
	// its GOMAXPROCS).
	workerConcurrencyEnv = "REDMAP_BENCH_CONCURRENCY"
	benchURLEnv          = "REDMAP_BENCH_REDIS"
	// workerProfileEnv, if set, makes each worker process write a CPU
	// profile to <its value>.<pid> (bench -workerprofile).
	workerProfileEnv = "REDMAP_BENCH_WORKER_PROFILE"
)

// runWorkerProcess serves the bench's functions until SIGTERM, if this
// process was started as a bench worker; it reports whether it was.
func runWorkerProcess() bool {
	queue := os.Getenv(workerEnv)
	if queue == "" {
		return false
	}
	traceEverything(false) // as the bench process, if it runs -traced
	c, err := connect.URL(os.Getenv(benchURLEnv))
	var w *worker.Worker
	if err == nil {
		concurrency, _ := strconv.Atoi(os.Getenv(workerConcurrencyEnv))
		w, err = worker.New(c, worker.Options{Queue: queue, Concurrency: concurrency})
	}
	if err == nil {
		err = w.Register(square, spin, mirror, lookup, modSquare, plus, sieve, sleepy, nap, straggle, keyCount, add, blockCounts, mergeCounts, keyText, least, manWords, addStats,
			goIdents, identOne, fileIdents, sumCounts, identLetter, topIdents, letterLine)
	}
	if err == nil {
		if p := os.Getenv(workerProfileEnv); p != "" {
			f, perr := os.Create(fmt.Sprintf("%s.%d", p, os.Getpid()))
			if perr == nil {
				pprof.StartCPUProfile(f)
				defer pprof.StopCPUProfile()
			}
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		defer stop()
		fmt.Println("worker", w.ID())
		err = w.Run(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench worker:", err)
		os.Exit(1)
	}
	return true
}

// processFleet starts k worker processes (this binary, as workers) on a
// fresh queue of e's server and a manager for it; stop ends them.
func (e *env) processFleet(k int) (*manager.Manager, func(), error) { return e.shardedFleet(k, 1) }

// shardedFleet is processFleet with a manager spreading its tasks over
// shards shards of the queue.
func (e *env) shardedFleet(k, shards int) (*manager.Manager, func(), error) {
	m, _, stop, err := e.fleet(k, shards, 0)
	return m, stop, err
}

// fleet starts k worker processes of concurrency slots each (0: their
// GOMAXPROCS) on a fresh queue, and a manager spreading its tasks over
// shards shards of it; it returns the queue's name too.
func (e *env) fleet(k, shards, concurrency int) (*manager.Manager, string, func(), error) {
	queue := "bench-" + id.New()[:8]
	var cmds []*exec.Cmd
	stop := func() { e.stopWorkers(cmds) }
	for range k {
		cmd, err := e.startWorker(queue, max(1, e.slots/k), concurrency)
		if err != nil {
			stop()
			return nil, "", nil, err
		}
		cmds = append(cmds, cmd)
	}
	m, err := manager.New(e.rdb, manager.Options{Queue: queue, Shards: shards})
	if err != nil {
		stop()
		return nil, "", nil, err
	}
	return m, queue, func() { m.Close(); stop() }, nil
}

// startWorker starts a worker process of queue with procs GOMAXPROCS and
// concurrency slots (0: its GOMAXPROCS), env added to its environment, and
// returns once it said its id.
func (e *env) startWorker(queue string, procs, concurrency int, env ...string) (*exec.Cmd, error) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(os.Environ(), workerEnv+"="+queue, benchURLEnv+"="+e.url, "GOMAXPROCS="+strconv.Itoa(procs),
		workerConcurrencyEnv+"="+strconv.Itoa(concurrency)), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	e.children.add(cmd.Process.Pid)
	line := make([]byte, 64)
	if n, err := out.Read(line); err != nil || !strings.HasPrefix(string(line[:n]), "worker ") {
		e.stopWorkers([]*exec.Cmd{cmd})
		return nil, fmt.Errorf("worker process did not start: %q %v", line[:n], err)
	}
	return cmd, nil
}

// stopWorkers stops worker processes with SIGTERM and waits for them.
func (e *env) stopWorkers(cmds []*exec.Cmd) {
	for _, c := range cmds {
		e.children.remove(c.Process.Pid)
		c.Process.Signal(syscall.SIGTERM)
		c.Wait()
	}
}

// netBytes returns the bytes Redis has received and sent in all.
func (e *env) netBytes() int64 {
	info := e.rdb.InfoMap(context.Background(), "stats")
	in, _ := strconv.ParseInt(info.Item("Stats", "total_net_input_bytes"), 10, 64)
	out, _ := strconv.ParseInt(info.Item("Stats", "total_net_output_bytes"), 10, 64)
	return in + out
}

// peakHeap samples the process's heap every 20 ms until stop, and returns
// the largest it saw.
func peakHeap() (stop func() uint64) {
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > peak.Load() {
				peak.Store(ms.HeapAlloc)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() uint64 { close(done); wg.Wait(); return peak.Load() }
}

// modSquareSum is the sum of modSquare over 0 … n-1.
func modSquareSum(n int) int {
	s := 0
	for x := range n {
		s += (x % 1000) * (x % 1000)
	}
	return s
}

// sumResults reads every result of b and returns their sum and count.
func sumResults(b *manager.Batch[int]) (sum, count int, err error) {
	for r := range b.Results() {
		if r.Err != nil {
			return 0, 0, r.Err
		}
		sum += r.Value
		count++
	}
	return sum, count, nil
}

// measureHeap is measure, also returning the process's peak heap during f.
func (e *env) measureHeap(scenario, contender string, n int, f func() error) (row, uint64, error) {
	runtime.GC()
	heap := peakHeap()
	r, err := e.measure(scenario, contender, n, f)
	return r, heap(), err
}

// reduce: the sum over 10 million integers of (x mod 1,000)², with MapReduce
// (the fold on the workers) against Map and a fold in the manager, in the
// same run, with two worker processes; with the bytes that crossed Redis and
// the manager's peak heap.
func reduce(e *env) ([]row, error) {
	n := e.pick(10_000_000, 1_000_000)
	m, stop, err := e.processFleet(2)
	if err != nil {
		return nil, err
	}
	defer stop()
	ctx := context.Background()
	want := modSquareSum(n)
	// Warm up: the manager learns the function's cost, connections open.
	if _, err := manager.MapReduce(ctx, m, modSquare, plus, ints(100_000)); err != nil {
		return nil, err
	}
	xs := ints(n)
	var rows []row
	for _, c := range []struct {
		name string
		run  func() (int, error)
	}{
		{"redmap MapReduce", func() (int, error) { return manager.MapReduce(ctx, m, modSquare, plus, xs) }},
		{"redmap Map + local fold", func() (int, error) {
			ys, err := manager.Map(ctx, m, modSquare, xs)
			s := 0
			for _, y := range ys {
				s += y
			}
			return s, err
		}},
	} {
		bytes0, results0 := e.netBytes(), m.Stats().ResultBytes
		r, peak, err := e.measureHeap("reduce", c.name, n, func() error {
			got, err := c.run()
			if err == nil && got != want {
				err = fmt.Errorf("sum %d, want %d", got, want)
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		r.bytes = e.netBytes() - bytes0
		r.note = fmt.Sprintf("%.1f MB crossed Redis (in and out), of which results read by the manager %.3f MB; manager peak heap %d MiB (the input: %d MiB)",
			float64(r.bytes)/1e6, float64(m.Stats().ResultBytes-results0)/1e6, peak>>20, 8*n>>20)
		rows = append(rows, r)
	}
	return rows, nil
}

// seq: SubmitSeq over a generated sequence far larger than memory, results
// read as they come, with two worker processes: the manager's peak heap
// stays bounded whatever the length.
func seq(e *env) ([]row, error) {
	n := e.pick(100_000_000, 5_000_000)
	m, stop, err := e.processFleet(2)
	if err != nil {
		return nil, err
	}
	defer stop()
	ctx := context.Background()
	gen := func(yield func(int) bool) {
		for x := range n {
			if !yield(x) {
				return
			}
		}
	}
	want := modSquareSum(n)
	r, peak, err := e.measureHeap("seq", "redmap SubmitSeq", n, func() error {
		b, err := manager.SubmitSeq(ctx, m, modSquare, iter.Seq[int](gen))
		if err != nil {
			return err
		}
		got, k, err := sumResults(b)
		if err == nil && (k != n || got != want) {
			err = fmt.Errorf("%d results summing to %d, want %d summing to %d", k, got, n, want)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r.note = fmt.Sprintf("%d elements streamed in and out; manager peak heap %d MiB (Go runtime total %d MiB)", n, peak>>20, ms.Sys>>20)
	return []row{r}, nil
}

// consume: 10 million elements consumed through Results, from Submit (the
// batch keeps every output for Wait) and from SubmitSeq over the same slice
// (it keeps none it has yielded), with two worker processes: the manager's
// peak heap of each.
func consume(e *env) ([]row, error) {
	n := e.pick(10_000_000, 1_000_000)
	m, stop, err := e.processFleet(2)
	if err != nil {
		return nil, err
	}
	defer stop()
	ctx := context.Background()
	xs := ints(n)
	want := modSquareSum(n)
	var rows []row
	for _, c := range []struct {
		name   string
		submit func() (*manager.Batch[int], error)
	}{
		{"redmap Submit + Results", func() (*manager.Batch[int], error) { return manager.Submit(ctx, m, modSquare, xs) }},
		{"redmap SubmitSeq + Results", func() (*manager.Batch[int], error) {
			return manager.SubmitSeq(ctx, m, modSquare, slices.Values(xs))
		}},
	} {
		r, peak, err := e.measureHeap("consume", c.name, n, func() error {
			b, err := c.submit()
			if err != nil {
				return err
			}
			got, _, err := sumResults(b)
			if err == nil && got != want {
				err = fmt.Errorf("sum %d, want %d", got, want)
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		r.note = fmt.Sprintf("manager peak heap %d MiB (the input slice: %d MiB)", peak>>20, 8*n>>20)
		rows = append(rows, r)
	}
	return rows, nil
}
