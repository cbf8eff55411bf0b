package manager

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

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
		q := newTestQueue(t, 1)
		q.writeEntries(func(tid string) []byte { return fuzzEntry(tid, tail) })
		m := q.manager(t, Options{})
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

// touchy is an output whose msgpack decoder panics on a value of 13: a
// user's type, decoded on the manager.
type touchy struct{ N int }

func (t touchy) EncodeMsgpack(e *msgpack.Encoder) error { return e.EncodeInt(int64(t.N)) }

func (t *touchy) DecodeMsgpack(d *msgpack.Decoder) error {
	n, err := d.DecodeInt()
	if n == 13 {
		panic("thirteen")
	}
	t.N = n
	return err
}

var touchyFunc = redmap.Func("touchy", func(_ context.Context, x int) (touchy, error) { return touchy{x}, nil })

// A panic while the manager reads a result (here a user's decoder: issue
// 35 asks that any panic left on the path fail that task alone) fails that
// result's elements with ErrDecode; the other tasks complete, and the
// manager goes on to the next batch.
func TestResultPanicFailsItsTask(t *testing.T) {
	q := newTestQueue(t, 1)
	q.play(func(task *codec.Task) ([]byte, error) {
		xs := make([]int, task.Count)
		if err := codec.DecodeElements(task.Input, xs); err != nil {
			return nil, err
		}
		e := codec.NewOutputEncoder(len(xs))
		for _, x := range xs {
			if err := e.Add(touchy{x}); err != nil {
				return nil, err
			}
		}
		return e.Bytes(), nil
	}, 0)
	m := q.manager(t, Options{})
	ctx := unitCtx(t)
	ys, err := Map(ctx, m, touchyFunc, []int{1, 2, 13, 14, 5, 6}, ChunkSize(2))
	var be *redmap.BatchError
	if !errors.As(err, &be) || len(be.Failed) != 2 {
		t.Fatalf("err %v: want a *BatchError of the 2 elements of 13's task", err)
	}
	for _, te := range be.Failed {
		if (te.Index != 2 && te.Index != 3) || !errors.Is(te, redmap.ErrDecode) {
			t.Fatalf("element %d failed with %v; want elements 2 and 3 with ErrDecode", te.Index, te.Err)
		}
	}
	for _, i := range []int{0, 1, 4, 5} {
		if want := []int{1, 2, 13, 14, 5, 6}[i]; ys[i].N != want {
			t.Fatalf("element %d: %v, want %d", i, ys[i], want)
		}
	}
	if ys, err := Map(ctx, m, touchyFunc, []int{7}); err != nil || ys[0].N != 7 {
		t.Fatalf("the next batch: %v, %v", ys, err)
	}
}
