// Package steps holds the steps of the pipeline example, which the manager
// and the workers both import: a Go file's identifiers, counted by
// identifier, then the most frequent per first letter.
package steps

import (
	"cmp"
	"context"
	"fmt"
	"go/scanner"
	"go/token"
	"os"
	"slices"
	"strings"

	"github.com/redmap/redmap"
)

// Top is how many identifiers a letter keeps.
const Top = 5

// Count is an identifier and how often it occurs.
type Count struct {
	Ident string `msgpack:"i"`
	N     int    `msgpack:"n"`
}

// Identifiers emits the identifiers of the Go file at a path (step 1, a flat
// map): the workers read the file, so workers on other machines need the
// same tree at the same path.
var Identifiers = redmap.FlatMap("pipeline.identifiers", func(_ context.Context, path string, emit func(string)) error {
	src, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	Scan(src, emit)
	return nil
}, redmap.Idempotent())

// Scan calls emit with each identifier of Go source src, as go/scanner
// reads it (a file that does not scan ends where it stops scanning).
func Scan(src []byte, emit func(string)) {
	fset := token.NewFileSet()
	var s scanner.Scanner
	s.Init(fset.AddFile("", fset.Base(), len(src)), src, nil, 0)
	for {
		_, tok, lit := s.Scan()
		if tok == token.EOF {
			return
		}
		if tok == token.IDENT {
			emit(lit)
		}
	}
}

// One emits an identifier with a count of 1 (step 2, by key with Sum).
var One = redmap.Emit("pipeline.one", func(_ context.Context, ident string, emit func(string, int)) error {
	emit(ident, 1)
	return nil
}, redmap.Idempotent())

// Sum adds counts.
var Sum = redmap.Reduce("pipeline.sum", func(_ context.Context, a, b int) (int, error) { return a + b, nil })

// ByLetter emits an identifier's count under its first letter, lower-cased
// (step 3, by key with Best).
var ByLetter = redmap.Emit("pipeline.byletter", func(_ context.Context, kv redmap.KV[string, int], emit func(string, []Count)) error {
	emit(strings.ToLower(kv.Key[:1]), []Count{{kv.Key, kv.Value}})
	return nil
}, redmap.Idempotent())

// Best keeps the Top identifiers counted most, ties by identifier: a
// reducer must be associative and commutative, and this one is.
var Best = redmap.Reduce("pipeline.best", func(_ context.Context, a, b []Count) ([]Count, error) {
	return Keep(append(slices.Clone(a), b...)), nil
})

// Keep returns the Top counts of cs, most first, ties by identifier.
func Keep(cs []Count) []Count {
	slices.SortFunc(cs, func(a, b Count) int { return cmp.Or(cmp.Compare(b.N, a.N), strings.Compare(a.Ident, b.Ident)) })
	return cs[:min(Top, len(cs))]
}

// Line prints a letter's identifiers (step 4).
var Line = redmap.Func("pipeline.line", func(_ context.Context, kv redmap.KV[string, []Count]) (string, error) {
	return Format(kv.Key, kv.Value), nil
}, redmap.Idempotent())

// Format is a letter's line: "a: append=123 any=45 ...".
func Format(letter string, cs []Count) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = fmt.Sprintf("%s=%d", c.Ident, c.N)
	}
	return letter + ": " + strings.Join(parts, " ")
}

// All are the handles a worker registers.
var All = []redmap.AnyHandle{Identifiers, One, Sum, ByLetter, Best, Line}
