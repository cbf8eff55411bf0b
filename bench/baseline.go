package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/redmap/redmap/internal/id"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The baselines are minimal hand-written Redis list queues, each with results
// back to the caller in input order and no fencing, leases or recovery: the
// bar a framework's overhead is measured against.
type mode int

const (
	perTask mode = iota // one call per task at every step
	batched             // single elements, pushed in pipelines, popped many at once
	chunked             // binary chunks of 1,000 elements
)

func (m mode) String() string {
	return [...]string{"per-task baseline", "batched baseline", "chunked baseline"}[m]
}

const chunkLen = 1000

// baseline runs inputs through a list queue in mode m, with e.slots worker
// goroutines applying work, and returns the outputs in input order.
func baseline(e *env, m mode, inputs [][]byte, work func([]byte) []byte) ([][]byte, error) {
	ctx := context.Background()
	id := id.New()[:8]
	in, out := "bq:"+id+":in", "bq:"+id+":out"
	defer e.rdb.Del(ctx, in, out)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range e.slots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			baselineWorker(ctx, e.rdb, m, in, out, work, stop)
		}()
	}
	// Stopping the workers is outside the measured work: they are woken
	// by an empty message each, not left to time out.
	defer func() {
		close(stop)
		for range e.slots {
			e.rdb.LPush(ctx, in, "")
		}
		wg.Wait()
	}()

	errc := make(chan error, 1)
	go func() { errc <- produce(ctx, e.rdb, m, in, inputs) }()
	results := make([][]byte, len(inputs))
	got := 0
	for got < len(inputs) {
		msgs, err := popMany(ctx, e.rdb, m, out)
		if err != nil {
			return nil, err
		}
		for _, msg := range msgs {
			for _, el := range unpack(m, msg) {
				results[el.idx] = el.data
				got++
			}
		}
	}
	return results, <-errc
}

type element struct {
	idx  int
	data []byte
}

// produce pushes the inputs: one LPUSH per element (perTask), or 1,000
// elements or one chunk per command, ten commands per pipeline.
func produce(ctx context.Context, rdb *redis.Client, m mode, in string, inputs [][]byte) error {
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

func baselineWorker(ctx context.Context, rdb *redis.Client, m mode, in, out string, work func([]byte) []byte, stop <-chan struct{}) {
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
func popMany(ctx context.Context, rdb *redis.Client, m mode, key string) ([]string, error) {
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
// queue and returns each round trip's time.
func latencyBaseline(e *env, n int, work func([]byte) []byte) ([]time.Duration, error) {
	ctx := context.Background()
	id := id.New()[:8]
	in, out := "bq:"+id+":in", "bq:"+id+":out"
	defer e.rdb.Del(ctx, in, out)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		baselineWorker(ctx, e.rdb, perTask, in, out, work, stop)
	}()
	defer func() { close(stop); e.rdb.LPush(ctx, in, ""); wg.Wait() }()
	lat := make([]time.Duration, n)
	for i := range n {
		start := time.Now()
		if err := e.rdb.LPush(ctx, in, pack1(i, []byte{byte(i)})).Err(); err != nil {
			return nil, err
		}
		kv, err := e.rdb.BRPop(ctx, 5*time.Second, out).Result()
		if err != nil {
			return nil, fmt.Errorf("round trip %d: %w", i, err)
		}
		_ = kv
		lat[i] = time.Since(start)
	}
	return lat, nil
}
