package idents

import (
	"context"
	"slices"
	"testing"
)

// Scan finds each identifier: letters, digits and '_', not starting with a
// digit.
func TestScan(t *testing.T) {
	var got []string
	Scan([]byte("def f_1(x):\n    return 2x + _y # café 3 z9"), func(id []byte) { got = append(got, string(id)) })
	want := []string{"def", "f_1", "x", "return", "_y", "caf", "z9"}
	if !slices.Equal(got, want) {
		t.Fatalf("Scan: %q, want %q", got, want)
	}
}

// Union gives the sorted set of both lists, whichever way they overlap.
func TestUnion(t *testing.T) {
	for _, c := range []struct{ a, b, want []int32 }{
		{nil, nil, nil},
		{[]int32{1, 2}, nil, []int32{1, 2}},
		{[]int32{1, 2}, []int32{3}, []int32{1, 2, 3}},
		{[]int32{5}, []int32{1, 2}, []int32{1, 2, 5}},
		{[]int32{1, 3, 5}, []int32{2, 3, 6}, []int32{1, 2, 3, 5, 6}},
	} {
		got, err := Union(context.Background(), slices.Clone(c.a), slices.Clone(c.b))
		if err != nil || !slices.Equal(got, c.want) {
			t.Fatalf("Union(%v, %v) = %v, %v; want %v", c.a, c.b, got, err, c.want)
		}
	}
}
