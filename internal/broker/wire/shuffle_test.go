package wire

import (
	"math"
	"slices"
	"testing"
)

// Ranges compress to runs and expand back to the same list; runs that are
// not triples, out of range or too many to expand are refused.
func TestRangesRoundTrip(t *testing.T) {
	for _, rs := range [][]int{
		nil,
		{0, 10},
		{0, 10, 10, 10, 20, 10, 30, 5},          // one size, then a tail
		{0, 8, 8, 8, 16, 100, 116, 100, 300, 1}, // sizes that grow, and a gap
	} {
		runs := CompressRanges(rs)
		back, err := ExpandRanges(runs)
		if err != nil || !slices.Equal(back, rs) && len(rs) > 0 {
			t.Fatalf("%v -> %v -> %v, %v", rs, runs, back, err)
		}
	}
	if runs := CompressRanges([]int{0, 10, 10, 10, 20, 10, 30, 10}); !slices.Equal(runs, []int{0, 10, 4}) {
		t.Fatalf("four ranges of 10 in a row as %v, want one run", runs)
	}
	for _, bad := range [][]int{
		{0, 10},                    // not a triple
		{-1, 10, 1},                // negative start
		{0, 0, 1},                  // empty range
		{0, 10, 0},                 // no range
		{0, 1, MaxRanges + 1},      // too many
		{0, 1, MaxRanges, 5, 1, 1}, // too many in all
		{1, math.MaxInt / 2, 3},    // past the integers
		{math.MaxInt - 5, 10, 1},   // past the integers
	} {
		if rs, err := ExpandRanges(bad); err == nil {
			t.Fatalf("runs %v expanded to %d numbers, want an error", bad, len(rs))
		}
	}
}

func FuzzExpandRanges(f *testing.F) {
	f.Add(0, 10, 3)
	f.Add(math.MaxInt-1, 2, 1)
	f.Fuzz(func(t *testing.T, start, count, times int) {
		rs, err := ExpandRanges([]int{start, count, times})
		if err != nil {
			return
		}
		if len(rs) != 2*times || times > MaxRanges {
			t.Fatalf("(%d, %d, %d) expanded to %d numbers", start, count, times, len(rs))
		}
		if !slices.Equal(CompressRanges(rs), []int{start, count, times}) {
			t.Fatalf("(%d, %d, %d) does not compress back", start, count, times)
		}
	})
}
