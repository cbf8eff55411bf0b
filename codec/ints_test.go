package codec

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// intEdges are the values on either side of every width MessagePack has.
var intEdges = []int64{0, 1, 127, 128, 255, 256, 65535, 65536, math.MaxUint32, math.MaxUint32 + 1,
	math.MaxInt64, -1, -32, -33, -128, -129, -32768, -32769, math.MinInt32, math.MinInt32 - 1, math.MinInt64}

// TestIntsMatchMsgpack: the integer fast path writes the bytes msgpack's
// EncodeInt writes, and reads back what DecodeInt64 reads, for every width.
func TestIntsMatchMsgpack(t *testing.T) {
	vals := append([]int64(nil), intEdges...)
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		vals = append(vals, r.Int64()>>r.IntN(64))
		vals = append(vals, -(r.Int64() >> r.IntN(64)))
	}
	var want bytes.Buffer
	enc := msgpack.NewEncoder(&want)
	if err := enc.EncodeArrayLen(len(vals)); err != nil {
		t.Fatal(err)
	}
	for _, v := range vals {
		if err := enc.EncodeInt(v); err != nil {
			t.Fatal(err)
		}
	}
	got, err := EncodeElements(vals, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("fast path wrote %d bytes unlike msgpack's %d", len(got), want.Len())
	}
	back := make([]int64, len(vals))
	if err := DecodeElements(got, back); err != nil {
		t.Fatal(err)
	}
	for i := range vals {
		if back[i] != vals[i] {
			t.Fatalf("element %d: read %d, wrote %d", i, back[i], vals[i])
		}
	}
	// Array headers of every width.
	for _, n := range []int{0, 15, 16, 65535, 65536} {
		xs := make([]int, n)
		var w bytes.Buffer
		e := msgpack.NewEncoder(&w)
		_ = e.EncodeArrayLen(n)
		for range n {
			_ = e.EncodeInt(0)
		}
		if got, _ := EncodeElements(xs, 0); !bytes.Equal(got, w.Bytes()) {
			t.Fatalf("%d zeros: header differs from msgpack's", n)
		}
	}
}

// TestIntsReadOtherWriters: integers written in other widths than the
// smallest (as another MessagePack writer may, or a nil for a failed output)
// read as DecodeInt64 reads them; anything else, or a uint64 past MaxInt64
// (DecodeInt64 wraps it to a negative), is an error naming the element.
func TestIntsReadOtherWriters(t *testing.T) {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	_ = enc.EncodeArrayLen(6)
	_ = enc.EncodeInt64(5) // fixed 9 bytes
	_ = enc.EncodeUint16(7)
	_ = enc.EncodeInt8(-3)
	_ = enc.EncodeNil()
	_ = enc.EncodeUint64(math.MaxInt64)
	_ = enc.EncodeInt32(-70000)
	got := make([]int, 6)
	if err := DecodeElements(buf.Bytes(), got); err != nil {
		t.Fatal(err)
	}
	want := []int{5, 7, -3, 0, math.MaxInt64, -70000}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("element %d: %d, want %d (as DecodeInt64: %v)", i, got[i], want[i], want)
		}
	}

	strs, _ := EncodeElements([]any{1, "two", 3}, 0)
	var ee *ElementError
	if err := DecodeElements(strs, make([]int, 3)); !errors.As(err, &ee) || ee.Index != 1 {
		t.Fatalf("a string among ints: %v, want an ElementError at index 1", err)
	}
	ints, _ := EncodeElements([]int{1, 1 << 40}, 0)
	if err := DecodeElements(ints[:len(ints)-2], make([]int, 2)); !errors.As(err, &ee) || ee.Index != 1 {
		t.Fatalf("cut short: %v, want an ElementError at index 1", err)
	}
	for _, dst := range []any{make([]int, 2), make([]int64, 2)} {
		over := []byte{0x92, 0x01, 0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff} // [1, MaxUint64]
		var err error
		switch d := dst.(type) {
		case []int:
			err = DecodeElements(over, d)
		case []int64:
			err = DecodeElements(over, d)
		}
		if !errors.As(err, &ee) || ee.Index != 1 || !errors.Is(err, errNarrow) {
			t.Fatalf("MaxUint64 into %T: %v, want an out-of-range ElementError at index 1", dst, err)
		}
	}
	if err := DecodeElements(append(ints, 0), make([]int, 2)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a byte past the last element: %v, want ErrCorrupt", err)
	}
}

// FuzzIntsMatchMsgpack: on any bytes, the fast reader and msgpack's agree on
// every value and on whether each element reads at all, except that a uint64
// past MaxInt64, which msgpack wraps, is an error on the fast path.
func FuzzIntsMatchMsgpack(f *testing.F) {
	for _, v := range intEdges {
		b, _ := msgpack.Marshal(v)
		f.Add(b)
	}
	f.Add([]byte{0xc0, 0xd0, 0x80, 0xa1, 'x'})
	f.Fuzz(func(t *testing.T, b []byte) {
		dst := make([]int64, len(b))
		used, at, err := parseInts(b, dst)
		r := bytes.NewReader(b)
		dec := msgpack.NewDecoder(r)
		for i := range dst {
			c, _ := dec.PeekCode()
			v, derr := dec.DecodeInt64()
			if derr == nil && c == 0xcf && v < 0 {
				derr = errNarrow // msgpack wrapped it
			}
			if err != nil && i == at {
				if derr == nil {
					t.Fatalf("element %d: fast path failed (%v), msgpack read %d", i, err, v)
				}
				return
			}
			if derr != nil {
				t.Fatalf("element %d: msgpack failed (%v), fast path read %d", i, derr, dst[i])
			}
			if v != dst[i] {
				t.Fatalf("element %d: fast path %d, msgpack %d", i, dst[i], v)
			}
		}
		if err == nil && used != len(b)-r.Len() {
			t.Fatalf("fast path took %d bytes, msgpack %d", used, len(b)-r.Len())
		}
	})
}
