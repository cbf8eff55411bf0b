package manager

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/codec"
)

// The manager's whole path for a result (the collector's decode, the batch's
// decode of its outputs or partial, the record of each element) on any bytes
// a worker, a broken build or anyone with access to Redis could push: it
// never panics, and every element of the batch ends once, with a value or a
// typed error, without waiting for a timeout.

type fuzzOut struct {
	N    int8
	Tags map[string]uint16
	Next *fuzzOut
}

var (
	fuzzStructs = redmap.Func("fuzz-structs", func(_ context.Context, x int) (fuzzOut, error) { return fuzzOut{N: int8(x)}, nil })
	fuzzSum     = redmap.Reduce("fuzz-sum", func(_ context.Context, a, b int) (int, error) { return a + b, nil })
)

// fuzzEntry is a result entry of task tid: the envelope's head, then tail
// (the outputs and the failures, as a worker writes them).
func fuzzEntry(tid string, tail []byte) []byte {
	head, _ := codec.EncodeResult(&codec.Result{Task: tid})
	return append(head[:len(head)-2:len(head)-2], tail...) // less the empty outputs and failures
}

// tailOf is the part of r's encoding after its head, a seed.
func tailOf(r *codec.Result) []byte {
	r.Task = "x"
	b, _ := codec.EncodeResult(r)
	head, _ := codec.EncodeResult(&codec.Result{Task: "x"})
	return b[len(head)-2:]
}

func FuzzResultPath(f *testing.F) {
	ints, _ := codec.EncodeElements([]int{1, 4, 9}, 0)
	one, _ := codec.EncodeElements([]int{14}, 0)
	docs, _ := codec.EncodeElements([]fuzzOut{{N: 1}, {Tags: map[string]uint16{"a": 1}}, {Next: &fuzzOut{}}}, 0)
	for _, r := range []*codec.Result{
		{Values: ints},
		{Values: one},
		{Values: docs},
		{Values: ints, Fails: []codec.Failure{{Index: 1, Kind: codec.KindPanic, Msg: "boom", Stack: "f()"}}},
		{Values: ints, Fails: []codec.Failure{{Index: 0, Through: 2, Kind: codec.KindDecode, Msg: "bad"}}},
		{Fails: []codec.Failure{{Index: -1, Kind: codec.KindUnknownFunc, Msg: "no"}}},
		{Values: []byte{0x93, 0xcd, 0x01, 0x2c, 0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xc0}},
		{Values: []byte{0xdd, 0xff, 0xff, 0xff, 0xff}},
	} {
		for kind := range uint8(3) {
			f.Add(tailOf(r), kind)
		}
	}
	f.Add([]byte{0xc4, 0x01, 0x90, 0xdd, 0x00, 0x10, 0x00, 0x00, 0x94}, uint8(0))
	f.Fuzz(func(t *testing.T, tail []byte, kind uint8) {
		q := newFakeQueue(1)
		q.shards[0].entry = func(tid string) []byte { return fuzzEntry(tid, tail) }
		q.shards[0].setRun(squares)
		m := q.manager(t, Options{}, hooks{})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		xs := []int{1, 2, 3}
		var err error
		switch kind % 3 {
		case 0:
			var ys []int
			ys, err = Map(ctx, m, square, xs, ChunkSize(3))
			if len(ys) != 3 {
				t.Fatalf("%d outputs for 3 inputs", len(ys))
			}
		case 1:
			var ys []fuzzOut
			ys, err = Map(ctx, m, fuzzStructs, xs, ChunkSize(3))
			if len(ys) != 3 {
				t.Fatalf("%d outputs for 3 inputs", len(ys))
			}
		default:
			_, err = MapReduce(ctx, m, square, fuzzSum, xs, ChunkSize(3))
		}
		if ctx.Err() != nil {
			t.Fatalf("the batch waited for its deadline: %v", err)
		}
		if err == nil {
			return
		}
		var be *redmap.BatchError
		if !errors.As(err, &be) {
			t.Fatalf("%v: want a *BatchError", err)
		}
		seen := map[int]bool{}
		for _, te := range be.Failed {
			if te.Index < 0 || te.Index >= len(xs) || seen[te.Index] {
				t.Fatalf("failed element %d out of range or twice: %v", te.Index, err)
			}
			seen[te.Index] = true
			if te.Err == nil {
				t.Fatalf("element %d failed with no cause", te.Index)
			}
		}
	})
}
