package codec

import "testing"

// The fuzz targets cover every decoder of bytes read from Redis: none may
// panic, and whatever decodes must encode back to a frame that decodes the same.

func FuzzDecodeTask(f *testing.F) {
	frame, _ := EncodeElements([]int{1, 2, 3}, 0)
	seed, _ := EncodeTask(&Task{Func: "square", Sig: "func(int) int", Count: 3, Input: frame})
	f.Add(seed)
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

func FuzzDecodeElements(f *testing.F) {
	type doc struct {
		ID   int
		Name string
		Tags []string
		M    map[string]float64
	}
	seed, _ := EncodeElements([]doc{{1, "a", []string{"x"}, map[string]float64{"k": 1}}, {}}, 0)
	f.Add(seed, uint8(2))
	ints, _ := EncodeElements([]int{1, -2, 1 << 40}, 0)
	f.Add(ints, uint8(3))
	f.Fuzz(func(t *testing.T, b []byte, n uint8) {
		_ = DecodeElements(b, make([]doc, n))
		_ = DecodeElements(b, make([]int, n))
		_ = DecodeElements(b, make([]any, n))
	})
}
