package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redmap/redmap/connect"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/id"
)

// The baselines are minimal hand-written Redis list queues, each with results
// back to the caller in input order and no fencing, leases or recovery: the
// bar a framework's overhead is measured against.
type mode int

const (
	perTask mode = iota // one call per task at every step
	batched             // single elements, pushed in pipelines, popped many at once
	chunked             // binary chunks of 1,000 elements, each framed with its length
	fixed               // chunks of 1,000 raw 8-byte integers, no framing (fixed.go)
)

func (m mode) String() string {
	return [...]string{"per-task baseline", "batched baseline", "framed chunked baseline", "chunked baseline"}[m]
}

const chunkLen = 1000

// baselineFleet is the workers of one baseline: e.slots goroutines popping
// from its input list, in a worker process of their own (as redmap's run)
// or, with -inprocess or a function that has no name, in this process.
type baselineFleet struct {
	e       *env
	m       mode
	in, out string
	stop    func()
}

// baselineEnv, when set in a bench process's environment, makes it a baseline
// worker process: "<mode>/<work>/<in>/<out>/<constant key>", on the Redis of
// benchURLEnv.
const baselineEnv = "REDMAP_BENCH_BASELINE"

// works are the baselines' work functions by name, for worker processes; key
// names the constant of the lookup works.
func works(c redis.UniversalClient, name, key string) (func([]byte) []byte, bool) {
	switch name {
	case "square":
		return squareBytes, true
	case "spin":
		return spinBytes, true
	case "mirror":
		return reversed, true
	case "echo":
		return func(b []byte) []byte { return b }, true
	case "nap": // the scale scenario's: sleeps its input in µs
		return func(b []byte) []byte {
			time.Sleep(time.Duration(binary.LittleEndian.Uint64(b)) * time.Microsecond)
			return b
		}, true
	case "lookup", "lookup-each": // the constant read once, or for every task
		var once sync.Once
		var cached []byte
		return func(b []byte) []byte {
			var t []byte
			if name == "lookup-each" {
				t, _ = c.Get(context.Background(), key).Bytes()
			} else {
				once.Do(func() { cached, _ = c.Get(context.Background(), key).Bytes() })
				t = cached
			}
			x := binary.LittleEndian.Uint64(b)
			return []byte{t[int(x)%len(t)]}
		}, true
	}
	return nil, false
}

// newBaselineFleet returns a baseline in mode m on lists of its own, with
// no workers yet.
func newBaselineFleet(e *env, m mode) *baselineFleet {
	tag := id.New()[:8]
	return &baselineFleet{e: e, m: m, in: "bq:" + tag + ":in", out: "bq:" + tag + ":out"}
}

// startBaseline starts the workers of a baseline in mode m applying the work
// function named work (see works; key is the lookup's constant).
func (e *env) startBaseline(m mode, work, key string) (*baselineFleet, error) {
	if e.inproc {
		f := newBaselineFleet(e, m)
		fn, _ := works(e.rdb, work, key)
		f.stop = f.goroutines(fn)
		return f, nil
	}
	return e.startBaselines(m, work, key, 1, e.slots)
}

// startBaselines starts a baseline of processes worker processes of slots
// goroutines each, in mode m applying the work function named work, on one
// input list.
func (e *env) startBaselines(m mode, work, key string, processes, slots int) (*baselineFleet, error) {
	f := newBaselineFleet(e, m)
	var cmds []*exec.Cmd
	f.stop = func() {
		for _, cmd := range cmds {
			e.children.remove(cmd.Process.Pid)
			cmd.Process.Kill()
			cmd.Wait()
		}
		e.rdb.Del(context.Background(), f.in)
		e.rdb.Del(context.Background(), f.out) // one key a call: on a Cluster they are in two slots
	}
	for range processes {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), benchURLEnv+"="+e.url, "GOMAXPROCS="+strconv.Itoa(slots),
			baselineEnv+"="+strings.Join([]string{strconv.Itoa(int(m)), work, f.in, f.out, key}, "/"))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			f.stop()
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			f.stop()
			return nil, err
		}
		line := make([]byte, 16)
		if n, err := out.Read(line); err != nil || string(line[:n]) != "ready\n" {
			cmd.Process.Kill()
			cmd.Wait()
			f.stop()
			return nil, fmt.Errorf("baseline worker process did not start: %q %v", line[:n], err)
		}
		e.children.add(cmd.Process.Pid)
		cmds = append(cmds, cmd)
	}
	return f, nil
}

