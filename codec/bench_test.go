package codec

import "testing"

// Benchmarks of the codec's hot paths, per chunk of 1,000 tiny elements; run
// with -benchmem so that a regression in allocations shows.

func BenchmarkEncodeElementsInt(b *testing.B) {
	xs := make([]int, 1000)
	for i := range xs {
		xs[i] = i * 7919
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodeElements(xs, 0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeElementsInt(b *testing.B) {
	xs := make([]int, 1000)
	for i := range xs {
		xs[i] = i * 7919
	}
	frame, _ := EncodeElements(xs, 0)
	dst := make([]int, 1000)
	b.ReportAllocs()
	for b.Loop() {
		if err := DecodeElements(frame, dst); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTaskRoundTrip(b *testing.B) {
	frame, _ := EncodeElements(make([]int, 1000), 0)
	t := &Task{Func: "square", Sig: "func(int) int", Count: 1000, Input: frame, Attempts: 3}
	b.ReportAllocs()
	for b.Loop() {
		enc, err := EncodeTask(t)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := DecodeTask(enc, 0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkResultRoundTrip(b *testing.B) {
	frame, _ := EncodeElements(make([]int, 1000), 0)
	r := &Result{Task: "0123456789abcdef0123456789abcdef-1a", Values: frame, Nanos: 12345}
	b.ReportAllocs()
	for b.Loop() {
		enc, err := EncodeResult(r)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := DecodeResult(enc, 0); err != nil {
			b.Fatal(err)
		}
	}
}

type benchDoc struct {
	ID    int
	Name  string
	Score float64
	Tags  []string
}

// BenchmarkDecodeElementsStruct: 1,000 small structs, the reflective path
// (walked first, then decoded).
func BenchmarkDecodeElementsStruct(b *testing.B) {
	xs := make([]benchDoc, 1000)
	for i := range xs {
		xs[i] = benchDoc{ID: i, Name: "doc", Score: float64(i) / 3, Tags: []string{"a", "b"}}
	}
	frame, _ := EncodeElements(xs, 0)
	dst := make([]benchDoc, len(xs))
	b.SetBytes(int64(len(frame)))
	b.ResetTimer()
	for range b.N {
		if err := DecodeElements(frame, dst); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeElementsFloat64: 1,000 float64s, the fast path.
func BenchmarkDecodeElementsFloat64(b *testing.B) {
	xs := make([]float64, 1000)
	for i := range xs {
		xs[i] = float64(i) / 7
	}
	frame, _ := EncodeElements(xs, 0)
	dst := make([]float64, len(xs))
	b.SetBytes(int64(len(frame)))
	b.ResetTimer()
	for range b.N {
		if err := DecodeElements(frame, dst); err != nil {
			b.Fatal(err)
		}
	}
}
