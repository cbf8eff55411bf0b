package codec

import (
	"bytes"
	"reflect"
	"testing"
)

// The fuzz targets cover every decoder of bytes read from Redis: none may
// panic, and whatever decodes must encode back to a frame that decodes the same.

func FuzzDecodeTask(f *testing.F) {
	frame, _ := EncodeElements([]int{1, 2, 3}, 0)
	seed, _ := EncodeTask(&Task{Func: "square", Sig: "func(int) int", Count: 3, Input: frame})
	f.Add(seed)
	labelled, _ := EncodeTask(&Task{Func: "square", Sig: "func(int) int", Count: 3, Input: frame, Call: CallInfo{Label: "nightly"}})
	f.Add(labelled)
	f.Add([]byte{})
	f.Add([]byte{0x95, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		task, err := DecodeTask(b, 1<<20)
		if err != nil {
			return
		}
		again, err := EncodeTask(task)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeTask(again, 1<<20); err != nil {
			t.Fatalf("re-encoded task does not decode: %v", err)
		}
	})
}

func FuzzDecodeResult(f *testing.F) {
	seed, _ := EncodeResult(&Result{Task: "m-1", Values: []byte{0x91, 0x01},
		Fails: []Failure{{Index: -1, Kind: KindUnknownFunc, Msg: "no"}}})
	f.Add(seed)
	f.Add([]byte{0x96, 0x01, 0xa3, 'm', '-', '1', 0x00, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeResult(b, 1<<20)
		if err != nil {
			return
		}
		again, err := EncodeResult(r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeResult(again, 1<<20); err != nil {
			t.Fatalf("re-encoded result does not decode: %v", err)
		}
	})
}

// fuzzDoc's elements are at most 48 bytes (a map header, a slice header,
// strings, a pointer), so the stated bound, maxAllocRatio, applies.
type fuzzDoc struct {
	ID   int
	Name string
	Tags []string
	M    map[string]float64
	N    *int8
	U    uint16
}

func FuzzDecodeElements(f *testing.F) {
	seed, _ := EncodeElements([]fuzzDoc{{1, "a", []string{"x"}, map[string]float64{"k": 1}, nil, 3}, {}}, 0)
	f.Add(seed, uint8(2))
	ints, _ := EncodeElements([]int{1, -2, 1 << 40}, 0)
	f.Add(ints, uint8(3))
	f.Add([]byte{0xdd, 0x02, 0xfa, 0xf0, 0x80}, uint8(1))
	f.Add(append(bytes.Repeat([]byte{0x91}, 2000), 0x90), uint8(1))
	f.Fuzz(func(t *testing.T, b []byte, n uint8) {
		for name, dec := range map[string]func() error{
			"doc":     func() error { return DecodeElements(b, make([]fuzzDoc, n)) },
			"int":     func() error { return DecodeElements(b, make([]int, n)) },
			"any":     func() error { return DecodeElements(b, make([]any, n)) },
			"float64": func() error { return DecodeElements(b, make([]float64, n)) },
			"uint8":   func() error { return DecodeElements(b, make([]uint8, n)) },
		} {
			var err error
			if a := allocated(func() { err = dec() }); a > maxAllocRatio*uint64(len(b))+allocSlack+64*uint64(n) {
				t.Fatalf("%s: %d bytes allocated for a %d-byte frame (%v)", name, a, len(b), err)
			}
		}
	})
}

// FuzzDecodeValue: any bytes as a constant, into types of every shape,
// within the stated allocation; what decodes encodes and decodes the same.
func FuzzDecodeValue(f *testing.F) {
	seed, _ := EncodeValue(&map[string][]float64{"a": {1, 2}})
	f.Add(seed)
	f.Add([]byte{0xdd, 0x02, 0xfa, 0xf0, 0x80})
	f.Add([]byte{0xcd, 0x01, 0x2c})
	f.Add(append(bytes.Repeat([]byte{0x91}, 2000), 0x90))
	f.Fuzz(func(t *testing.T, b []byte) {
		check := func(name string, dec func() error) {
			var err error
			if a := allocated(func() { err = dec() }); a > maxAllocRatio*uint64(len(b))+allocSlack {
				t.Fatalf("%s: %d bytes allocated for a %d-byte value (%v)", name, a, len(b), err)
			}
		}
		check("map", func() error { _, err := DecodeValue[map[string][]float64](b); return err })
		check("doc", func() error { _, err := DecodeValue[fuzzDoc](b); return err })
		check("rec", func() error { _, err := DecodeValue[rec](b); return err })
		check("any", func() error { _, err := DecodeValue[any](b); return err })
		check("uint8", func() error { _, err := DecodeValue[uint8](b); return err })
		if v, err := DecodeValue[fuzzDoc](b); err == nil {
			again, err := EncodeValue(&v)
			if err != nil {
				t.Fatal(err)
			}
			if w, err := DecodeValue[fuzzDoc](again); err != nil || !reflect.DeepEqual(v, w) {
				t.Fatalf("re-encoded value decodes as %+v (%v), want %+v", w, err, v)
			}
		}
	})
}