// goroutines starts e.slots worker goroutines applying work in this process,
// and returns what stops them.
func (f *baselineFleet) goroutines(work func([]byte) []byte) func() {
	ctx := context.Background()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range f.e.slots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			baselineWorker(ctx, f.e.rdb, f.m, f.in, f.out, work, stop)
		}()
	}
	// Stopping the workers is outside the measured work: they are woken by
	// an empty message each, not left to time out.
	return func() {
		close(stop)
		for range f.e.slots {
			f.e.rdb.LPush(ctx, f.in, "")
		}
		wg.Wait()
		f.e.rdb.Del(ctx, f.in)
		f.e.rdb.Del(ctx, f.out) // one key a call: on a Cluster they are in two slots
	}
}

// runBaselineProcess serves one baseline until killed, if this process was
// started as a baseline worker; it reports whether it was.
func runBaselineProcess() bool {
	spec := strings.Split(os.Getenv(baselineEnv), "/")
	if len(spec) != 5 {
		return false
	}
	m, _ := strconv.Atoi(spec[0])
	c, err := connect.URL(os.Getenv(benchURLEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench baseline worker:", err)
		os.Exit(1)
	}
	work, ok := works(c, spec[1], spec[4])
	if !ok || c.Ping(context.Background()).Err() != nil {
		fmt.Fprintln(os.Stderr, "bench baseline worker: unknown work or no Redis:", spec)
		os.Exit(1)
	}
	fmt.Println("ready")
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			baselineWorker(context.Background(), c, mode(m), spec[2], spec[3], work, nil)
		}()
	}
	wg.Wait()
	return true
}

// run pushes inputs through the fleet's queue and returns the outputs in
// input order.
func (f *baselineFleet) run(inputs [][]byte) ([][]byte, error) {
	ctx := context.Background()
	errc := make(chan error, 1)
	go func() { errc <- produce(ctx, f.e.rdb, f.m, f.in, inputs) }()
	results := make([][]byte, len(inputs))
	got := 0
	for got < len(inputs) {
		msgs, err := popMany(ctx, f.e.rdb, f.m, f.out)
		if err != nil {
			return nil, err
		}
		for _, msg := range msgs {
			for _, el := range unpack(f.m, msg) {
				results[el.idx] = el.data
				got++
			}
		}
	}
	return results, <-errc
}

// baseline runs inputs through a list queue in mode m with worker goroutines
// in this process applying work (the managers scenario, whose redmap worker
// runs in this process too).
func baseline(e *env, m mode, inputs [][]byte, work func([]byte) []byte) ([][]byte, error) {
	f := newBaselineFleet(e, m)
	stop := f.goroutines(work)
	defer stop()
	return f.run(inputs)
}

type element struct {
	idx  int
	data []byte
}

