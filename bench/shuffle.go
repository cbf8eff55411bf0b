package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/manager"
)

// The shuffle scenario's functions: element b stands for the values
// b*shuffleBlock to (b+1)*shuffleBlock-1, and each value x counts once for
// the key x mod the key space (shuffleKeys in the element).
const shuffleBlock = 1000

// block is an element of the shuffle scenario.
type block struct {
	B    int `msgpack:"b"`
	Keys int `msgpack:"k"`
}

var (
	// keyCount emits (x mod Keys, 1) for each value of the block.
	keyCount = redmap.Emit("keycount", func(_ context.Context, b block, emit func(int, int64)) error {
		for x := b.B * shuffleBlock; x < (b.B+1)*shuffleBlock; x++ {
			emit(x%b.Keys, 1)
		}
		return nil
	})
	// keyText emits (x mod Keys, wide(x mod Keys)) for each value of the
	// block: a large output, for the manager's memory bound.
	keyText = redmap.Emit("keytext", func(_ context.Context, b block, emit func(int, string)) error {
		for x := b.B * shuffleBlock; x < (b.B+1)*shuffleBlock; x++ {
			emit(x%b.Keys, wide(x%b.Keys))
		}
		return nil
	})
	least = redmap.Reduce("least", func(_ context.Context, a, b string) (string, error) { return min(a, b), nil })
	add   = redmap.Reduce("add", func(_ context.Context, a, b int64) (int64, error) { return a + b, nil })
	// blockCounts is the fold's function: the block's counts as a map.
	blockCounts = redmap.Func("blockcounts", func(_ context.Context, b block) (map[int]int64, error) {
		m := make(map[int]int64, shuffleBlock)
		for x := b.B * shuffleBlock; x < (b.B+1)*shuffleBlock; x++ {
			m[x%b.Keys]++
		}
		return m, nil
	})
	mergeCounts = redmap.Reduce("mergecounts", func(_ context.Context, a, b map[int]int64) (map[int]int64, error) {
		if len(a) < len(b) {
			a, b = b, a
		}
		for k, v := range b {
			a[k] += v
		}
		return a, nil
	})
)

// wide is a 200-byte text of key k.
func wide(k int) string {
	s := strconv.Itoa(k) + ":"
	return strings.Repeat(s, 200/len(s)+1)[:200]
}

// shuffle: count n values by key (x mod K) for key spaces K of 10^3, 10^5
// and 10^7, three ways in the same run, with two worker processes: a map/
// reduce by key (ReduceByKeySeq, the shuffle on the workers), a fold of
// maps (MapReduce with a map-valued reducer: the manager holds and merges
// every key), and the plain loop in one goroutine of this process.
func shuffle(e *env) ([]row, error) {
	n := e.pick(10_000_000, 1_000_000)
	m, stop, err := e.processFleet(2)
	if err != nil {
		return nil, err
	}
	defer stop()
	ctx := context.Background()
	var rows []row
	for _, k := range []int{1_000, 100_000, 10_000_000} {
		blocks := make([]block, n/shuffleBlock)
		for i := range blocks {
			blocks[i] = block{B: i, Keys: k}
		}
		// check verifies a count: every key of the space that some value
		// hits holds the number of values that hit it.
		want := func(key int) int64 {
			if key >= min(k, n) {
				return 0
			}
			c := int64(n / k)
			if key < n%k {
				c++
			}
			return c
		}
		keys := min(k, n)
		for _, c := range []struct {
			name string
			run  func() (int, error)
		}{
			{"redmap ReduceByKeySeq", func() (int, error) {
				seq, errOf := manager.ReduceByKeySeq(ctx, m, keyCount, add, blocks, manager.Partitions(32))
				got := 0
				for key, v := range seq {
					if v != want(key) {
						return 0, fmt.Errorf("key %d counted %d, want %d", key, v, want(key))
					}
					got++
				}
				return got, errOf()
			}},
			{"redmap MapReduce, map-valued fold", func() (int, error) {
				counts, err := manager.MapReduce(ctx, m, blockCounts, mergeCounts, blocks)
				for key, v := range counts {
					if v != want(key) {
						return 0, fmt.Errorf("key %d counted %d, want %d", key, v, want(key))
					}
				}
				return len(counts), err
			}},
			{"sequential loop, one goroutine", func() (int, error) {
				counts := make(map[int]int64)
				for x := range n {
					counts[x%k]++
				}
				return len(counts), nil
			}},
		} {
			bytes0, out0 := e.netBytes(), m.Stats()
			r, peak, err := e.measureHeap("shuffle", fmt.Sprintf("%s, %d keys", c.name, k), n, func() error {
				got, err := c.run()
				if err == nil && got != keys {
					err = fmt.Errorf("%d keys, want %d", got, keys)
				}
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("%s, %d keys: %w", c.name, k, err)
			}
			r.bytes = e.netBytes() - bytes0
			st := m.Stats()
			r.note = fmt.Sprintf("%d values, %d keys; manager peak heap %.1f MiB; %.1f MB crossed Redis", n, keys, float64(peak)/(1<<20), float64(r.bytes)/1e6)
			if parts := st.PartialBytes - out0.PartialBytes; parts > 0 {
				r.note += fmt.Sprintf("; partials stored %.1f MiB, outputs %.1f MiB (%.0f× the manager's peak heap)",
					float64(parts)/(1<<20), float64(st.OutputBytes-out0.OutputBytes)/(1<<20), float64(st.OutputBytes-out0.OutputBytes)/float64(max(peak, 1)))
			}
			rows = append(rows, r)
		}
	}
	// The manager's memory bound: an output of 200-byte values for 10^6
	// keys (about 200 MB) through ReduceByKeySeq.
	k := e.pick(1_000_000, 100_000)
	blocks := make([]block, k/shuffleBlock)
	for i := range blocks {
		blocks[i] = block{B: i, Keys: k}
	}
	out0 := m.Stats()
	r, peak, err := e.measureHeap("shuffle", fmt.Sprintf("redmap ReduceByKeySeq, %d keys of 200-byte values", k), k, func() error {
		seq, errOf := manager.ReduceByKeySeq(ctx, m, keyText, least, blocks, manager.Partitions(32))
		got := 0
		for key, v := range seq {
			if v != wide(key) {
				return fmt.Errorf("key %d: %.20q…, want %.20q…", key, v, wide(key))
			}
			got++
		}
		if err := errOf(); err != nil {
			return err
		}
		if got != k {
			return fmt.Errorf("%d keys, want %d", got, k)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := m.Stats().OutputBytes - out0.OutputBytes
	r.note = fmt.Sprintf("outputs %.1f MiB through a manager of peak heap %.1f MiB (%.0f×)",
		float64(out)/(1<<20), float64(peak)/(1<<20), float64(out)/float64(max(peak, 1)))
	return append(rows, r), nil
}
