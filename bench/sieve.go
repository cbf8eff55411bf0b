package main

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strconv"
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
	n := int64(e.pick(2_000_000_000, 200_000_000))
	segs := segmentsBelow(n)
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
		local = pool(segs, e.slots)
		return nil
	})
	if err != nil {
		return nil, err
	}
	// The same pool in a process of its own, started before the clock:
	// a fresh process has a small heap, as a worker process has, and its
	// garbage collector runs as often.
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), poolEnv+"="+strconv.FormatInt(n, 10), "GOMAXPROCS="+strconv.Itoa(e.slots))
	cmd.Stderr = os.Stderr
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer cmd.Wait()
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "ready" {
		cmd.Process.Kill()
		return nil, fmt.Errorf("pool process did not start")
	}
	e.children.add(cmd.Process.Pid)
	var own int
	o, err := e.measure("compute", "local goroutine pool, own process", segments, func() error {
		fmt.Fprintln(in, "go")
		if !lines.Scan() {
			return fmt.Errorf("pool process: no count")
		}
		own, err = strconv.Atoi(lines.Text())
		return err
	})
	e.children.remove(cmd.Process.Pid)
	if err != nil {
		cmd.Process.Kill()
		return nil, err
	}
	if viaRedmap != local || own != local {
		return nil, fmt.Errorf("redmap counted %d primes, the local pool %d, in its own process %d", viaRedmap, local, own)
	}
	r.note = fmt.Sprintf("%d primes below %d, in %d segments", local, n, segments)
	return []row{r, l, o}, nil
}

// poolEnv, when set in a bench process's environment, makes it the compute
// scenario's pool process: it prints "ready", and on a line from stdin counts
// the primes below the value in the same segments, prints the count and
// exits.
const poolEnv = "REDMAP_BENCH_POOL"

// runPoolProcess is the pool process, if this is one; it reports whether it
// was.
func runPoolProcess() bool {
	v := os.Getenv(poolEnv)
	if v == "" {
		return false
	}
	n, _ := strconv.ParseInt(v, 10, 64)
	fmt.Println("ready")
	bufio.NewScanner(os.Stdin).Scan()
	fmt.Println(pool(segmentsBelow(n), runtime.GOMAXPROCS(0)))
	return true
}

const segments = 200

// segmentsBelow cuts [0, n) into segments.
func segmentsBelow(n int64) []Segment {
	segs := make([]Segment, segments)
	for i := range segs {
		segs[i] = Segment{Lo: n * int64(i) / segments, Hi: n * int64(i+1) / segments}
	}
	return segs
}

// pool counts the primes of segs on k goroutines.
func pool(segs []Segment, k int) int {
	work := make(chan Segment)
	var mu sync.Mutex
	var wg sync.WaitGroup
	total := 0
	for range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range work {
				c := countPrimes(s)
				mu.Lock()
				total += c
				mu.Unlock()
			}
		}()
	}
	for _, s := range segs {
		work <- s
	}
	close(work)
	wg.Wait()
	return total
}
