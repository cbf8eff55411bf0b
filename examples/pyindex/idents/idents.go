// Package idents holds the functions of examples/pyindex, shared by its
// manager and worker processes: the identifiers of Python files, counted
// and indexed, three ways (a map/reduce by key, a fold of maps, and the
// plain loop they are checked against).
package idents

import (
	"context"
	"os"
	"slices"
)

// File is one file of the tree: its number in the manager's list, and its
// path (workers read it themselves, so they need the same tree).
type File struct {
	ID   int32  `msgpack:"i"`
	Path string `msgpack:"p"`
}

// Scan calls f with each identifier of src: each maximal run of ASCII
// letters, digits and '_' that does not start with a digit (keywords, and
// words in strings and comments, count too).
func Scan(src []byte, f func(ident []byte)) {
	for i := 0; i < len(src); {
		c := src[i]
		if !word(c) {
			i++
			continue
		}
		j := i + 1
		for j < len(src) && word(src[j]) {
			j++
		}
		if c < '0' || c > '9' {
			f(src[i:j])
		}
		i = j
	}
}

func word(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// Sum adds counts.
func Sum(_ context.Context, a, b int64) (int64, error) { return a + b, nil }

// Union merges two sorted lists of file numbers into one, sorted and
// without repeats. Where one list ends before the other starts (the common
// case: a map task's files are numbered in a row) it appends, in place.
func Union(_ context.Context, a, b []int32) ([]int32, error) {
	switch {
	case len(a) == 0:
		return b, nil
	case len(b) == 0:
		return a, nil
	case a[len(a)-1] < b[0]:
		return append(a, b...), nil
	case b[len(b)-1] < a[0]:
		return append(b, a...), nil
	}
	out := make([]int32, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		var x int32
		switch {
		case j == len(b) || i < len(a) && a[i] < b[j]:
			x = a[i]
			i++
		case i == len(a) || b[j] < a[i]:
			x = b[j]
			j++
		default:
			x = a[i]
			i++
			j++
		}
		if n := len(out); n == 0 || out[n-1] != x {
			out = append(out, x)
		}
	}
	return out, nil
}

// CountFile emits (identifier, occurrences) for each identifier of f.
func CountFile(_ context.Context, f File, emit func(string, int64)) error {
	src, err := os.ReadFile(f.Path)
	if err != nil {
		return err
	}
	counts := make(map[string]int64)
	Scan(src, func(id []byte) { counts[string(id)]++ })
	for id, n := range counts {
		emit(id, n)
	}
	return nil
}

// IndexFile emits (identifier, [f.ID]) once for each identifier of f.
func IndexFile(_ context.Context, f File, emit func(string, []int32)) error {
	src, err := os.ReadFile(f.Path)
	if err != nil {
		return err
	}
	seen := make(map[string]bool)
	Scan(src, func(id []byte) {
		if !seen[string(id)] {
			seen[string(id)] = true
			emit(string(id), []int32{f.ID})
		}
	})
	return nil
}

// CountsOf is the fold's function: the identifier counts of one file, as a
// map (the manager folds the maps).
func CountsOf(ctx context.Context, f File) (map[string]int64, error) {
	m := make(map[string]int64)
	err := CountFile(ctx, f, func(id string, n int64) { m[id] += n })
	return m, err
}

// IndexOf is the fold's function for the index: each identifier of one
// file, with the file's number.
func IndexOf(ctx context.Context, f File) (map[string][]int32, error) {
	m := make(map[string][]int32)
	err := IndexFile(ctx, f, func(id string, fs []int32) { m[id] = fs })
	return m, err
}

// MergeCounts folds two maps of counts (into the larger).
func MergeCounts(_ context.Context, a, b map[string]int64) (map[string]int64, error) {
	if len(a) < len(b) {
		a, b = b, a
	}
	for k, v := range b {
		a[k] += v
	}
	return a, nil
}

// MergeIndex folds two indexes (into the larger).
func MergeIndex(ctx context.Context, a, b map[string][]int32) (map[string][]int32, error) {
	if len(a) < len(b) {
		a, b = b, a
	}
	for k, v := range b {
		u, _ := Union(ctx, a[k], v)
		a[k] = u
	}
	return a, nil
}

// Sorted returns ids sorted, for a reader to compare.
func Sorted(ids []int32) []int32 { return slices.Sorted(slices.Values(ids)) }
