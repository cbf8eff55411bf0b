package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/manager"
)

// sleepy is the fair-share scenario's function: x squared after a
// millisecond, a task whose length is not CPU.
var sleepy = redmap.Func("sleepy", func(ctx context.Context, x int) (int, error) {
	select {
	case <-time.After(time.Millisecond):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return x * x, nil
})

// fanout: 2,000 Maps of 10 tiny elements, 16 at a time, as many services
// calling one fleet would (p50 and p99: of one call); against a per-task list queue, where each call
// pushes its 10 elements (one LPUSH) and a dispatcher routes results back by
// index (one reply list per client process, read by one BRPOP loop).
func fanout(e *env) ([]row, error) {
	const size, k = 10, 16
	calls := e.pick(2000, 400)
	m, stop, err := e.redmapFleet(square)
	if err != nil {
		return nil, err
	}
	defer stop()
	ctx := context.Background()
	for i := range 50 { // warm up connections, learn the cost
		manager.Map(ctx, m, square, ints(size+i%2))
	}
	lat := newLatencies(calls)
	r, err := e.measure("fanout", "redmap", calls*size, func() error {
		var next atomic.Int64
		return parallel(k, func(int) error {
			for next.Add(1) <= int64(calls) {
				start := time.Now()
				ys, err := manager.Map(ctx, m, square, ints(size))
				if err != nil || ys[size-1] != (size-1)*(size-1) {
					return fmt.Errorf("map: %v %v", ys, err)
				}
				lat.add(time.Since(start))
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	r.p50, r.p99 = lat.percentiles()
	f, err := e.startBaseline(perTask, "square", "")
	if err != nil {
		return nil, err
	}
	defer f.stop()
	blat := newLatencies(calls)
	b, err := e.measure("fanout", "per-task baseline", calls*size, func() error {
		return fanoutBaseline(e, f, calls, size, k, blat)
	})
	if err != nil {
		return nil, err
	}
	b.p50, b.p99 = blat.percentiles()
	return []row{r, b}, nil
}

// latencies collects the durations of calls made at once.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func newLatencies(n int) *latencies { return &latencies{d: make([]time.Duration, 0, n)} }

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

func (l *latencies) percentiles() (p50, p99 time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return percentiles(l.d)
}

// fanoutBaseline runs calls calls of size elements, k at a time, through
// a per-task list queue.
func fanoutBaseline(e *env, f *baselineFleet, calls, size, k int, lat *latencies) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	waiting := map[int]chan []byte{} // element index → its caller
	go func() {                      // the dispatcher
		for ctx.Err() == nil {
			msgs, err := popMany(ctx, e.rdb, perTask, f.out)
			if err != nil {
				return
			}
			for _, msg := range msgs {
				for _, el := range unpack(perTask, msg) {
					mu.Lock()
					ch := waiting[el.idx]
					delete(waiting, el.idx)
					mu.Unlock()
					if ch != nil {
						ch <- el.data
					}
				}
			}
		}
	}()
	var next, idx atomic.Int64
	return parallel(k, func(int) error {
		reply := make(chan []byte, size)
		for next.Add(1) <= int64(calls) {
			start := time.Now()
			msgs := make([]any, size)
			base := int(idx.Add(int64(size))) - size
			mu.Lock()
			for i := range size {
				waiting[base+i] = reply
				msgs[i] = pack1(base+i, binary.LittleEndian.AppendUint64(nil, uint64(i)))
			}
			mu.Unlock()
			if err := e.rdb.LPush(ctx, f.in, msgs...).Err(); err != nil {
				return err
			}
			for range size {
				select {
				case y := <-reply:
					if len(y) != 8 {
						return fmt.Errorf("a result of %d bytes", len(y))
					}
				case <-time.After(10 * time.Second):
					return fmt.Errorf("no result within 10 s")
				}
			}
			lat.add(time.Since(start))
		}
		return nil
	})
}

// fairshare: the set-up of issue 23. Two worker processes of concurrency
// 2; manager A submits a large batch of 1 ms elements; manager B then runs
// ten sequential Maps of 8 such elements at the same priority. Reported: B's
// Maps (p50 is the median, p99 the longest) beside A, and A's throughput
// over its whole batch; against A alone, in the same run.
func fairshare(e *env) ([]row, error) {
	n := e.pick(100_000, 20_000)
	m, queue, stop, err := e.fleet(2, 1, 2)
	if err != nil {
		return nil, err
	}
	defer stop()
	ctx := context.Background()
	bm, err := manager.New(e.rdb, manager.Options{Queue: queue})
	if err != nil {
		return nil, err
	}
	defer bm.Close()
	manager.Map(ctx, m, sleepy, ints(200)) // learn the cost
	var lat []time.Duration
	a, err := e.measure("fairshare", "A beside B's Maps", n, func() error {
		batch, err := manager.Submit(ctx, m, sleepy, ints(n))
		if err != nil {
			return err
		}
		for batch.Progress().Done == 0 {
			time.Sleep(time.Millisecond)
		}
		for range 10 {
			start := time.Now()
			ys, err := manager.Map(ctx, bm, sleepy, ints(8))
			if err != nil || ys[7] != 49 {
				return fmt.Errorf("the small map: %v %v", ys, err)
			}
			lat = append(lat, time.Since(start))
		}
		_, err = batch.Wait(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	s := slices.Clone(lat)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	a.p50, a.p99 = s[len(s)/2], s[len(s)-1]
	alone, err := e.measure("fairshare", "A alone", n, func() error {
		_, err := manager.Map(ctx, m, sleepy, ints(n))
		return err
	})
	if err != nil {
		return nil, err
	}
	return []row{a, alone}, nil
}