// produce pushes the inputs: one LPUSH per element (perTask), or 1,000
// elements or one chunk per command, ten commands per pipeline.
func produce(ctx context.Context, rdb redis.UniversalClient, m mode, in string, inputs [][]byte) error {
	if m == perTask {
		for i, x := range inputs {
			if err := rdb.LPush(ctx, in, pack1(i, x)).Err(); err != nil {
				return err
			}
		}
		return nil
	}
	var cmds [][]any
	for start := 0; start < len(inputs); start += chunkLen {
		end := min(start+chunkLen, len(inputs))
		if m == chunked {
			cmds = append(cmds, []any{packChunk(start, inputs[start:end])})
			continue
		}
		args := make([]any, 0, end-start)
		for i := start; i < end; i++ {
			args = append(args, pack1(i, inputs[i]))
		}
		cmds = append(cmds, args)
	}
	for start := 0; start < len(cmds); start += 10 {
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, args := range cmds[start:min(start+10, len(cmds))] {
				p.LPush(ctx, in, args...)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// baselineWorker pops messages from in, applies work and pushes the outputs
// to out, until stop is closed (never, if nil).
func baselineWorker(ctx context.Context, rdb redis.UniversalClient, m mode, in, out string, work func([]byte) []byte, stop <-chan struct{}) {
	if m == fixed {
		fixedWorker(ctx, rdb, in, out, fixedWork(work), stop)
		return
	}
	for {
		select {
		case <-stop:
			return
		default:
		}
		msgs, err := popMany(ctx, rdb, m, in)
		if err != nil || len(msgs) == 0 || msgs[0] == "" {
			continue
		}
		var replies []any
		for _, msg := range msgs {
			els := unpack(m, msg)
			for i := range els {
				els[i].data = work(els[i].data)
			}
			if m == chunked {
				replies = append(replies, packChunkOut(els))
				continue
			}
			for _, el := range els {
				replies = append(replies, pack1(el.idx, el.data))
			}
		}
		rdb.LPush(ctx, out, replies...)
	}
}

// popMany pops one message, blocking up to a second, or (batched) up to
// 1,000 at once.
func popMany(ctx context.Context, rdb redis.UniversalClient, m mode, key string) ([]string, error) {
	if m == batched {
		msgs, err := rdb.RPopCount(ctx, key, chunkLen).Result()
		if err == nil && len(msgs) > 0 {
			return msgs, nil
		}
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
	}
	kv, err := rdb.BRPop(ctx, time.Second, key).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return kv[1:], nil
}

// pack1 frames one element: its index, then its bytes.
func pack1(i int, x []byte) []byte {
	b := make([]byte, 4+len(x))
	binary.LittleEndian.PutUint32(b, uint32(i))
	copy(b[4:], x)
	return b
}

// packChunk frames consecutive elements from start: the first index, then
// each element's length and bytes.
func packChunk(start int, xs [][]byte) []byte {
	size := 4
	for _, x := range xs {
		size += 4 + len(x)
	}
	b := make([]byte, 4, size)
	binary.LittleEndian.PutUint32(b, uint32(start))
	for _, x := range xs {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(x)))
		b = append(b, x...)
	}
	return b
}

func packChunkOut(els []element) []byte {
	xs := make([][]byte, len(els))
	for i, el := range els {
		xs[i] = el.data
	}
	return packChunk(els[0].idx, xs)
}

func unpack(m mode, msg string) []element {
	b := []byte(msg)
	if m != chunked {
		return []element{{idx: int(binary.LittleEndian.Uint32(b)), data: b[4:]}}
	}
	start := int(binary.LittleEndian.Uint32(b))
	var els []element
	for p := 4; p < len(b); {
		n := int(binary.LittleEndian.Uint32(b[p:]))
		els = append(els, element{idx: start + len(els), data: b[p+4 : p+4+n]})
		p += 4 + n
	}
	return els
}

// latencyBaseline sends n single elements one at a time through a per-task
// queue served by a baseline fleet, and returns each round trip's time.
func latencyBaseline(e *env, f *baselineFleet, n int) ([]time.Duration, error) {
	ctx := context.Background()
	lat := make([]time.Duration, n)
	for i := range n {
		start := time.Now()
		if err := e.rdb.LPush(ctx, f.in, pack1(i, []byte{byte(i)})).Err(); err != nil {
			return nil, err
		}
		if _, err := e.rdb.BRPop(ctx, 5*time.Second, f.out).Result(); err != nil {
			return nil, fmt.Errorf("round trip %d: %w", i, err)
		}
		lat[i] = time.Since(start)
	}
	return lat, nil
}
