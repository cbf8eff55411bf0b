package codec

import (
	"bytes"
	"errors"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// allocated returns the bytes f allocates on the heap.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// allocSlack is what a decode may allocate whatever its input: the
// decoder, the error it returns.
const allocSlack = 16 << 10

// maxAllocRatio is the stated bound: decoding a frame of n bytes into types
// whose elements are at most 48 bytes allocates at most 64n bytes (plus
// allocSlack), whether it succeeds or not.
const maxAllocRatio = 64

// Lengths declared past the end of the frame allocate nothing for them
// (issue 35: 5 bytes into []float64 allocated 763 MB; 0xffffffff elements
// killed the process asking for 32 GiB).
func TestForgedLengthsAllocateNothing(t *testing.T) {
	for _, c := range []struct {
		name  string
		frame []byte
		dec   func([]byte) error
	}{
		{"array32 of 50M into []float64", []byte{0xdd, 0x02, 0xfa, 0xf0, 0x80}, decodeAs[[]float64]},
		{"array32 of 2^32-1 into []float64", []byte{0xdd, 0xff, 0xff, 0xff, 0xff}, decodeAs[[]float64]},
		{"array32 of 2^32-1 into []struct", []byte{0xdd, 0xff, 0xff, 0xff, 0xff}, decodeAs[[]struct{ A, B, C int }]},
		{"map32 of 2^32-1 into map[string]int", []byte{0xdf, 0xff, 0xff, 0xff, 0xff}, decodeAs[map[string]int]},
		{"str32 of 4 GiB into string", []byte{0xdb, 0xff, 0xff, 0xff, 0xff, 'x'}, decodeAs[string]},
		{"bin32 of 4 GiB into []byte", []byte{0xc6, 0xff, 0xff, 0xff, 0xff, 'x'}, decodeAs[[]byte]},
		{"ext32 of 4 GiB into any", []byte{0xc9, 0xff, 0xff, 0xff, 0xff, 1, 'x'}, decodeAs[any]},
		{"array of 2^32-1 inside an array", []byte{0x91, 0xdd, 0xff, 0xff, 0xff, 0xff}, decodeAs[[][]int64]},
		{"elements: array32 of 2^32-1 strings", []byte{0xdd, 0xff, 0xff, 0xff, 0xff}, func(b []byte) error { return DecodeElements(b, make([]string, 1)) }},
		{"elements: a string of 4 GiB", []byte{0x91, 0xdb, 0xff, 0xff, 0xff, 0xff}, func(b []byte) error { return DecodeElements(b, make([]string, 1)) }},
		{"elements: a 4 GiB []float64 element", []byte{0x91, 0xdd, 0xff, 0xff, 0xff, 0xff}, func(b []byte) error { return DecodeElements(b, make([][]float64, 1)) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			var err error
			n := allocated(func() { err = c.dec(c.frame) })
			if err == nil {
				t.Fatal("decoded a frame whose length is past its end")
			}
			if n > allocSlack {
				t.Fatalf("allocated %d bytes for a %d-byte frame (%v)", n, len(c.frame), err)
			}
		})
	}
}

func decodeAs[T any](b []byte) error {
	_, err := DecodeValue[T](b)
	return err
}

// rec holds itself: msgpack recurses once per level.
type rec []rec

// Nesting deeper than MaxDepth is an error, not a stack overflow (issue 35:
// 6 MB of 0x91 into a rec killed the process), whatever the type.
func TestDeepNestingIsAnError(t *testing.T) {
	deep := bytes.Repeat([]byte{0x91}, 6<<20)
	deep = append(deep, 0x90)
	for name, dec := range map[string]func([]byte) error{
		"rec":   decodeAs[rec],
		"any":   decodeAs[any],
		"[]any": func(b []byte) error { return DecodeElements(b, make([]any, 1)) },
		"[]rec": func(b []byte) error { return DecodeElements(b, make([]rec, 1)) },
		"map":   decodeAs[map[string]any],
	} {
		if err := dec(deep); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "nested deeper") {
			t.Errorf("%s: %v, want ErrCorrupt: nested deeper", name, err)
		}
	}
	// MaxDepth levels decode.
	ok := append(bytes.Repeat([]byte{0x91}, MaxDepth-1), 0x90)
	if _, err := DecodeValue[rec](ok); err != nil {
		t.Fatalf("%d levels: %v", MaxDepth, err)
	}
}

type level uint8

type narrow struct {
	Small int8
	Level level
	Tags  map[int16]uint16 `msgpack:"tags"`
	Ptr   *uint32
	Inner struct{ N int32 }
}

type asArray struct {
	//lint:ignore U1000 msgpack reads its tag
	_msgpack struct{} `msgpack:",as_array"`
	A        string
	B        uint8
}

type embedded struct {
	ID uint16
}

type outer struct {
	embedded
	Name string
	Old  int8 `msgpack:"new,alias:old"`
}

// An integer that does not fit its Go type is an error, never a wrapped
// value (issue 35: 300 into a uint8 was 44, uint32 max into an int32 -1,
// uint64 max into an int -1).
func TestIntegersDoNotNarrow(t *testing.T) {
	enc := func(v any) []byte {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, c := range []struct {
		name  string
		frame []byte
		dec   func([]byte) error
	}{
		{"300 into uint8", []byte{0xcd, 0x01, 0x2c}, decodeAs[uint8]},
		{"uint32 max into int32", enc(uint32(math.MaxUint32)), decodeAs[int32]},
		{"uint64 max into int", enc(uint64(math.MaxUint64)), decodeAs[int]},
		{"uint64 max into int64", enc(uint64(math.MaxUint64)), decodeAs[int64]},
		{"-1 into uint", enc(-1), decodeAs[uint]},
		{"-129 into int8", enc(-129), decodeAs[int8]},
		{"256 into a named uint8", enc(256), decodeAs[level]},
		{"128 into a struct's int8", enc(map[string]any{"Small": 128}), decodeAs[narrow]},
		{"-1 into a struct's named uint8", enc(map[string]any{"Level": -1}), decodeAs[narrow]},
		{"40000 into a map key int16", enc(map[string]any{"tags": map[int]int{40000: 1}}), decodeAs[narrow]},
		{"70000 into a map value uint16", enc(map[string]any{"tags": map[int]int{1: 70000}}), decodeAs[narrow]},
		{"2^32 through a pointer to uint32", enc(map[string]any{"Ptr": 1 << 32}), decodeAs[narrow]},
		{"2^31 into a nested int32", enc(map[string]any{"Inner": map[string]any{"N": 1 << 31}}), decodeAs[narrow]},
		{"256 into an as_array struct's uint8", enc([]any{"a", 256}), decodeAs[asArray]},
		{"65536 into an embedded field", enc(map[string]any{"ID": 65536}), decodeAs[outer]},
		{"200 into a field by its alias", enc(map[string]any{"old": 200}), decodeAs[outer]},
		{"300 into []uint8's array form", enc([]int{1, 300}), decodeAs[[4]uint8]},
		{"elements: 300 into uint8", []byte{0x92, 0x01, 0xcd, 0x01, 0x2c}, func(b []byte) error { return DecodeElements(b, make([]uint8, 2)) }},
		{"elements: uint64 max into int", append([]byte{0x91, 0xcf}, bytes.Repeat([]byte{0xff}, 8)...), func(b []byte) error { return DecodeElements(b, make([]int, 1)) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := c.dec(c.frame); !errors.Is(err, errNarrow) {
				t.Fatalf("%x: %v, want an out-of-range error", c.frame, err)
			}
		})
	}
	// The edges of every type decode as themselves.
	v := narrow{Small: -128, Level: 255, Tags: map[int16]uint16{-32768: 65535}, Inner: struct{ N int32 }{math.MinInt32}}
	u := uint32(math.MaxUint32)
	v.Ptr = &u
	got, err := DecodeValue[narrow](enc(v))
	if err != nil || got.Small != -128 || got.Level != 255 || got.Tags[-32768] != 65535 || *got.Ptr != math.MaxUint32 || got.Inner.N != math.MinInt32 {
		t.Fatalf("edges: %+v (%v)", got, err)
	}
	o, err := DecodeValue[outer](enc(outer{embedded{65535}, "x", 127}))
	if err != nil || o.ID != 65535 || o.Old != 127 {
		t.Fatalf("embedded and renamed: %+v (%v)", o, err)
	}
	a, err := DecodeValue[asArray](enc(asArray{A: "a", B: 255}))
	if err != nil || a.B != 255 {
		t.Fatalf("as_array: %+v (%v)", a, err)
	}
}

// The element that does not fit is named, and those before it decode.
func TestNarrowElementNamed(t *testing.T) {
	frame := []byte{0x93, 0x01, 0x02, 0xcd, 0x01, 0x2c}
	dst := make([]int8, 3)
	var ee *ElementError
	if err := DecodeElements(frame, dst); !errors.As(err, &ee) || ee.Index != 2 || dst[0] != 1 || dst[1] != 2 {
		t.Fatalf("%v, dst %v: want element 2 out of range, the first two decoded", err, dst)
	}
}

// A result's failures and a task's trace context cannot claim more than the
// frame holds (issue 35: a 4 MB result allocated 192 MB of failures; a 16 MB
// task 640 MB of trace pairs).
func TestEnvelopeCounts(t *testing.T) {
	// A result whose failure array claims a failure for each of its bytes.
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	_ = e.EncodeArrayLen(6)
	_ = e.EncodeInt(version)
	_ = e.EncodeString("m-1")
	_ = e.EncodeInt(0)
	_ = e.EncodeInt(0)
	_ = e.EncodeBytes(nil)
	_ = e.EncodeArrayLen(1 << 20)
	buf.Write(bytes.Repeat([]byte{0x94}, 1<<20))
	var err error
	if n := allocated(func() { _, err = DecodeResult(buf.Bytes(), 0) }); !errors.Is(err, ErrCorrupt) || n > allocSlack {
		t.Fatalf("1M one-byte failures: %v, %d bytes allocated", err, n)
	}
	// A traced task with a million trace pairs.
	frame, _ := EncodeElements([]int{1}, 0)
	task, _ := EncodeTask(&Task{Func: "f", Sig: "s", Count: 1, Input: frame, Trace: map[string]string{"a": "b"}})
	i := bytes.Index(task, []byte{0x92, 0xa1, 'a', 0xa1, 'b'})
	forged := append(append([]byte{}, task[:i]...), 0xdd, 0x00, 0x10, 0x00, 0x00)
	for k := range 1 << 19 {
		forged = append(forged, 0xa3, byte(k>>16), byte(k>>8), byte(k), 0xa0)
	}
	forged = append(forged, 0x00)
	if n := allocated(func() { _, err = DecodeTask(forged, 0) }); !errors.Is(err, ErrCorrupt) || n > allocSlack {
		t.Fatalf("a trace context of 2^19 pairs: %v, %d bytes allocated", err, n)
	}
	// A string field whose length is past the frame's end.
	if n := allocated(func() { _, err = DecodeTask([]byte{0x9e, 0x02, 0xdb, 0xff, 0xff, 0xff, 0xff}, 0) }); err == nil || n > allocSlack {
		t.Fatalf("a 4 GiB function name: %v, %d bytes allocated", err, n)
	}
}

// A run of failures travels as one and reads back as one.
func TestFailureRuns(t *testing.T) {
	in := &Result{Task: "m-1", Values: []byte{0x93, 0xc0, 0xc0, 0xc0}, Fails: []Failure{{Index: 0, Through: 2, Kind: KindDecode, Msg: "bad"}}}
	b, err := EncodeResult(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeResult(b, 0)
	if err != nil || len(out.Fails) != 1 || out.Fails[0].Last() != 2 {
		t.Fatalf("%+v (%v)", out, err)
	}
	// A run that ends before it starts is corrupt.
	in.Fails[0] = Failure{Index: 3, Through: 3, Kind: KindDecode}
	b, _ = EncodeResult(&Result{Task: "m-1"})
	forged := append(b[:len(b)-1], 0x91, 0x95, 0x03, byte(KindDecode), 0xa0, 0xa0, 0x02)
	if _, err := DecodeResult(forged, 0); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a run ending before its start: %v", err)
	}
	f := Failure{Index: 4, Kind: KindError, Msg: "x"}
	if !f.Extend(&Failure{Index: 5, Kind: KindError, Msg: "x"}) || f.Last() != 5 || f.Extend(&Failure{Index: 6, Kind: KindError, Msg: "y"}) {
		t.Fatalf("Extend: %+v", f)
	}
}

// A time, msgpack's one extension (type -1), decodes; any other extension
// is corrupt: msgpack would read its data as a value of its own, a map
// header there sizing a map no byte of the frame backs (FuzzDecodeValue
// found 10 bytes that allocated 770 KiB).
func TestExtensionsOtherThanTimeRefused(t *testing.T) {
	at := time.Date(2026, 11, 26, 12, 0, 0, 123456789, time.UTC)
	for _, v := range []time.Time{at, at.Truncate(time.Second), time.Unix(1<<40, 1).UTC()} {
		b, err := EncodeValue(&v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeValue[time.Time](b)
		if err != nil || !got.Equal(v) {
			t.Fatalf("time %v: decoded %v, %v", v, got, err)
		}
	}
	for _, b := range [][]byte{
		[]byte("\xd70\xde0000000"),     // fixext 8 of type 0x30 holding a map16 header
		{0xd4, 0x01, 0x00},             // fixext 1 of type 1
		{0xc7, 0x02, 0x05, 0x90, 0x90}, // ext 8 of type 5
		{0xd6, 0xff, 0x00, 0x00, 0x00},
		{0xd6, 0xff, 0xde, 0x30, 0x30, 0x30}, // a time holding a map16 header, where a map is due       // a time's type, short of its 4 bytes
		{0xc7, 0x03, 0xff, 0x00, 0x00, 0x00}, // a time's type with 3 bytes
	} {
		if _, err := DecodeValue[map[string][]float64](b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("% x: %v, want ErrCorrupt", b, err)
		}
	}
}
